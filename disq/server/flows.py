"""Flows (ADDJOB ... AFTER parent [AFTER parent ...], a disq extension): a job that waits
until each parent is done — a job ID acked, a batch ID done (batches.py) — and goes to
its dead letters with the reason `parent-failed` if a parent job went dead (or no
reachable node knows it: lost, or its ID wrong).

The child is an ordinary job whose due time is its expiry (admission.py), so nothing
queues it; every node holding a copy watches its parents here: job parents through a
WAITJOB of its own (job_waits.py: held here, or asked of every node, which tell when
they end), batch parents through the batch table (every node learns when a batch is
done). When they are done, this node's copy becomes due now, as a JOBSET AT would make
it: the node that queues the job queues it, the others requeue it RETRY later unless
told it was queued (Disque's rule for every copy). A parent that failed marks the copy
(`JobExt.parent_failed`): whichever node would queue it moves it to its dead letters
instead (Node.enqueue), and its holders hear of the move.

No cycle can be made: a job's parents exist before it (a new ID cannot be named), and a
batch's member may have no parent, so a batch never waits for what waits for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .. import errors
from ..acl import User
from ..batches import DONE, MAX_PARENTS
from ..end_requests import WaitJob
from ..errors import DisqError
from ..ids import is_valid_job_id
from ..job import WAIT_REPL, Job
from ..node import now_ms
from ..outcomes import A, Answer, Answers, OnCancel
from ..requests import AddJob
from ..results import DEAD_END
from .job_waits import UNKNOWN, JobStatus, JobWait

if TYPE_CHECKING:
    from ..node import Node
    from .app import Server

RETRY_MS: Final = 50  # a child still being replicated is released this much later
UNKNOWN_RETRY_MS: Final = 5000  # a parent no reachable node knows is asked for again


class _Forward:
    """The answers of an ADDJOB made once its parents were checked: to the answer its
    front end already has."""

    __slots__ = ("answer",)

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    def later(self, on_cancel: OnCancel | None, job_id: bytes, durable: bool) -> Answer:
        return self.answer


class _Child:
    """One child waiting on this node."""

    __slots__ = ("job_id", "batches", "jobs_done", "failed", "wait")

    def __init__(self, job_id: bytes) -> None:
        self.job_id = job_id
        self.batches: set[bytes] = set()  # batch parents not done yet
        self.jobs_done = True  # every job parent acked (none: True)
        self.failed = False
        self.wait: JobWait | None = None


class Flows:
    """The children waiting on this node (`Server.flows`)."""

    __slots__ = ("server", "node", "user", "children", "by_batch")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.node: Node = server.node
        self.user = User("(flows)")  # the waits' user: every queue
        self.user.all_queues = True
        self.children: dict[bytes, _Child] = {}
        self.by_batch: dict[bytes, set[bytes]] = {}  # batch -> children waiting here
        self.node.on_flow_child = self.child_came
        self.node.on_flow_gone = self.child_gone

    # -- ADDJOB ... AFTER --------------------------------------------------------------------
    def add(self, user: User, request: AddJob, answers: Answers[A],
            add_now: Callable[[AddJob, Answers[Answer]], bytes | Answer]) -> bytes | A:
        """ADDJOB ... AFTER: checked (`check_add`), then its job parents looked up on
        every reachable node (as a WAITJOB that does not wait): one no node knows
        (ended and forgotten, or never added: -NOJOB) or a dead letter (-PARENTFAILED)
        is refused; then `add_now` adds it."""
        self.check_add(request)
        after = request.after
        assert after is not None
        job_parents = [parent for parent in after if is_valid_job_id(parent)]
        if not job_parents:
            return add_now(request, answers)  # type: ignore[return-value]
        answer = answers.later(None, b"", True)
        wait = JobWait(self.node, self.server.replication, user, WaitJob(job_parents),
                       self.server.loop, peek=True)

        def looked_up(statuses: list[JobStatus]) -> None:
            for job_id, state, _ in statuses:
                if state == UNKNOWN:
                    answer.added(DisqError("NOJOB", f"parent {job_id.decode()} is not known "
                                           "(ended and forgotten, or never added)"))
                    return
                if state == DEAD_END:
                    answer.added(DisqError("PARENTFAILED",
                                           f"parent {job_id.decode()} is a dead letter"))
                    return
            try:
                added = add_now(request, _Forward(answer))
            except DisqError as exc:
                answer.added(exc.with_traceback(None))
                return
            if type(added) is bytes:
                answer.added(added)

        wait.start(0).then(looked_up)
        return answer

    def check_add(self, request: AddJob) -> None:
        """Refuse what no flow can be: too many parents, AFTER with DELAY / DELAY-MS /
        AT, a batch's member with parents, a batch parent no node knows."""
        after = request.after
        assert after is not None
        if len(after) > MAX_PARENTS:
            raise errors.err(f"a job waits for at most {MAX_PARENTS} parents (AFTER)")
        if request.delay or request.delay_ms is not None or request.at is not None:
            raise errors.err("AFTER and DELAY, DELAY-MS or AT cannot be combined: the "
                             "job is due once its parents are done")
        if request.batch is not None:
            raise errors.err("a batch's member cannot wait for parents (AFTER): a batch "
                             "could then wait for what waits for it")
        now = now_ms()
        for parent in after:
            if not is_valid_job_id(parent) and self.node.batches.get(parent, now) is None:
                raise DisqError("NOBATCH", f"no batch '{parent.decode(errors='replace')}' "
                                           "(AFTER names a job ID or a batch ID)")

    # -- the core's side ---------------------------------------------------------------------
    def child_came(self, job: Job) -> None:
        """A copy of a waiting child is held here now (added, replicated, loaded, moved
        here): watch its parents, after the operation that brought it."""
        if job.id in self.children:
            return
        child = self.children[job.id] = _Child(job.id)
        loop = self.server.loop
        if loop is not None:
            loop.call_soon(self._watch, child)

    def child_gone(self, job: Job) -> None:
        """The copy left this node (expired, deleted, acked and collected, moved)."""
        child = self.children.pop(job.id, None)
        if child is not None:
            self._forget(child)

    def batch_done(self, bid: bytes) -> None:
        """A batch is done (the batch table says so on this node)."""
        for job_id in self.by_batch.pop(bid, ()):
            child = self.children.get(job_id)
            if child is not None:
                child.batches.discard(bid)
                self._check(child)

    # -- watching ----------------------------------------------------------------------------
    def _watch(self, child: _Child) -> None:
        job = self.node.jobs.get(child.job_id)
        ext = job.ext if job is not None else None
        if ext is None or ext.after is None or self.children.get(child.job_id) is not child:
            return
        if self.server.replication is None and self.node.cluster.size() > 1:
            loop = self.server.loop  # loaded before the cluster is up: ask once it is
            if loop is not None:
                loop.call_later(RETRY_MS / 1000, self._watch, child)
            return
        now = now_ms()
        job_parents = []
        for parent in ext.after:
            if is_valid_job_id(parent):
                job_parents.append(parent)
                continue
            batch = self.node.batches.get(parent, now)
            if batch is None:  # gone past its TTL, or never known here
                child.failed = True
            elif batch.phase != DONE:
                child.batches.add(parent)
                self.by_batch.setdefault(parent, set()).add(child.job_id)
        if job_parents and not child.failed:
            child.jobs_done = False
            self._wait_for(child, job_parents)
        self._check(child)

    def _wait_for(self, child: _Child, parents: list[bytes]) -> None:
        """Watch the job parents (a WAITJOB of its own, without a timeout)."""
        wait = child.wait = JobWait(self.node, self.server.replication, self.user,
                                    WaitJob(parents), self.server.loop)
        wait.start(0).then(lambda statuses: self._jobs_ended(child, statuses))

    def _jobs_ended(self, child: _Child, statuses: list[JobStatus]) -> None:
        """Every job parent ended, or is unknown to every reachable node: a partition
        may hide it, so it is asked for again a while later (the child expires with
        its TTL if it never comes back)."""
        child.wait = None
        if any(state == DEAD_END for _, state, _ in statuses):
            child.failed = True
        elif any(state == UNKNOWN for _, state, _ in statuses):
            loop = self.server.loop
            if loop is not None:
                loop.call_later(UNKNOWN_RETRY_MS / 1000, self._ask_again, child,
                                [i for i, state, _ in statuses if state == UNKNOWN])
            return
        child.jobs_done = True
        self._check(child)

    def _ask_again(self, child: _Child, parents: list[bytes]) -> None:
        if self.children.get(child.job_id) is not child or child.wait is not None:
            return
        self._wait_for(child, parents)

    def _check(self, child: _Child) -> None:
        if self.children.get(child.job_id) is not child:
            return
        if child.failed or (child.jobs_done and not child.batches):
            self._release(child)

    def _release(self, child: _Child) -> None:
        """The parents are done (or one failed): this copy is due now."""
        job = self.node.jobs.get(child.job_id)
        if job is None or job.ext is None:
            self.children.pop(child.job_id, None)
            self._forget(child)
            return
        if job.state == WAIT_REPL:  # its ADDJOB waits for its copies: a moment later
            loop = self.server.loop
            if loop is not None:
                loop.call_later(RETRY_MS / 1000, self._check, child)
            return
        del self.children[child.job_id]
        self._forget(child)
        ext = job.ext.copy(after=None)
        ext.parent_failed = child.failed
        job.ext = ext
        try:
            self.node.set_job(job, None, now_ms(), broadcast=False)
        except DisqError:  # acked meanwhile: nothing left to do
            pass

    def _forget(self, child: _Child) -> None:
        if child.wait is not None:
            child.wait.cancel()
            child.wait = None
        for bid in child.batches:
            waiting = self.by_batch.get(bid)
            if waiting is not None:
                waiting.discard(child.job_id)
                if not waiting:
                    del self.by_batch[bid]
        child.batches.clear()
