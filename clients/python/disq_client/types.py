"""The replies, as dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from . import bodies

JobState = Literal["wait-repl", "active", "queued", "acked"]
PauseState = Literal["none", "in", "out", "all"]
PauseOption = Literal["in", "out", "all", "none"]


def node_prefix(job_id: str) -> str:
    """The 8 hex digits of a job ID that start the ID of the node that created it."""
    return job_id[2:10]


def is_at_most_once(job_id: str) -> bool:
    """A job with RETRY 0 has an even last hex digit in its ID: it is never requeued."""
    return int(job_id[-1], 16) % 2 == 0


@dataclass(slots=True)
class Job:
    """A job as GETJOB and QPEEK return it. `nacks` and `additional_deliveries` are set
    only when asked for (`with_counters=True`). `priority`, `group` and `due_ms` (Unix
    ms; 0: not scheduled) only for a job added with disq's PRIORITY, GROUP, AT or
    DELAY-MS, by QPEEK and GETJOB with counters; else None. `max_deliveries` (0: the
    queue's policy decides), `dead_from` and `dead_reason` (None: not a dead letter)
    only for a job added with MAXDELIVERIES or that was ever a dead letter, likewise."""

    id: str
    queue: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None
    priority: int | None = None
    group: str | None = None
    due_ms: int | None = None
    max_deliveries: int | None = None
    dead_from: str | None = None  # the queue a dead letter came from
    dead_reason: str | None = None  # why it is one: "max-deliveries"
    # ADDJOB ... ATTR, given by GETJOB WITHCOUNTERS for a job using disq's extensions
    # ({}: none); None: not given (no counters asked, a plain job, an older server)
    attrs: dict[str, str] | None = None

    @property
    def node_prefix(self) -> str:
        return node_prefix(self.id)

    def text(self) -> str:
        return bodies.text(self.body)

    def progress(self, progress: int | None = None, data: bodies.Body | None = None) -> None:
        """From the Worker's handler running this job: report how far it is
        (`report_progress`: WORKING ... PROGRESS / DATA, sent in the background).
        RuntimeError for a job no handler of this task runs."""
        from .work_reports import report_progress_of

        report_progress_of(self.id, progress, data)

    def json(self) -> Any:
        return bodies.from_json(self.body)

    def msgpack(self) -> Any:
        return bodies.from_msgpack(self.body)


@dataclass(slots=True)
class JobInfo:
    """SHOW: everything a node knows about a job. Durations in ms, as everywhere in the
    client (SHOW gives `ttl`, `delay`, `retry` in whole seconds: `ttl_ms` is the time
    left to live to the second, rounded down); `ctime` in nanoseconds-ish creation order
    (ms * 1e6 + counter), `next_*_within` in ms (None: never)."""

    id: str
    queue: str
    state: str
    repl: int
    ttl_ms: int
    ctime: int
    delay_ms: int
    retry_ms: int
    nacks: int
    additional_deliveries: int
    nodes_delivered: list[str]
    nodes_confirmed: list[str]
    next_requeue_within: int | None
    next_awake_within: int | None
    body: bytes | None  # None for an acknowledgement the node holds without the job
    # disq's extensions (ADDJOB PRIORITY, GROUP, AT, DELAY-MS); None for other jobs
    priority: int | None = None
    group: str | None = None
    due_ms: int | None = None  # Unix ms before which it is not delivered (0: none)
    # for a job added with MAXDELIVERIES or that was ever a dead letter:
    max_deliveries: int | None = None  # 0: the queue's policy decides
    dead_from: str | None = None  # a dead letter: the queue it came from
    dead_reason: str | None = None  # a dead letter: why ("max-deliveries")
    # NACK ... ERROR's last errors, oldest first (None: none); WORKING ... PROGRESS / DATA
    errors: list[JobError] | None = None
    progress: int | None = None
    progress_data: bytes | None = None
    # ADDJOB ... ATTR's attributes (None: none), as str (UTF-8, surrogateescape)
    attrs: dict[str, str] | None = None


@dataclass(slots=True)
class JobError:
    """An error a consumer reported with NACK ... ERROR (a disq extension): the
    delivery it happened at (1: the first), when (Unix ms), and the reason."""

    delivery: int
    when_ms: int
    reason: str


@dataclass(slots=True)
class QueueStat:
    """QSTAT. `age_ms` and `idle_ms` in ms (whole seconds: QSTAT's unit), `import_rate`
    in jobs per second."""

    name: str
    len: int
    age_ms: int
    idle_ms: int
    blocked: int
    import_from: list[str]
    import_rate: int
    jobs_in: int
    jobs_out: int
    pause: str


@dataclass(slots=True)
class HelloNode:
    """One node in a HELLO reply. Priority: 1 fine, 5 no link, 10 possibly failing,
    100 failing or leaving."""

    id: str
    host: str
    port: int
    priority: int

    @property
    def prefix(self) -> str:
        return self.id[:8]


@dataclass(slots=True)
class Hello:
    version: int
    node_id: str  # the node that answered
    nodes: list[HelloNode] = field(default_factory=list)


@dataclass(slots=True)
class CronEntry:
    """A CRON LIST entry: `next_fire_in` in ms, `last_fire` in Unix ms (None: never);
    `replicate` as given (None: the default), `tick_replicate` the copies a tick fired
    now gets (0: no majority reachable there; None: a server that does not say)."""

    name: str
    queue: str
    spec: str
    tz: str
    next_fire_in: int
    last_fire: int | None
    last_job: str | None
    replicate: int | None = None
    tick_replicate: int | None = None


@dataclass(slots=True)
class BatchStatus:
    """BATCH STATUS (a disq extension): `state` open, closed or done; `members` counted
    at CLOSE (open: those the node knows of), `pending`, `acked`, `dead`; `callbacks`
    the callback jobs added once done; `expires` in Unix ms."""

    id: str
    state: str
    members: int
    pending: int
    acked: int
    dead: int
    callbacks: list[str]
    expires: int


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """QPOLICY queue GET (a disq extension): what happens to the queue's failing jobs.
    `max_deliveries`: deliveries before a job becomes a dead letter (None: no limit);
    `deadletter`: the queue its dead letters go to (`dead:<queue>` unless set);
    `backoff`: (base ms, max ms) a NACKed or requeued job waits, doubling from base
    (None: none); `rate`: at most that many jobs per second delivered (None: no limit);
    `result_ttl_ms`: how long a job's result is kept once it ended (None: an hour);
    `concurrency`: at most that many jobs delivered and not yet ended (None: no limit);
    `retry_ms`, `ttl_ms`, `replicate`, `maxlen`: what an ADDJOB to the queue that does not give
    the option takes (None: ADDJOB's own default); `group_concurrency`, `group_rate`:
    `concurrency` and `rate` for each GROUP of the queue (None: no limit); `retain_ms`:
    how long its acked jobs are kept on disk for REPLAY, `retain_bytes` the most bytes of
    them on each node (None: none, no cap)."""

    queue: str
    max_deliveries: int | None
    deadletter: str
    backoff: tuple[int, int] | None
    rate: float | None
    result_ttl_ms: int | None = None
    concurrency: int | None = None
    retry_ms: int | None = None
    ttl_ms: int | None = None
    replicate: int | None = None
    maxlen: int | None = None
    group_concurrency: int | None = None
    group_rate: float | None = None
    retain_ms: int | None = None
    retain_bytes: int | None = None


@dataclass(slots=True)
class RetainedJob:
    """RETAINED's (a disq extension): an acked job a node keeps (QPOLICY ... RETAIN):
    `created` and `acked` are Unix ms, `nodes` its holders, `attrs` its ATTRs."""

    id: str
    queue: str
    body: bytes
    created: int
    acked: int
    nodes: list[str]
    attrs: dict[str, str]


EndState = Literal["acked", "dead", "queued", "active", "unknown"]


@dataclass(slots=True)
class JobEnd:
    """How a job ended, as WAITJOB answers (a disq extension): `state` acked (with the
    `result` its ACKJOB gave, None without one), dead (a dead letter: `error`, its last
    error), or, when the wait ended first, queued, active (`progress_data`: the last
    WORKING ... DATA of its consumer) or unknown (no node answered for it)."""

    id: str
    state: EndState
    result: bytes | None = None
    error: str | None = None
    progress_data: bytes | None = None  # active: its last WORKING ... DATA

    @property
    def ended(self) -> bool:
        return self.state in ("acked", "dead")

    def text(self) -> str | None:
        return None if self.result is None else bodies.text(self.result)

    def json(self) -> Any:
        return None if self.result is None else bodies.from_json(self.result)
