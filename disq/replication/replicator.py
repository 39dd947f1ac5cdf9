"""Jobs across nodes, as Disque does them. `Replication` is the node's `ClusterPort`:
the core calls it when something other nodes must hear about, and the server installs
it (`node.cluster = replication`). It is a composition of one part per message family,
each registering its own bus handlers (see README.md):

    copies      REPLJOB / GOTJOB, the ADDJOBs waiting for their copies (targets.py:
                where the copies go; dedup_checks.py: DEDUP keys, owned by `copies`)
    incoming    REPLJOB received: the copies peers send here, confirmed by GOTJOB
    requeue     QUEUED / WILLQUEUE / WORKING / ENQUEUE
    acks        SETACK / GOTACK / DELJOB (ACK garbage collection, FASTACK)
    queues      PAUSE, GLOBALQLEN
    federation  NEEDJOBS / YOURJOBS / NEEDJOBS_CANCEL
    changes     JOBSET / JOBSET_ASK / JOBSET_REPLY (a disq extension)
    provisional JOB_CHECK / JOB_CHECK_REPLY: copies of a DEDUP ADDJOB not known to have
                succeeded ask before they are queued (a disq extension)
    recurring   CRON_SET / CRON_SYNC / CRON_FIRED (a disq extension)
    failures    JOBMOVE, QPOLICY_SET / QPOLICY_SYNC, RATE_DEMAND, DLQ_REQUEUE (dead letters, QPOLICY)
    stats       STATS_REQUEST / STATS_REPLY (every node's stats, for the dashboard)
    ends        ENDS_ASK / ENDS: WAITJOB asking how jobs held elsewhere ended (a disq
                extension; results travel with their SETACKs: acks)
    batches     BATCH_SET / SYNC / HELD / CLOSE / MEMBERS / ENDED / ENDS_ASK / FETCH:
                batches, their members counted, their callbacks fired (a disq extension)
    topics      TOPIC_SET / TOPIC_SYNC / TOPIC_HELD: the topics' subscriptions on every
                node (a disq extension)
    purges      PURGE_SET / PURGE_SYNC / PURGE_HELD: QDEL and QPURGE on every node (a
                disq extension)
    orderkeys   no message: who acts for an ORDERKEY (its owner), a strict key's
                majority watched (a disq extension)

Every part only uses the narrow `BusPort`, so an in-memory bus can stand in for the
network in tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..cluster.port import BusPort
from ..job import Job
from ..node import Node
from ..outcomes import OnAdded, OnChanged
from ..queue import Queue
from ..requests import AddJob
from .acks import Acks
from .batches import Batches
from .copies import Copies
from .ends import JobEnds
from .failures import Failures
from .federation import Federation
from .incoming import IncomingCopies
from .jobset import JobChanges
from .orderkeys import OrderOwners
from .provisional import ProvisionalCopies
from .purges import purge_sync
from .queues import QueueMessages
from .requeue import Requeue
from .schedules import Recurring
from .stats import ClusterStats
from .topics import topic_sync


class Replication:
    """The cluster side of the core (`node.cluster`, once the server installs it).
    The server calls `wait` right after `Node.add_job` returns a WAIT_REPL job, and
    `cancel_wait` if that client goes away."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self.copies = Copies(node, bus, loop)
        self.dedup = self.copies.dedup
        self.incoming = IncomingCopies(node, bus, self.dedup)
        self.requeue = Requeue(node, bus)
        self.acks = Acks(node, bus, self.copies)
        self.queues = QueueMessages(node, bus, loop)
        self.federation = Federation(node, bus, loop)
        self.recurring = Recurring(node, bus, self.dedup)
        self.changes = JobChanges(node, bus, loop)
        self.provisional = ProvisionalCopies(node, bus)
        self.dedup.verify = self.provisional.verify
        self.failures = Failures(node, bus, loop)
        self.stats = ClusterStats(node, bus, loop)
        self.ends = JobEnds(node, bus, loop)
        self.batches = Batches(node, bus, self.dedup, loop)
        self.topics = topic_sync(node, bus, loop)
        self.purges = purge_sync(node, bus, loop)
        self.orderkeys = OrderOwners(node, bus, self.copies, loop)

    # -- the server's side ------------------------------------------------------------
    def wait(self, job: Job, on_done: OnAdded) -> None:
        """Answer the ADDJOB of `job` (WAIT_REPL) through `on_done(outcome)`, called
        exactly once: the job's ID once replicated, else a -NOREPL error."""
        self.copies.wait(job, on_done)

    def cancel_wait(self, job_id: bytes) -> None:
        """The client of a waiting ADDJOB went away: see `Copies.cancel_wait`."""
        self.copies.cancel_wait(job_id)

    def global_qlen(self, queue: bytes, on_done: Callable[[int], None]) -> None:
        self.queues.global_qlen(queue, on_done)

    def set_job_on_holders(self, job: Job, priority: int | None, due: int | None,
                           on_done: OnChanged) -> None:
        """JOBSET of a job this node changed: its other holders (`JobChanges.set_on_holders`)."""
        self.changes.set_on_holders(job, priority, due, on_done)

    def set_job_elsewhere(self, job_id: bytes, priority: int | None, due: int | None,
                          on_done: OnChanged) -> None:
        """JOBSET of a job this node does not hold (`JobChanges.set_elsewhere`)."""
        self.changes.set_elsewhere(job_id, priority, due, on_done)

    def identity_changed(self) -> None:
        """The node took a new ID (CLUSTER RESET HARD): copies carry the new one."""
        self.copies.my_id = self.node.id

    def tick(self, now: int | None = None) -> None:
        """The periodic work of the waiting ADDJOBs (`Copies.tick`): it runs on the
        loop by itself; tests without a loop call it with their own clock."""
        self.copies.tick(now)

    def close(self) -> None:
        self.copies.close()
        self.orderkeys.close()

    # -- ClusterPort: what the core tells the cluster -----------------------------------
    def size(self) -> int:
        return self.bus.cluster_size

    def reachable_peers(self) -> int:
        return len(self.bus.reachable_peers())

    def replicate(self, job: Job, request: AddJob, sync: bool,
                  external: bool = False, now: int = 0) -> None:
        self.copies.replicate(job, request, sync, external, now)

    def job_dropped(self, job: Job) -> None:
        self.copies.job_dropped(job)

    def job_set(self, job: Job, priority: int | None, due: int | None) -> None:
        self.changes.job_set(job, priority, due)

    def job_unconfirmed(self, job: Job) -> None:
        self.provisional.job_unconfirmed(job)

    def job_queued(self, job: Job, flags: int, not_before: int = 0) -> None:
        self.requeue.job_queued(job, flags, not_before)

    def job_moved(self, job: Job) -> None:
        self.failures.job_moved(job)

    def send_willqueue(self, job: Job) -> None:
        self.requeue.send_willqueue(job)

    def job_working(self, job: Job) -> None:
        self.requeue.job_working(job)

    def start_gc(self, job: Job) -> None:
        self.acks.start_gc(job)

    def fast_ack(self, job_id: bytes, job: Job | None) -> None:
        self.acks.fast_ack(job_id, job)

    def pause(self, queue: bytes, flags: int) -> None:
        self.queues.pause(queue, flags)

    def need_jobs(self, queue: Queue) -> None:
        self.federation.need_jobs(queue)

    def jobs_not_needed(self, queue: Queue) -> None:
        self.federation.jobs_not_needed(queue)

    def jobs_available(self, queue: Queue, requeued: bool = False) -> None:
        self.federation.jobs_available(queue, requeued)

    def best_changed(self, queue: Queue) -> None:
        self.federation.best_changed(queue)

    def want_more_urgent(self, queue: Queue, priority: int) -> None:
        self.federation.want_more_urgent(queue, priority)
