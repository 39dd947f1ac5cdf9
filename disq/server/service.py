"""The job operations every front end runs: typed arguments in, typed results out, the
caller's queue permissions applied once here. A RESP handler is parse -> service ->
encode (commands/jobs.py); an HTTP route is JSON -> service -> JSON (http/api.py),
with no RESP in between.

So far the operations that answer at once: ACKJOB, FASTACK, NACK, ENQUEUE, DEQUEUE,
DELJOB, WORKING, SHOW. The ones that answer later (ADDJOB waiting for its copies, a
blocking GETJOB) still reach HTTP through a RESP exchange (http/bridge.py).

`gate` is what a front end asks before running a command for a user when it does not
come through the RESP dispatch (connection.py): whether the user may run it (and use
the queues the request names, as dispatch checks them from the declaration), and the
refusals of the node's state (-LOADING, -MISCONF, -OOM), as `DisqError`s; it counts
the call in the command's statistics as the dispatch does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import errors
from ..errors import DisqError, err
from ..ids import is_valid_job_id
from ..job import STATE_NAMES
from ..requests import validate_ids
from .guard import NOPERM_KEY, user_may_use_all
from .table import COMMANDS

if TYPE_CHECKING:
    from ..acl import User
    from ..job import Job
    from ..node import Node
    from .app import Server

# A field of a job as SHOW gives it: text (bytes), a number, a list of node IDs, or none.
FieldValue = bytes | int | list[bytes] | None


def job_fields(job: Job, my_id: str, now: int) -> list[tuple[bytes, FieldValue]]:
    """Every field of a job, in SHOW's order (Disque's fields, then disq's extensions
    for a job that uses them: Disque clients parse fixed layouts), for SHOW's reply and
    the HTTP API's job object alike."""
    delivered = job.nodes_delivered
    fields: list[tuple[bytes, FieldValue]] = [
        (b"id", job.id), (b"queue", job.queue),
        (b"state", STATE_NAMES.get(job.state, b"deleted")),
        (b"repl", job.repl), (b"ttl", max((job.etime - now) // 1000, 0)),
        (b"ctime", job.ctime), (b"delay", job.delay), (b"retry", job.retry),
        (b"nacks", job.nacks), (b"additional-deliveries", job.deliveries),
        (b"nodes-delivered",
         [my_id.encode()] if delivered is None else [n.encode() for n in sorted(delivered)]),
        (b"nodes-confirmed",
         [n.encode() for n in sorted(job.nodes_confirmed)] if job.nodes_confirmed else []),
        (b"next-requeue-within", max(job.qtime - now, 0) if job.qtime else None),
        (b"next-awake-within", max(job.awake - now, 0) if job.awake else None),
        (b"body", job.body),
    ]
    ext = job.ext
    if ext is not None:
        fields += [(b"priority", ext.priority), (b"group", ext.group), (b"due-ms", ext.due)]
        if ext.extra:
            fields += [(b"max-deliveries", ext.max_deliveries),
                       (b"dead-from", ext.dead_from), (b"dead-reason", ext.dead_reason)]
    return fields


class JobService:
    """The job operations of one node (`Server.jobs`)."""

    __slots__ = ("server", "node")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node

    # -- permissions ----------------------------------------------------------------------
    def allowed(self, user: User, ids: list[bytes]) -> list[bytes]:
        """The IDs checked; for a user restricted to some queues, those it may act on:
        -NOPERM if one names a job of a queue it may not use; the IDs of jobs this node
        does not know are left out (so an ACKJOB or FASTACK of an unknown ID, which
        Disque spreads to the whole cluster, cannot reach a job of another queue held
        elsewhere: it counts as unknown, as it would anyway)."""
        validate_ids(ids)
        if user.all_queues:
            return ids
        lookup = self.node.lookup
        kept = []
        for job_id in ids:
            job = lookup(job_id)
            if job is None or job.queue is None:  # (unknown, or a dummy ack)
                continue
            self._check_job(user, job)
            kept.append(job_id)
        return kept

    def _check_job(self, user: User, job: Job) -> None:
        if not user.all_queues and (job.queue is None or not user.may_use(job.queue)):
            self.server.acl.denied_key += 1
            raise NOPERM_KEY

    # -- operations -----------------------------------------------------------------------
    def ack(self, user: User, ids: list[bytes]) -> int:
        """ACKJOB: the number of jobs known and not already acknowledged."""
        acked = self.node.ack(self.allowed(user, ids))
        user.jobs_acked += acked
        return acked

    def fast_ack(self, user: User, ids: list[bytes]) -> int:
        """FASTACK: as `ack`, deleting at once, telling every node that may hold a copy."""
        acked = self.node.fast_ack(self.allowed(user, ids))
        user.jobs_acked += acked
        return acked

    def nack(self, user: User, ids: list[bytes], delay_ms: int | None) -> int:
        """NACK: delivered jobs back in their queue, counting a nack."""
        return self.node.requeue(self.allowed(user, ids), nack=True, delay_ms=delay_ms)

    def enqueue(self, user: User, ids: list[bytes]) -> int:
        """ENQUEUE: active jobs queued now (an additional delivery)."""
        return self.node.requeue(self.allowed(user, ids), nack=False)

    def dequeue(self, user: User, ids: list[bytes]) -> int:
        """DEQUEUE: queued jobs out of their queue (they stay active)."""
        return self.node.dequeue_ids(self.allowed(user, ids))

    def delete(self, user: User, ids: list[bytes]) -> int:
        """DELJOB: jobs evicted from this node only."""
        return self.node.delete(self.allowed(user, ids))

    def working(self, user: User, job_id: bytes) -> int:
        """WORKING: the job's next requeue postponed; its retry in seconds."""
        if not is_valid_job_id(job_id):
            raise errors.BADID
        if not self.allowed(user, [job_id]):
            raise errors.NOJOB  # (a restricted user: a job this node does not know)
        return self.node.working(job_id)

    def show(self, user: User, job_id: bytes) -> Job | None:
        """SHOW: the job, None if this node does not know it (nor, for a restricted
        user, a dummy ack, which has no queue)."""
        if not is_valid_job_id(job_id):
            raise errors.BADID
        job = self.node.lookup(job_id)
        if job is None:
            return None
        if not user.all_queues:
            if job.queue is None:
                return None
            self._check_job(user, job)
        return job

    # -- a command run outside the RESP dispatch ----------------------------------------
    def gate(self, user: User, name: str, queues: list[bytes] | None = None) -> None:
        """Before running command `name` for `user` from another front end: raise
        what the RESP dispatch would answer instead (the user may not run it, nor use
        one of the `queues` the request names, the AOF cannot be written, the node is
        loading or out of memory); count the call."""
        spec = COMMANDS[name.encode()]
        server = self.server
        if user.restricted and not user.may_run(name):
            server.acl.denied_cmd += 1
            raise DisqError("NOPERM", f"User {user.name} has no permissions to run the "
                            f"'{name}' command")
        if queues and not user.all_queues and not user_may_use_all(user, queues):
            server.acl.denied_key += 1
            raise NOPERM_KEY
        if spec.denyoom and self.node.job_bytes > self.node.full_bytes and (
                not server.loading and not self.node.make_room(0)):
            raise errors.OOM
        if server.hot.refusing:
            refused = server.refusal(spec.flags, spec.name)
            if refused is not None:
                code, _, message = refused[1:].rstrip(b"\r\n").decode().partition(" ")
                raise DisqError(code, message) if code.isupper() else err(message)
        spec.calls += 1
        user.calls += 1
