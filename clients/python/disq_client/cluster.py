"""What a client knows of the cluster, and its choices of node. No I/O here: it is part
of the client's sans-I/O core (`ClientCore`, core.py), which tells it what happened.

The policy is the one Disque recommends to its clients:
- start from a random seed, learn every node from HELLO;
- prefer nodes by HELLO priority (1 fine, 5 no link, 10 possibly failing, 100 failing or
  leaving), and put a node that just failed to answer after the others for a while;
- a consumer moves to the node that produced most of the jobs it receives (the 8 hex
  digits after `D-` in a job ID start the producing node's ID): it then takes jobs where
  they are queued instead of having them moved to it by federation.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .protocol import Address, parse_address
from .types import Hello, Job, node_prefix

FAILED_PENALTY = 10.0  # s: a node that failed is tried after the others for this long
DEFAULT_PRIORITY = 1


@dataclass(slots=True)
class NodeEntry:
    addr: Address
    id: str | None = None
    priority: int = DEFAULT_PRIORITY
    failed_at: float | None = None  # monotonic time of the last failure to talk to it

    def recently_failed(self, now: float) -> bool:
        return self.failed_at is not None and now - self.failed_at < FAILED_PENALTY


class ClusterView:
    """Known nodes by address, the current node, and the producers of received jobs.

    `switch_after_jobs` is the window of received jobs after which a consumer looks for
    a node that produced more than half of them (0 turns this off). `clock` (monotonic
    seconds) and `rng` (which shuffles the seeds) are there for tests.
    """

    def __init__(self, seeds: Sequence[str | Address], switch_after_jobs: int = 100, *,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        if not seeds:
            raise ValueError("give at least one node address")
        self.seeds = [parse_address(s) for s in seeds]
        self.nodes: dict[Address, NodeEntry] = {a: NodeEntry(a) for a in self.seeds}
        self.current: Address | None = None
        self.preferred: Address | None = None  # tried first among equals (`prefer`)
        self.hello_seen = False
        self.switch_after_jobs = switch_after_jobs
        self._origins: Counter[str] = Counter()
        self._received = 0
        self._clock = clock
        self._shuffle = rng.shuffle if rng is not None else random.shuffle

    # -- choosing a node ----------------------------------------------------------------
    def prefer(self, addr: str | Address | None) -> None:
        """Try `addr` first among the nodes as good as it (same priority, no recent
        failure): a producer spread over the nodes by its index (a Spark task per
        partition) starts on its own node and still fails over as any client. None:
        no preference."""
        self.preferred = None if addr is None else parse_address(addr)

    def candidates(self, exclude: Iterable[Address] = ()) -> list[Address]:
        """Nodes to try, best first: before any HELLO the seeds in random order, then
        by priority, with the ones that failed lately last (the `preferred` node first
        among its equals)."""
        now = self._clock()
        skip = set(exclude)
        entries = [e for e in self.nodes.values() if e.addr not in skip]
        self._shuffle(entries)
        preferred = self.preferred
        entries.sort(key=lambda e: (e.recently_failed(now), e.priority, e.addr != preferred))
        return [e.addr for e in entries]

    def better_than(self, addr: Address) -> list[Address]:
        """Nodes with a better priority than `addr` that did not fail lately."""
        entry = self.nodes.get(addr)
        if entry is None:
            return []
        now = self._clock()
        return [a for a in self.candidates((addr,))
                if self.nodes[a].priority < entry.priority
                and not self.nodes[a].recently_failed(now)]

    # -- what happened ------------------------------------------------------------------
    def connected(self, addr: Address, hello: Hello) -> None:
        """`addr` answered HELLO and is now the current node."""
        self.current = addr
        entry = self.nodes.setdefault(addr, NodeEntry(addr))
        entry.failed_at = None
        self.learn(addr, hello)

    def failed(self, addr: Address) -> None:
        entry = self.nodes.get(addr)
        if entry is not None:
            entry.failed_at = self._clock()
        if self.current == addr:
            self.current = None

    def leaving(self, addr: Address) -> None:
        """The node answered -LEAVING (or -LOADING): as HELLO would show it, priority
        100, until the next HELLO says otherwise."""
        entry = self.nodes.get(addr)
        if entry is not None:
            entry.priority = 100
        if self.current == addr:
            self.current = None

    def learn(self, addr: Address, hello: Hello) -> None:
        """Take the nodes a HELLO reply lists. A node keeps the address the client
        reached it at; nodes the cluster no longer lists are dropped, seeds excepted."""
        self.hello_seen = True
        me = self.nodes[addr]
        for other in list(self.nodes.values()):  # the ID now answers at `addr`
            if other is not me and other.id == hello.node_id and other.addr not in self.seeds:
                del self.nodes[other.addr]
        me.id = hello.node_id
        by_id = {e.id: e for e in self.nodes.values() if e.id is not None}
        by_id[me.id] = me
        listed = {me.id}
        for node in hello.nodes:
            listed.add(node.id)
            entry = by_id.get(node.id)
            if entry is None:
                if not node.host or not node.port:
                    continue  # no address known for it yet
                naddr = (node.host, node.port)
                entry = self.nodes.setdefault(naddr, NodeEntry(naddr))
                entry.id = node.id
                by_id[node.id] = entry
            entry.priority = node.priority
        for a, entry in list(self.nodes.items()):
            if (entry.id is not None and entry.id not in listed and a not in self.seeds
                    and a != self.current):
                del self.nodes[a]

    def by_prefix(self, prefix: str) -> NodeEntry | None:
        for entry in self.nodes.values():
            if entry.id is not None and entry.id.startswith(prefix):
                return entry
        return None

    @property
    def current_id(self) -> str | None:
        entry = self.nodes.get(self.current) if self.current else None
        return entry.id if entry else None

    # -- following the producers --------------------------------------------------------
    def note_jobs(self, jobs: Sequence[Job]) -> Address | None:
        """Count who produced the jobs received; at the end of each window, the node to
        move to if another node produced more than half of them."""
        if not self.switch_after_jobs or not jobs:
            return None
        origins = self._origins
        for job in jobs:
            origins[node_prefix(job.id)] += 1
        self._received += len(jobs)
        if self._received < self.switch_after_jobs:
            return None
        (prefix, count), = origins.most_common(1)
        total = self._received
        origins.clear()
        self._received = 0
        current_id = self.current_id
        if count * 2 <= total or (current_id is not None and current_id.startswith(prefix)):
            return None
        entry = self.by_prefix(prefix)
        if entry is None or entry.recently_failed(self._clock()):
            return None
        current = self.nodes.get(self.current) if self.current else None
        if current is not None and entry.priority > current.priority:
            return None
        return entry.addr
