"""What the core asks of the layers around it, as narrow interfaces: the cluster
(`ClusterPort`: replication, requeue messages, ACK GC, federation; `SoloCluster` when
the node is alone) and persistence (`Persistence`: the AOF while it records;
`NoPersistence` otherwise). The core calls them when something other nodes or the disk
must know; they call the core back through `Node`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from .job import Job
    from .policies import QueuePolicy
    from .queue import Queue
    from .requests import AddJob
    from .results import JobEnd
    from .schedules import CronSchedule


class ClusterPort(Protocol):
    """What the core needs from the cluster layer."""

    def size(self) -> int: ...
    def reachable_peers(self) -> int: ...
    def replicate(self, job: Job, request: AddJob, sync: bool,
                  external: bool = False, now: int = 0) -> None: ...
    def job_queued(self, job: Job, flags: int, not_before: int = 0) -> None: ...
    def job_moved(self, job: Job) -> None: ...
    def send_willqueue(self, job: Job) -> None: ...
    def job_working(self, job: Job) -> None: ...
    def start_gc(self, job: Job) -> None: ...
    def fast_ack(self, job_id: bytes, job: Job | None) -> None: ...
    def pause(self, queue: bytes, flags: int) -> None: ...
    def need_jobs(self, queue: Queue) -> None: ...
    def jobs_not_needed(self, queue: Queue) -> None: ...
    def jobs_available(self, queue: Queue, requeued: bool = False) -> None: ...
    def best_changed(self, queue: Queue) -> None: ...
    def want_more_urgent(self, queue: Queue, priority: int) -> None: ...
    def job_dropped(self, job: Job) -> None: ...
    def job_set(self, job: Job, priority: int | None, due: int | None) -> None: ...
    def job_unconfirmed(self, job: Job) -> None: ...


class SoloCluster:
    """The cluster of one: no peers, every message goes nowhere."""

    def size(self) -> int:
        return 1

    def reachable_peers(self) -> int:
        return 0

    def replicate(self, job: Job, request: AddJob, sync: bool,
                  external: bool = False, now: int = 0) -> None:
        pass

    def job_queued(self, job: Job, flags: int, not_before: int = 0) -> None:
        pass

    def job_moved(self, job: Job) -> None:
        pass

    def send_willqueue(self, job: Job) -> None:
        pass

    def job_working(self, job: Job) -> None:
        pass

    def start_gc(self, job: Job) -> None:
        pass

    def fast_ack(self, job_id: bytes, job: Job | None) -> None:
        pass

    def pause(self, queue: bytes, flags: int) -> None:
        pass

    def need_jobs(self, queue: Queue) -> None:
        pass

    def jobs_not_needed(self, queue: Queue) -> None:
        pass

    def jobs_available(self, queue: Queue, requeued: bool = False) -> None:
        pass

    def best_changed(self, queue: Queue) -> None:
        pass

    def want_more_urgent(self, queue: Queue, priority: int) -> None:
        pass

    def job_dropped(self, job: Job) -> None:
        pass

    def job_set(self, job: Job, priority: int | None, due: int | None) -> None:
        pass

    def job_unconfirmed(self, job: Job) -> None:
        pass


class Persistence(Protocol):
    """What the core tells the AOF, and what the server asks of it: how many records
    were appended, whether they are as safe as the policy promises (`commit`), and a
    callback once they are (`on_durable`). `recording`: the node's changes are kept
    (the AOF is on, or a rewrite runs), so what is logged may be loaded again."""

    appended: int

    @property
    def recording(self) -> bool: ...
    def job_stored(self, job: Job) -> None: ...
    def job_removed(self, job_id: bytes) -> None: ...
    def schedule_stored(self, schedule: CronSchedule) -> None: ...
    def policy_stored(self, policy: QueuePolicy) -> None: ...
    def result_stored(self, end: JobEnd) -> None: ...
    def results_flushed(self) -> None: ...
    def commit(self) -> bool: ...
    def on_durable(self, callback: Callable[[], object]) -> None: ...


class NoPersistence:
    """Nothing is recorded (the AOF is off and no rewrite runs): every change is
    dropped, and every reply is as safe as it will ever be at once."""

    __slots__ = ()

    appended = 0  # never moves: a batch of requests never waits for a commit

    @property
    def recording(self) -> bool:
        return False

    def job_stored(self, job: Job) -> None:
        pass

    def job_removed(self, job_id: bytes) -> None:
        pass

    def schedule_stored(self, schedule: CronSchedule) -> None:
        pass

    def policy_stored(self, policy: QueuePolicy) -> None:
        pass

    def result_stored(self, end: JobEnd) -> None:
        pass

    def results_flushed(self) -> None:
        pass

    def commit(self) -> bool:
        return True

    def on_durable(self, callback: Callable[[], object]) -> None:
        callback()


NO_PERSISTENCE: Final = NoPersistence()


class Retention(Protocol):
    """Where a RETAIN queue's acknowledged jobs go (retention/store.py): told of each
    job this node marks acked, with its body still there."""

    def job_acked(self, job: Job) -> None: ...


class NoRetention:
    """No retention (a node without a server: tests, tools)."""

    def job_acked(self, job: Job) -> None:
        pass


NO_RETENTION: Final = NoRetention()
