"""Who acts for an ORDERKEY (disq/orderkeys.py) across the cluster: the key's *owner*,
the first reachable node (this one included) in the order of the key within its
queue (targets.py's rendezvous hashing, `key_order`), the same on every node that sees
the same nodes. The copies of a key's new jobs go to the first nodes of that order
(Copies.replicate), so the owner, and with REPLICATE 3 or more the next in line,
hold them all.

A takeover: when the reachable nodes change, every node sends the copies it holds of
keyed jobs to their key's owner if it may have none (`hand_off`, also done for a held
copy whose RETRY ran out), and a node that became a key's owner then waits
a grace (twice the cluster node timeout: the others notice the change within it) before it
queues anything of the key, so that the copies it lacks reach it first and the order
it releases is the key's whole order. When a peer comes back (a healed partition, a
restart) every key waits so: the peer may hold jobs of any key this node lacks. A
node does not notice a heal when the other side does: until it does it acts for keys
as before, while nodes that noticed hand their copies to the new owners, move released
jobs to it by federation or ack jobs it holds. So a frame from a node counted failing
here (`bus.failing_heard`) starts that grace for every key at once, and while a grace
runs here the copies of a new keyed job go to the key's former owner too (a node still
acting as that owner gets every job it could release: `former_owner`).

A strict key has no owner on a side that does not reach a majority of the known nodes:
the jobs of strict keys queued here leave their queues when this node loses its
majority (checked every MAJORITY_CHECK_MS), and its ADDJOBs of strict keys are refused
(-NOMAJORITY; admission.py also replicates them to a majority, so a side without one
cannot add any even before it notices)."""

from __future__ import annotations

import asyncio
from typing import Final

from ..cluster.port import BusPort
from ..job import Job, with_holders
from ..node import Node, now_ms
from ..orderkeys import NO_MAJORITY, NOT_YET, OTHER, OWNER
from .copies import Copies
from .targets import key_order, owner_key

MAJORITY_CHECK_MS: Final = 100
# A takeover waits twice the node timeout (the other nodes notice a change within about
# one and a half: a node is flagged once a ping waited the timeout, and pings go out
# every half of it at the least), this long at least.
GRACE_NODE_TIMEOUTS: Final = 2
MIN_GRACE_MS: Final = 500
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
        self._peer_ids: frozenset[str] | None = None  # ... and its IDs
        self._owners: dict[tuple[bytes, bytes], str] = {}
        # the reachable peers before the last change, and until when a key this node
        # owns since then (and did not before) waits for the copies it lacks
        self._before: list[str] | None = None
        self._grace_until = 0
        self._grace_all = False  # ... or every key (a peer came back)
        self._failing_heard = bus.failing_heard
        orderkeys = node.orderkeys
        orderkeys.acts_for = self.acts_for
        orderkeys.hand_off = self.hand_off
        orderkeys.has_majority = self.has_majority
        orderkeys.grace_left = self.grace_left
        orderkeys.unseen_wait = self.unseen_wait
        copies.former_owner = self.former_owner

    def has_majority(self) -> bool:
        """Whether this node reaches a majority of the known nodes, itself included."""
        return 2 * (1 + len(self.bus.reachable_peers())) > self.bus.cluster_size

    def owner(self, queue: bytes, key: bytes) -> str:
        if self.bus.failing_heard != self._failing_heard:
            self._failing_talks()
        peers = self.bus.reachable_peers()  # a new list when the topology changes
        owners = self._owners
        if peers is not self._peers or len(owners) > MAX_OWNERS_KEPT:
            ids = frozenset(n.id for n in peers)
            if ids != self._peer_ids:  # (a new list may list the same nodes)
                self._topology_changed(ids)
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
        my_id = self.node.id
        if self.owner(queue, key) != my_id:
            return OTHER
        if self._grace_until and self._before is not None:
            if now_ms() >= self._grace_until:
                self._grace_until = 0
                self._grace_all = False
            elif self._grace_all or key_order(owner_key(queue, key),
                                              [my_id] + self._before)[0] != my_id:
                return NOT_YET  # a takeover: the copies this node lacks first
        return OWNER

    def former_owner(self, queue: bytes, key: bytes) -> str | None:
        """While a takeover's grace runs here: the key's owner before the change, if it
        is another node than now and still reachable (a node that has not noticed the
        change acts as before: the copies of a new job go to it too, Copies.replicate)."""
        owner = self.owner(queue, key)  # (notices a change first)
        if not self._grace_until or self._before is None or now_ms() >= self._grace_until:
            return None
        my_id = self.node.id
        former = key_order(owner_key(queue, key), [my_id] + self._before)[0]
        if former == owner or former == my_id or former not in (self._peer_ids or ()):
            return None
        return former

    def grace_left(self) -> int:
        """Ms until a key taken over may be released (0: none waits)."""
        return max(self._grace_until - now_ms(), 0) if self._grace_until else 0

    def unseen_wait(self, job: Job) -> int:
        """How long a copy that arrived waits before its owner queues it: a grace if
        one of its holders is a node this node does not reach (it came across a
        partition that healed before this node noticed, or from a takeover), else 0."""
        holders = job.nodes_delivered
        if holders is None:
            return 0
        self.owner(b"", b"")  # (the reachable peers up to date)
        seen = self._peer_ids or frozenset()
        my_id = self.node.id
        for node_id in holders:
            if node_id != my_id and node_id not in seen:
                return self._grace_ms()
        return 0

    def _grace_ms(self) -> int:
        return max(GRACE_NODE_TIMEOUTS * self.node.config.cluster_node_timeout,
                   MIN_GRACE_MS)

    def _failing_talks(self) -> None:
        """A node this one counts failing sent it something: a partition healing, seen
        here before the failure detector clears its flag. Until then this node still
        acts for keys as before, while the other side may already act on the new view
        (hand its copies over, move a released job here by federation, ack a job and
        so release the next): every key waits a grace, as for a peer that came back."""
        self._failing_heard = self.bus.failing_heard
        now = now_ms()
        if self._before is None or self._grace_until <= now:
            self._before = list(self._peer_ids or ())
        self._grace_all = True
        self._grace_until = max(self._grace_until, now + self._grace_ms())

    def _topology_changed(self, ids: frozenset[str]) -> None:
        """The reachable peers changed: a takeover's grace starts (the old ones are
        kept to tell the keys this node owns since), and the copies held here go to
        their keys' owners that may lack them."""
        old = self._peer_ids
        self._peer_ids = ids
        if old is not None:
            now = now_ms()
            before = set(old)
            if self._grace_until > now and self._before is not None:
                before.update(self._before)  # (changes in a row: one takeover)
            self._before = list(before)
            # A peer that came back (a healed partition, a restart) may hold jobs this
            # node lacks, of any key: every key waits then, not only those taken over.
            self._grace_all = self._grace_all and self._grace_until > now or not (
                ids <= before)
            self._grace_until = now + self._grace_ms()
        self._owners.clear()
        for line in list(self.node.orderkeys.lines.values()):
            for job in list(line):
                self.hand_off(job)

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
        if self.bus.reachable_peers() is not self._peers:
            self.owner(b"", b"")  # (notices the change: hand-offs, a takeover's grace)
        self.node.orderkeys.check_majority(now_ms())
        if len(self.node.orderkeys):
            self._watch()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
