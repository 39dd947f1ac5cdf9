"""Who acts for an ORDERKEY (disq/orderkeys.py) across the cluster: the key's *owner*,
the first reachable node (this one included) in the order of the key within its
queue (targets.py's rendezvous hashing, `key_order`), the same on every node that sees
the same nodes. The copies of a key's new jobs go to the first nodes of that order
(Copies.replicate), so the owner, and the nodes next in line to take over from it,
hold them. A held copy whose owner has none (a REPLICATE 1 job added on another node,
an owner that came back without it) is sent to it (`hand_off`). A strict key has no
owner on a side that does not reach a majority of the known nodes: the jobs of strict
keys queued here leave their queues when this node loses its majority (checked every
MAJORITY_CHECK_MS), and its ADDJOBs of strict keys are refused (-NOMAJORITY)."""

from __future__ import annotations

import asyncio
from typing import Final

from ..cluster.port import BusPort
from ..job import Job, with_holders
from ..node import Node, now_ms
from ..orderkeys import NO_MAJORITY, OTHER, OWNER
from .copies import Copies
from .targets import key_order, owner_key

MAJORITY_CHECK_MS: Final = 100
MAX_OWNERS_KEPT: Final = 100_000  # owners looked up since the last topology change


class OrderOwners:
    """Installs the cluster's answers in `node.orderkeys`."""

    def __init__(self, node: Node, bus: BusPort, copies: Copies,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self.copies = copies
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._peers: object = None  # the reachable list the owners below were found for
        self._owners: dict[tuple[bytes, bytes], str] = {}
        self._had_majority = True
        orderkeys = node.orderkeys
        orderkeys.acts_for = self.acts_for
        orderkeys.hand_off = self.hand_off
        orderkeys.has_majority = self.has_majority

    def has_majority(self) -> bool:
        """Whether this node reaches a majority of the known nodes, itself included."""
        return 2 * (1 + len(self.bus.reachable_peers())) > self.bus.cluster_size

    def owner(self, queue: bytes, key: bytes) -> str:
        peers = self.bus.reachable_peers()  # a new list when the topology changes
        owners = self._owners
        if peers is not self._peers or len(owners) > MAX_OWNERS_KEPT:
            owners.clear()
            self._peers = peers
        owner = owners.get((queue, key))
        if owner is None:
            my_id = self.node.id
            owner = owners[(queue, key)] = key_order(
                owner_key(queue, key), [my_id] + [n.id for n in peers])[0]
        return owner

    def acts_for(self, queue: bytes, key: bytes, strict: bool) -> int:
        self._watch()
        if strict and not self.has_majority():
            return NO_MAJORITY
        return OWNER if self.owner(queue, key) == self.node.id else OTHER

    def hand_off(self, job: Job) -> None:
        """A copy held here for an owner that may have none: it gets one (NOREPLY)."""
        ext = job.ext
        if ext is None or ext.orderkey is None or job.queue is None:
            return
        owner = self.owner(ext.dead_from or job.queue, ext.orderkey)
        holders = job.nodes_delivered
        if owner == self.node.id or (holders is not None and owner in holders):
            return
        job.nodes_delivered = with_holders(holders or self.node.only_me, (owner,))
        self.copies.send_copy(job, owner, now_ms())

    # -- strict keys: the majority watched ---------------------------------------------
    def _watch(self) -> None:
        """Check the majority every MAJORITY_CHECK_MS while this node holds keyed jobs."""
        if self._timer is not None:
            return
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests)
        self._timer = self._loop.call_later(MAJORITY_CHECK_MS / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        majority = self.has_majority()
        if self._had_majority and not majority:
            self.node.orderkeys.withhold_strict(now_ms())
        self._had_majority = majority
        if len(self.node.orderkeys):
            self._watch()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
