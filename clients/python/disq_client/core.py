"""The client's sans-I/O core: every choice `Client` and `AsyncClient` make, no I/O.

The two clients are shells around a `ClientCore`: they open connections, write the
bytes it gives (`HELLO_REQUEST`, a command's RESP), read replies with hiredis, and tell
the core what happened; the core answers what to do next:

- which nodes to try, best first (`candidates`), and after a node answered HELLO
  (`hello_reply`, which makes it current) which better ones to move to (`better_than`);
- a connection broke or timed out during a command (`broken`): send the command again
  to the next node, or give up (the retry policy, disq_client.retry);
- a node refused a command (`refused`): raise the typed error, or send the command to
  another node (-LEAVING, -LOADING);
- a consumer received jobs (`follow`): the node to move to, if another one produced
  most of them;
- a scan's cursor (`ScanCursor`), which starts again when the client changed nodes.

Nothing here sleeps, blocks or opens a socket: tests drive it with replies and a clock
(tests/test_pyclient_core.py). The commands' arguments and reply parsers are in
commands.py, the cluster view (nodes, priorities, failures) in cluster.py.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import commands as cmds
from .cluster import ClusterView
from .errors import DisqConnectionError
from .protocol import Address, ErrorReply, check, encode, from_error_reply
from .retry import RetryPolicy, moves_on
from .types import Hello, Job

if TYPE_CHECKING:
    import ssl

Nodes = str | Address | Sequence[str | Address]

DEFAULT_NODE = "127.0.0.1:7711"
ADD_TIMEOUT_MS = 5000
BATCH_SIZE = 1000

HELLO_REQUEST = encode(cmds.hello().args)
_HELLO = cmds.hello()


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """How every connection of a client connects and waits, in Client and AsyncClient
    alike. `timeout` bounds every wait for a reply, in seconds (commands that block on
    the server add how much longer they may take); `password` is sent with AUTH on
    every connection; `ssl_context` makes it TLS."""

    timeout: float | None = 5.0
    connect_timeout: float | None = 2.0
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None


DEFAULT_SETTINGS = ConnectionSettings()


def seed_list(nodes: Nodes) -> list[str | Address]:
    """The seeds given as "host:port", "host:port,host:port", (host, port) or a list."""
    if isinstance(nodes, str):
        return [n.strip() for n in nodes.split(",") if n.strip()]
    if isinstance(nodes, tuple) and len(nodes) == 2 and isinstance(nodes[1], int):
        return [nodes]
    return list(nodes)


def failover_policy(retries: int) -> RetryPolicy:
    """The client's: `retries` more tries after the first, each on the next node, at
    once (the node that failed is put last, so the retry goes elsewhere)."""
    return RetryPolicy(max_attempts=max(retries, 0) + 1, base_delay=0.0, jitter=0.0)


class ClientCore:
    """What a client knows (the cluster view) and decides. `generation` counts the
    client's `close()`s: a command that began before the last one gives up instead of
    failing over, so that close() wakes a blocked consumer with an error."""

    __slots__ = ("failovers", "generation", "policy", "view")

    def __init__(self, nodes: Nodes = DEFAULT_NODE, *, switch_after_jobs: int = 100,
                 retries: int = 3, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.view = ClusterView(seed_list(nodes), switch_after_jobs, clock=clock, rng=rng)
        self.policy = failover_policy(retries)
        self.generation = 0
        self.failovers = 0  # commands sent again to another node after a broken connection

    @property
    def retries(self) -> int:
        attempts = self.policy.max_attempts
        assert attempts is not None
        return attempts - 1

    @retries.setter
    def retries(self, retries: int) -> None:
        self.policy = failover_policy(retries)

    def close(self) -> None:
        """The client closed its connections: no current node, commands in flight stop."""
        self.generation += 1
        self.view.current = None

    def closed_since(self, generation: int) -> bool:
        return generation != self.generation

    # -- connecting ---------------------------------------------------------------------
    def candidates(self) -> list[Address]:
        """The nodes to connect to, best first (send HELLO_REQUEST to each in turn)."""
        return self.view.candidates()

    def hello_reply(self, addr: Address, reply: object) -> Hello:
        """A new connection to `addr` answered HELLO: the node is now the current one,
        and the nodes it lists are known. An error reply raises its ResponseError."""
        hello = _HELLO.parse(check(reply))
        self.view.connected(addr, hello)
        return hello

    def connect_failed(self, addr: Address) -> None:
        """`addr` could not be reached, or did not answer HELLO in time."""
        self.view.failed(addr)

    def better_than(self, addr: Address) -> list[Address]:
        """Once connected to `addr`: nodes worth moving to (a better HELLO priority,
        e.g. when the seed is leaving), best first."""
        return self.view.better_than(addr)

    @staticmethod
    def no_node(failures: Sequence[str]) -> DisqConnectionError:
        """The error when none of the candidates answered."""
        return DisqConnectionError("no node answered: " + "; ".join(failures))

    # -- a command ----------------------------------------------------------------------
    def broken(self, addr: Address, failures: int) -> bool:
        """The connection to `addr` broke or timed out during a command, its `failures`-th
        failure: whether to send it again (to the next node; `addr` goes last). The
        shell checks `closed_since` first: a closed client does not fail over."""
        self.view.failed(addr)
        if not self.policy.allows(failures):
            return False
        self.failovers += 1
        return True

    def refused(self, addr: Address, reply: ErrorReply, failures: int) -> None:
        """`addr` answered a command with an error, its `failures`-th failure. Returns if
        the command goes again to another node (the node is leaving or loading: it now
        has HELLO's priority 100); raises the reply's typed error otherwise."""
        exc = from_error_reply(reply)
        if moves_on(exc) and self.policy.allows(failures):
            self.view.leaving(addr)
            return
        raise exc

    def follow(self, jobs: Sequence[Job]) -> Address | None:
        """A GETJOB gave `jobs`: the node to move to, if it produced most jobs lately."""
        return self.view.note_jobs(jobs)

    def hello_answered(self, hello: Hello) -> None:
        """A HELLO command (the method, not a connection's) answered on the current node."""
        if self.view.current is not None:
            self.view.learn(self.view.current, hello)

    def scan(self) -> ScanCursor:
        return ScanCursor(self.view)


class ScanCursor:
    """A QSCAN/JSCAN followed to its end on the current node. If the client moves to
    another node meanwhile the scan starts again there (it may then repeat items, as
    Disque's scans do): before a page, and when it moved while the page was fetched.

        scan = core.scan()
        while not scan.done:
            cursor, items = run(make(scan.next()))
            if scan.answered(cursor):
                use(items)
    """

    __slots__ = ("_node", "_sent", "_view", "cursor", "done")

    def __init__(self, view: ClusterView) -> None:
        self._view = view
        self._node: Address | None = None  # where the pages so far came from
        self._sent = 0
        self.cursor = 0
        self.done = False

    def next(self) -> int:
        """The cursor to send for the next page."""
        if self._node is not None and self._node != self._view.current:
            self.cursor = 0
        self._sent = self.cursor
        return self._sent

    def answered(self, cursor: int) -> bool:
        """The page's reply gave `cursor`: False if the client moved to another node
        while the page was fetched (its items are dropped, the scan starts again)."""
        current = self._view.current
        if self._sent and self._node != current:
            self._node = None
            self.cursor = 0
            return False
        self._node = current
        self.cursor = cursor
        self.done = cursor == 0
        return True
