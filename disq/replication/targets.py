"""Where the copies of a new job go (REPLJOB's targets): random reachable peers, the
same pick for the jobs of one loop turn, or for a job whose copies check its DEDUP key
the first peers in an order drawn from the key (rendezvous hashing, `key_order`; see
replication/dedup_checks.py for why)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import zlib
from collections.abc import Iterable
from typing import Any, Final

from ..cluster.port import BusPort
from ..job import NO_HOLDERS, Job, holder_set
from ..node import Node

# The order of a key: the highest `key_order_score(crc32(key), key_order_salt(node ID))`
# first, the same on every node.
KEY_ORDER_MIX: Final = 0x9E3779B97F4A7C15  # odd: spreads the low bits of the xor over all 64
KEY_ORDER_MASK: Final = (1 << 64) - 1


def key_order_salt(node_id: str) -> int:
    """A node's salt in the order of keys: the same in every process (unlike hash())."""
    return int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=8).digest(), "big")


def key_order_score(key_hash: int, salt: int) -> int:
    """A node's place in a key's order (`key_hash`: zlib.crc32 of the key): one hash
    per key and a multiply per node, cheap enough for every DEDUP ADDJOB."""
    return ((key_hash ^ salt) * KEY_ORDER_MIX) & KEY_ORDER_MASK


def key_order(key: bytes, node_ids: Iterable[str]) -> list[str]:
    """`node_ids` in `key`'s order, first first (where its copies go)."""
    key_hash = zlib.crc32(key)
    return sorted(node_ids, reverse=True,
                  key=lambda node_id: key_order_score(key_hash, key_order_salt(node_id)))


def owner_key(queue: bytes, key: bytes) -> bytes:
    """The bytes whose order ranks the nodes for an ORDERKEY of a queue (its owner
    first: replication/orderkeys.py)."""
    return queue + b"\n" + key


def first_reachable(key: bytes, my_id: str, bus: BusPort) -> str:
    """The first of the reachable nodes (this one included) in `key`'s order: the one
    that acts for the key (fires a CRON tick, a batch's callbacks), the same on every
    node that sees the same nodes."""
    return key_order(key, [my_id] + [n.id for n in bus.reachable_peers()])[0]


def majority_replication(wanted: int | None, size: int, reached: int) -> int:
    """The copies of a job one node adds for the whole cluster (a CRON tick, a batch's
    callback): `wanted` (None: 3, or every node if fewer) raised to a majority of the
    `size` known nodes, so that a second firer's copy meets one of them, and lowered
    to the `reached` nodes (this one included), which are all it can place copies on;
    0 when those are no majority (the majority side adds the job, or nobody)."""
    if reached * 2 <= size:
        return 0
    if wanted is None:
        wanted = min(size, 3)
    return min(max(wanted, size // 2 + 1), reached)


class Targets:
    """`add` picks the targets. `loop`: the picks of a loop turn are shared only when
    set (by the owner, once it has a loop)."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self.loop = loop
        # add's last answer: (peers, holders before, candidates, all holders,
        # [([candidate], holders with it), ...], {count: this loop turn's pick},
        # {targets in a DEDUP key's order: (targets, holders with them)})
        self._last: tuple[Any, ...] = (None, None, [], NO_HOLDERS, [], {}, {})
        self._salts: dict[str, int] = {}  # node ID -> key_order_salt(node ID)

    def add(self, job: Job, count: int, key: bytes | None = None,
            key_first: bool = False) -> list[str]:
        """Add up to `count` random reachable nodes that do not hold the job yet to
        its `nodes_delivered`; returns them (a list that may be shared: read only).
        The jobs of one loop turn get the same random pick: their copies travel in
        one REPLJOB per target and come back confirmed together, so the replies to a
        client's pipeline leave in one write (a pick per job spread them over the
        GOTJOBs of several peers). Over many turns the load is spread as evenly.
        With the DEDUP `key` its copies check, the first nodes in the key's order
        instead when the cluster has more than REPLICATE+1 nodes (`_first_in_key_order`),
        or always when `key_first` (an ORDERKEY's copies: its owner first)."""
        delivered = job.nodes_delivered
        if delivered is None:
            job.nodes_delivered = delivered = self.node.only_me
        if count <= 0:
            return []
        peers = self.bus.reachable_peers()  # a new list when the topology changes
        candidates: list[str]
        targets: list[str]
        cached = self._last
        if cached[0] is peers and cached[1] is delivered:  # a new job, as the last one
            candidates, everyone, one_more, picks, in_key_order = cached[2:]
        else:
            candidates = [n.id for n in peers if n.id not in delivered]
            everyone = holder_set(delivered.union(candidates))
            one_more = [([i], holder_set(delivered.union((i,)))) for i in candidates]
            picks = {}
            in_key_order = {}
            self._last = (peers, delivered, candidates, everyone, one_more, picks,
                          in_key_order)
        n = len(candidates)
        if count >= n:  # all of them (REPLICATE 3 on three nodes)
            if candidates:
                job.nodes_delivered = everyone
            return candidates
        if key is not None and (key_first or self.bus.cluster_size > job.repl + 1):
            return self._first_in_key_order(job, count, key, candidates, one_more,
                                            in_key_order)
        pick = picks.get(count)
        if pick is None:
            if count == 1:  # REPLICATE 2, or one more node for a waiting job
                pick = one_more[int(random.random() * n)]
            else:
                chosen = random.sample(candidates, count)
                pick = (chosen, holder_set(delivered.union(chosen)))
            if self.loop is not None:  # kept until the end of this loop turn
                picks[count] = pick
                self.loop.call_soon(picks.clear)
        targets, job.nodes_delivered = pick
        return targets

    def _first_in_key_order(self, job: Job, count: int, key: bytes, candidates: list[str],
                            one_more: list[tuple[list[str], frozenset[str]]],
                            in_key_order: dict[tuple[str, ...], tuple[Any, ...]]) -> list[str]:
        """`add` for a job whose copies check its DEDUP key: the `count` candidates
        first in the key's order (rendezvous hashing, `key_order`), the same on every
        node. An origin killed while its copies were leaving leaves them on the first
        nodes of that order (but itself and the nodes it could not reach); a retry of
        the key on another node sends its copies to the same first nodes, and one more
        in that order each time it waits for a node (the dead origin), so they meet
        those copies, which refuse them: the retry then asks every node and gets the
        first job's ID (replication/dedup_checks.py). Used when the cluster has more than
        REPLICATE+1 nodes: with fewer (REPLICATE 2 on three nodes), a retry's job
        needs every live peer but the dead origin, so the random pick of the loop turn
        stays (its copies travel together)."""
        targets: list[str]
        salts = self._salts
        key_hash = zlib.crc32(key)
        if count == 1:  # REPLICATE 2, or one more node for a waiting job
            best, best_score = 0, -1
            for index, node_id in enumerate(candidates):
                salt = salts.get(node_id)
                score = key_order_score(key_hash, self._salt(node_id) if salt is None else salt)
                if score > best_score:
                    best, best_score = index, score
            targets, job.nodes_delivered = one_more[best]
            return targets
        scored = []
        for node_id in candidates:
            salt = salts.get(node_id)
            scored.append((key_order_score(key_hash, self._salt(node_id) if salt is None
                                           else salt), node_id))
        scored.sort(reverse=True)
        chosen = tuple(node_id for _, node_id in scored[:count])
        pick = in_key_order.get(chosen)
        if pick is None:
            delivered = job.nodes_delivered
            assert delivered is not None
            pick = in_key_order[chosen] = (list(chosen), holder_set(delivered.union(chosen)))
        targets, job.nodes_delivered = pick
        return targets

    def _salt(self, node_id: str) -> int:
        salts = self._salts
        if len(salts) >= 4096:  # node IDs come and go (CLUSTER RESET, FORGET): bounded
            salts.clear()
        salts[node_id] = salt = key_order_salt(node_id)
        return salt
