"""Batches' operations every front end runs (`Server.batch_service`): BATCH NEW, CLOSE,
STATUS and LIST, typed arguments in, typed results out (commands/batches.py for RESP,
http/api_batches.py for HTTP). The table is `node.batches` (disq/batches.py); counting
the members and firing the callbacks is `replication.batches`
(disq/replication/batches.py), reached only from here. ADDJOB ... BATCH is checked
here (`check_add`) before JobService adds the job.

A user may close or read a batch only if allowed its callbacks' queues (a batch names
no other queue): one with rights to one queue cannot end another's batch early.
BATCH LIST shows a user only the batches it may read, and a batch without a callback
(naming no queue) only to a user allowed every queue.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from disq_client.spec import MAX_BATCHES_LISTED

from .. import errors
from ..batches import DONE, STATE_NAMES, Batch
from ..errors import DisqError
from ..node import now_ms
from ..requests import AddJob
from .guard import check_queue, user_may_see
from .later import Later

if TYPE_CHECKING:
    from ..acl import User
    from ..end_requests import BatchList, BatchNew
    from ..node import Node
    from .app import Server

# A field of BATCH STATUS's reply: text, a number, a list of job IDs.
StatusField = bytes | int | list[bytes] | None
_PHASES = {name.decode(): phase for phase, name in STATE_NAMES.items()}


def _creation(batch: Batch) -> tuple[int, str, bytes]:
    """BATCH LIST's order, newest first: when made (ties: by whom, then the ID)."""
    return batch.created, batch.origin, batch.bid


def _may_see(user: User, batch: Batch) -> bool:
    """Whether BATCH LIST shows `batch` to `user` (see `BatchService.listed`)."""
    if user.all_queues:
        return True
    queues = [callback[0] for callback in (batch.ondone, batch.onsuccess) if callback]
    return bool(queues) and all(user_may_see(user, queue) for queue in queues)


class BatchService:
    """The batches of one node."""

    __slots__ = ("server", "node")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node

    def new(self, user: User, request: BatchNew) -> Later[list[str]]:
        """BATCH NEW: the batch, answered once every reachable node holds it."""
        limit = self.node.config.job_max_body
        for callback in (request.ondone, request.onsuccess):
            if callback is not None:
                check_queue(self.server.acl, user, callback[0])
                if len(callback[1]) > limit:  # its ADDJOB would fail
                    raise errors.body_too_big(len(callback[1]), limit)
        replication = self.server.replication
        if replication is None:
            self.node.batches.define(request.bid, request.ondone, request.onsuccess,
                                     request.ttl, self.node.id, now_ms())
            return Later.now([])
        return Later.of(lambda held: replication.batches.define(
            request.bid, request.ondone, request.onsuccess, request.ttl, held))

    def close(self, user: User, bid: bytes) -> Later[int | DisqError]:
        """BATCH CLOSE: the number of members counted, or why it could not be."""
        self._checked(user, bid)
        replication = self.server.replication
        if replication is None:
            raise errors.err("BATCH CLOSE needs the cluster layer")
        return Later.of(lambda closed: replication.batches.close(bid, closed))

    def status(self, user: User, bid: bytes) -> list[tuple[bytes, StatusField]]:
        """BATCH STATUS: state, members, pending, acked, dead (as this node knows
        them: an open batch's members are counted by CLOSE), the callback jobs added."""
        return self.fields(self._checked(user, bid))

    def fields(self, batch: Batch) -> list[tuple[bytes, StatusField]]:
        """A batch's BATCH STATUS fields."""
        members, pending, acked, dead = self.node.batches.counts(batch)
        return [(b"id", batch.bid), (b"state", STATE_NAMES[batch.phase]),
                (b"members", members), (b"pending", pending), (b"acked", acked),
                (b"dead", dead),
                (b"callbacks", list(batch.callbacks) if batch.phase == DONE else []),
                (b"expires", batch.expires)]

    def listed(self, user: User, request: BatchList) -> tuple[list[Batch], bool]:
        """BATCH LIST: the batches this node knows (every node holds every batch), in
        `request.state` if given, that `user` may see, the newest MAX_BATCHES_LISTED
        by creation first; and whether that is all of them. A batch is seen by a user
        allowed every queue it names (its callbacks'); one without a callback names no
        queue: only a user allowed every queue sees it listed (as a result whose queue
        is not known, guard.py's `user_may_see`); BATCH STATUS of its ID still answers
        anyone who may run BATCH, as it always did."""
        now = now_ms()
        phase = None if request.state is None else _PHASES[request.state]
        seen = [batch for batch in self.node.batches.batches.values()
                if batch.expires > now and (phase is None or batch.phase == phase)
                and _may_see(user, batch)]
        newest = heapq.nlargest(MAX_BATCHES_LISTED, seen, key=_creation)
        return newest, len(newest) == len(seen)

    def check_add(self, user: User, request: AddJob) -> None:
        """ADDJOB ... BATCH: the batch takes members, the request is made one that
        CLOSE can count (replication/batches.py)."""
        bid = request.batch
        assert bid is not None
        replication = self.server.replication
        if replication is None:
            self.node.batches.check_add(bid, now_ms())
        else:
            replication.batches.check_add(request)

    def _checked(self, user: User, bid: bytes) -> Batch:
        batch = self.node.batches.get(bid, now_ms())
        if batch is None:
            raise DisqError("NOBATCH", f"no batch '{bid.decode(errors='replace')}'")
        for callback in (batch.ondone, batch.onsuccess):
            if callback is not None:
                check_queue(self.server.acl, user, callback[0])
        return batch
