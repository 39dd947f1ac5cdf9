"""Every command as its arguments and the parser of its reply, shared by `Client` and
`AsyncClient`, which only differ in how they send a `Cmd` and wait for its reply."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Generic, TypeVar, cast

from .bodies import Body, to_body
from .durations import JobDurations
from .errors import BatchError, ProtocolError
from .protocol import Arg, ErrorReply, error_of, to_bytes
from .spec import (
    ACKJOB,
    ADDJOB,
    BATCH_LIST,
    BATCH_NEW,
    CRON_ADD,
    DEADLETTER_REQUEUE,
    GETJOB,
    JOBSET,
    JSCAN,
    NACK,
    PAUSE,
    QPOLICY_SET,
    QSCAN,
    REPLAY,
    RETAINED,
    TOPIC_PUBLISH,
    WAITJOB,
    WORKING,
    CommandOptions,
)
from .types import (
    BatchStatus,
    CronEntry,
    EndState,
    Hello,
    HelloNode,
    Job,
    JobEnd,
    JobError,
    JobInfo,
    PauseOption,
    QueuePolicy,
    QueueStat,
    RetainedJob,
)

T = TypeVar("T")


def _str(value: object) -> str:
    assert isinstance(value, bytes), value
    return value.decode("utf-8", "surrogateescape")


def _int(value: object) -> int:
    assert isinstance(value, int), value
    return value


def _identity(value: object) -> object:
    return value


@dataclass(slots=True)
class Cmd(Generic[T]):
    """`args` to send; `parse` turns the reply into the method's result; `wait` is how
    long the server may legitimately take beyond the client timeout (None: for ever).
    `gets_jobs` marks GETJOB, whose jobs tell the client which node produced them."""

    args: tuple[Arg, ...]
    parse: Callable[[object], T]
    wait: float | None = 0.0
    gets_jobs: bool = False


def raw(args: Sequence[Arg]) -> Cmd[object]:
    return Cmd(tuple(args), _identity)


def _options(spec: CommandOptions,
             values: Mapping[str, object] | Iterable[tuple[str, object]]) -> list[Arg]:
    """The spec's tokens with the values given, which are the caller's Args."""
    return cast("list[Arg]", spec.encode(values))


# -- producing ------------------------------------------------------------------------------
_DEDUP = ADDJOB.by_field["dedup"].token.encode()
_DEDUP_PREFIX = b"$%d\r\n%s\r\n" % (len(_DEDUP), _DEDUP)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def unix_ms(at: datetime | int) -> int:
    """ADDJOB AT's value: Unix ms as given, or a datetime's (naive: local time), rounded
    up to the millisecond so that the job is never delivered before `at`."""
    if isinstance(at, datetime):
        aware = at if at.tzinfo is not None else at.astimezone()
        return -((_EPOCH - aware) // _MS)
    return at


def addjob_options(timeout_ms: int, replicate: int | None, delay: int | None,
                   retry: int | None, ttl: int | None, maxlen: int | None,
                   async_: bool, dedup: Arg | None = None, *, delay_ms: int | None = None,
                   at: datetime | int | None = None, priority: int | None = None,
                   group: Arg | None = None, max_deliveries: int | None = None,
                   queue_randomly: bool = False, unique: Arg | None = None,
                   batch: Arg | None = None, after: Iterable[Arg] | None = None,
            attrs: Mapping[str | bytes, str | bytes] | None = None,
                   orderkey: Arg | None = None, strict: bool = False
                   ) -> tuple[Arg, ...]:
    """Everything after the body: the timeout, then the options given. `dedup`,
    `unique`, `delay_ms`, `at`, `priority`, `group` and `max_deliveries` are disq's
    extensions (Disque refuses them)."""
    return (timeout_ms, *_options(ADDJOB, {
        "repl": replicate, "delay": delay, "retry": retry, "ttl": ttl, "maxlen": maxlen,
        "dedup": dedup, "async_": async_, "delay_ms": delay_ms,
        "at": None if at is None else unix_ms(at), "priority": priority, "group": group,
        "max_deliveries": max_deliveries, "queue_randomly": queue_randomly,
        "unique": unique, "batch": batch,
        "after": None if after is None else list(after),
        "attrs": None if attrs is None else list(attrs.items()),
        "orderkey": orderkey, "strict": strict}))


def addjob_wait(timeout_ms: int, async_: bool) -> float | None:
    """A synchronous ADDJOB may take its whole replication timeout (0 = no limit)."""
    if async_:
        return 0.0
    return None if timeout_ms == 0 else timeout_ms / 1000


def add_job(queue: str, body: Body, timeout_ms: int, replicate: int | None,
            durations: JobDurations, maxlen: int | None, async_: bool, dedup: Arg | None,
            *, at: datetime | int | None = None, priority: int | None = None,
            group: Arg | None = None, max_deliveries: int | None = None,
            queue_randomly: bool = False, unique: Arg | None = None,
            batch: Arg | None = None, after: Iterable[Arg] | None = None,
            attrs: Mapping[str | bytes, str | bytes] | None = None,
            orderkey: Arg | None = None, strict: bool = False) -> Cmd[str]:
    options = addjob_options(timeout_ms, replicate, durations.delay, durations.retry,
                             durations.ttl, maxlen, async_, dedup,
                             delay_ms=durations.delay_ms, at=at, priority=priority, group=group,
                             max_deliveries=max_deliveries, queue_randomly=queue_randomly,
                             unique=unique, batch=batch, after=after,
                             attrs=attrs, orderkey=orderkey, strict=strict)
    return Cmd(("ADDJOB", queue, to_body(body), *options), _str,
               addjob_wait(timeout_ms, async_))


@dataclass
class JobBatches:
    """The jobs of `add_jobs`, `batch_size` at a time (`chunks`: bodies, and their
    DEDUP keys or None), each sent as one ADDJOBS (`bulk`, disq's batch of ADDJOBs) or
    as pipelined ADDJOBs (`pipelined`: Disque, which has no ADDJOBS); `wait`: how long
    a batch may take."""

    queue: str
    options: tuple[Arg, ...]
    chunks: Iterator[tuple[list[Body], list[Arg] | None]]
    wait: float | None

    def bulk(self, bodies: list[Body], keys: list[Arg] | None) -> list[bytes]:
        return [addjobs_request(self.queue, bodies, self.options, keys)]

    def pipelined(self, bodies: list[Body], keys: list[Arg] | None) -> list[bytes]:
        return encode_addjobs(self.queue, bodies, self.options, keys)


def add_jobs(queue: str, bodies: Iterable[Body], timeout_ms: int, replicate: int | None,
             durations: JobDurations, maxlen: int | None, async_: bool, batch_size: int,
             dedup: Iterable[Arg] | None, *, at: datetime | int | None = None,
             priority: int | None = None, group: Arg | None = None,
             max_deliveries: int | None = None, queue_randomly: bool = False,
             batch: Arg | None = None, after: Iterable[Arg] | None = None,
            attrs: Mapping[str | bytes, str | bytes] | None = None,
             orderkey: Arg | None = None, strict: bool = False) -> JobBatches:
    """A batch of ADDJOBs, `batch_size` jobs a request (see JobBatches)."""
    options = addjob_options(timeout_ms, replicate, durations.delay, durations.retry,
                             durations.ttl, maxlen, async_,
                             delay_ms=durations.delay_ms, at=at, priority=priority, group=group,
                             max_deliveries=max_deliveries, queue_randomly=queue_randomly,
                             batch=batch, after=after, attrs=attrs, orderkey=orderkey,
                             strict=strict)
    if dedup is None:
        chunks: Iterator[tuple[list[Body], list[Arg] | None]] = (
            (chunk, None) for chunk in _chunks(bodies, batch_size))
    else:
        chunks = (([b for b, _ in pairs], [k for _, k in pairs])
                  for pairs in _chunks(zip(bodies, dedup, strict=True), batch_size))
    return JobBatches(queue, options, chunks, addjob_wait(timeout_ms, async_))


def addjobs_request(queue: str, bodies: Sequence[Body], options: tuple[Arg, ...],
                    dedup: Sequence[Arg] | None = None) -> bytes:
    """One ADDJOBS queue <options> JOBS body... | DEDUP-JOBS key body... (disq's
    batch of ADDJOBs: each job added as its own ADDJOB; one array reply)."""
    q = queue.encode("utf-8", "surrogateescape")
    tail = [to_bytes(a) for a in options]
    parts = [b"*%d\r\n$7\r\nADDJOBS\r\n$%d\r\n%s\r\n" % (
        3 + len(tail) + len(bodies) * (1 if dedup is None else 2), len(q), q)]
    parts += [b"$%d\r\n%s\r\n" % (len(a), a) for a in tail]
    parts.append(b"$4\r\nJOBS\r\n" if dedup is None else b"$10\r\nDEDUP-JOBS\r\n")
    for i, body in enumerate(bodies):
        if dedup is not None:
            key = to_bytes(dedup[i])
            parts.append(b"$%d\r\n%s\r\n" % (len(key), key))
        data = body if isinstance(body, bytes) else to_body(body)
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def each_job(reply: object, count: int) -> list[object]:
    """Each job's reply from the reply of an ADDJOBS of `count` jobs: its array, or
    the request's error for every job."""
    if isinstance(reply, ErrorReply):
        return [reply] * count
    if not isinstance(reply, list) or len(reply) != count:
        raise ProtocolError(f"ADDJOBS of {count} jobs answered {reply!r:.200}")
    return reply


def unknown_command(reply: object) -> bool:
    """Whether the server does not know the command (Disque, for ADDJOBS)."""
    return isinstance(reply, ErrorReply) and str(reply).startswith("ERR unknown command")


def job_ids(replies: list[object]) -> list[str]:
    """The IDs pipelined ADDJOBs answered; BatchError if any job was refused."""
    results: list[object] = [r.decode() if isinstance(r, bytes) else error_of(r) or r
                             for r in replies]
    if any(isinstance(r, Exception) for r in results):
        raise BatchError(results)
    return results  # type: ignore[return-value]


def encode_addjobs(queue: str, bodies: Iterable[Body], options: tuple[Arg, ...],
                   dedup: Sequence[Arg] | None = None) -> list[bytes]:
    """The RESP of one ADDJOB per body, built from a prefix and suffix shared by all:
    the produce hot path encodes only each body's length. `dedup`: one DEDUP key per
    body (disq's extension), appended after the shared options."""
    q = queue.encode("utf-8", "surrogateescape")
    tail = [to_bytes(a) for a in options]
    argc = 3 + len(tail) + (2 if dedup is not None else 0)
    head = b"*%d\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n" % (argc, len(q), q)
    suffix = b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in tail)
    out = []
    for i, body in enumerate(bodies):
        data = body if isinstance(body, bytes) else to_body(body)
        cmd = b"%s$%d\r\n%s\r\n%s" % (head, len(data), data, suffix)
        if dedup is not None:
            key = to_bytes(dedup[i])
            cmd += _DEDUP_PREFIX + b"$%d\r\n%s\r\n" % (len(key), key)
        out.append(cmd)
    return out


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


# -- consuming ------------------------------------------------------------------------------
def _job(entry: object) -> Job:
    assert isinstance(entry, list), entry
    job = Job(_str(entry[1]), _str(entry[0]), entry[2])
    if len(entry) > 3:
        # then name/value pairs: "nacks", "additional-deliveries" (WITHCOUNTERS),
        # "priority", "group", "due-ms" (a job using disq's extensions), then
        # "max-deliveries", "dead-from", "dead-reason" (MAXDELIVERIES or a dead letter)
        fields = _pairs(entry[3:])
        job.nacks = _optional_int(fields.get("nacks"))
        job.additional_deliveries = _optional_int(fields.get("additional-deliveries"))
        _ext_fields(job, fields)
        if "attrs" in fields:
            job.attrs = _attrs(fields["attrs"])
    return job


def _attrs(value: object) -> dict[str, str]:
    """key, value, key, value... (SHOW's and GETJOB WITHCOUNTERS' "attrs")."""
    flat = cast("list[bytes]", value)
    return {_str(k): _str(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}


def _ext_fields(job: Job | JobInfo, fields: dict[str, object]) -> None:
    """priority, group, due_ms: replied only for jobs using disq's extensions; then
    max_deliveries, dead_from, dead_reason only for jobs added with MAXDELIVERIES or
    that were ever dead letters."""
    if "priority" in fields:
        job.priority = _int(fields["priority"])
        job.group = _optional_str(fields.get("group"))
        job.due_ms = _int(fields["due-ms"])
    if "max-deliveries" in fields:
        job.max_deliveries = _int(fields["max-deliveries"])
        job.dead_from = _optional_str(fields.get("dead-from"))
        job.dead_reason = _optional_str(fields.get("dead-reason"))


def _notes(info: JobInfo, fields: dict[str, object]) -> None:
    """SHOW's errors (NACK ... ERROR) and progress (WORKING ... PROGRESS / DATA), given
    only for a job that has some."""
    if "errors" in fields:
        info.errors = [JobError(_int(delivery), _int(when), _str(reason))
                       for delivery, when, reason in cast("list[list[object]]",
                                                          fields["errors"])]
    if "progress-data" in fields:
        info.progress = _optional_int(fields.get("progress"))
        data = fields["progress-data"]
        assert data is None or isinstance(data, bytes)
        info.progress_data = data


def _jobs(reply: object) -> list[Job]:
    if reply is None:  # NOHANG or TIMEOUT with nothing to give
        return []
    assert isinstance(reply, list), reply
    return [_job(entry) for entry in reply]


def get_jobs(queues: Sequence[str], count: int, timeout_ms: int, nohang: bool,
             with_counters: bool, where: Sequence[Sequence[Arg]] = ()) -> Cmd[list[Job]]:
    """GETJOB; `where` (a disq extension): filters on the jobs' attributes, each
    (key, op, value) or (key, "EXISTS"); blocked, such a GETJOB gets only the jobs
    queued later that match."""
    if not queues:
        raise ValueError("get_jobs needs at least one queue")
    options = _options(GETJOB, {"nohang": nohang, "timeout": timeout_ms or None,
                             "count": None if count == 1 else count,
                             "with_counters": with_counters})
    for condition in where:
        options += ("WHERE", *condition)
    if nohang:
        wait: float | None = 0.0
    else:
        wait = None if timeout_ms == 0 else timeout_ms / 1000
    return Cmd(("GETJOB", *options, "FROM", *queues), _jobs, wait, gets_jobs=True)


def ids_command(name: str, ids: Sequence[str]) -> Cmd[int]:
    """ACKJOB FASTACK ENQUEUE DEQUEUE DELJOB: an integer reply."""
    return Cmd((name, *ids), _int)


def ack(ids: Sequence[str], result: Body | None) -> Cmd[int]:
    """ACKJOB id ..., or ACKJOB id RESULT blob: `result` (a disq extension) is kept on
    the job's holders for WAITJOB; it acknowledges one job."""
    if result is None:
        return Cmd(("ACKJOB", *ids), _int)
    if len(ids) != 1:
        raise ValueError("a result acknowledges one job")
    return Cmd(("ACKJOB", ids[0], *_options(ACKJOB, {"result": to_body(result)})), _int)


def wait_jobs(ids: Sequence[str], timeout_ms: int | None, any: bool) -> Cmd[list[JobEnd]]:
    """WAITJOB [TIMEOUT ms] [ANY] id ...: until every job (`any`: one) ended, or the
    timeout (None or 0: none); one JobEnd per ID."""
    if not ids:
        raise ValueError("WAITJOB needs at least one job ID")
    options = _options(WAITJOB, {"timeout": timeout_ms, "any": any})
    return Cmd(("WAITJOB", *options, *ids), _job_ends,
               wait=None if not timeout_ms else timeout_ms / 1000)


def _job_ends(value: object) -> list[JobEnd]:
    ends = []
    for entry in cast("list[list[bytes | None]]", value):
        job_id, state, data = entry
        name = cast(EndState, (state or b"").decode())
        if name == "dead":
            ends.append(JobEnd(cast(bytes, job_id).decode(), name,
                               error=None if data is None else data.decode(errors="replace")))
        elif name == "active":
            ends.append(JobEnd(cast(bytes, job_id).decode(), name, progress_data=data))
        else:
            ends.append(JobEnd(cast(bytes, job_id).decode(), name, result=data))
    return ends


def nack(ids: Sequence[str], delay_ms: int | None, error: str | bytes | None = None
         ) -> Cmd[int]:
    """NACK [DELAY-MS ms] [ERROR reason] id ...: `delay_ms` (a disq extension) queues the
    jobs again after that delay instead of at once (or after the queue policy's
    back-off); `error` (one too, at most MAX_ERROR_LEN bytes) is kept with each job."""
    return Cmd(("NACK", *_options(NACK, {"delay_ms": delay_ms, "error": error}), *ids), _int)


def working(job_id: str, progress: int | None = None, data: Body | None = None) -> Cmd[int]:
    """WORKING id [PROGRESS 0-100] [DATA blob] (both disq extensions): the job's RETRY,
    in ms."""
    if progress is None and data is None:
        return Cmd(("WORKING", job_id), _seconds)
    return Cmd(("WORKING", job_id, *_options(WORKING, {
        "progress": progress, "data": None if data is None else to_body(data)})), _seconds)


def _ok(value: object) -> None:
    assert value == b"OK", value


def set_job(job_id: str, priority: int | None, at: datetime | int | None,
            delay_ms: int | None) -> Cmd[None]:
    """JOBSET (a disq extension): `at` as ADDJOB's (a datetime or Unix ms)."""
    return Cmd(("JOBSET", job_id, *_options(JOBSET, {
        "priority": priority, "at": None if at is None else unix_ms(at),
        "delay_ms": delay_ms})), _ok)


def _optional_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _seconds(value: object) -> int:
    """A duration a reply gives in whole seconds (Disque's SHOW, QSTAT), in ms."""
    return _int(value) * 1000


def _optional_seconds(value: object) -> int | None:
    return None if value is None else _seconds(value)


def _optional_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _str_list(value: object) -> list[str]:
    assert isinstance(value, list), value
    return [_str(v) for v in value]


def _pairs(reply: list[object]) -> dict[str, object]:
    return {_str(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


def job_info(reply: object) -> JobInfo | None:
    if reply is None:
        return None
    assert isinstance(reply, list), reply
    f = _pairs(reply)
    body = f["body"]
    assert body is None or isinstance(body, bytes)
    info = JobInfo(
        id=_str(f["id"]), queue=_str(f["queue"]), state=_str(f["state"]),
        repl=_int(f["repl"]), ttl_ms=_seconds(f["ttl"]), ctime=_int(f["ctime"]),
        delay_ms=_seconds(f["delay"]), retry_ms=_seconds(f["retry"]), nacks=_int(f["nacks"]),
        additional_deliveries=_int(f["additional-deliveries"]),
        nodes_delivered=_str_list(f["nodes-delivered"]),
        nodes_confirmed=_str_list(f["nodes-confirmed"]),
        next_requeue_within=_optional_int(f["next-requeue-within"]),
        next_awake_within=_optional_int(f["next-awake-within"]),
        body=body,
    )
    _ext_fields(info, f)
    _notes(info, f)
    if "attrs" in f:
        info.attrs = _attrs(f["attrs"])
    return info


def show(job_id: str) -> Cmd[JobInfo | None]:
    return Cmd(("SHOW", job_id), job_info)


# -- queues ---------------------------------------------------------------------------------
def qlen(queue: str) -> Cmd[int]:
    return Cmd(("QLEN", queue), _int)


def qpeek(queue: str, count: int) -> Cmd[list[Job]]:
    return Cmd(("QPEEK", queue, count), _jobs)


def _queue_stat(reply: object) -> QueueStat | None:
    if reply is None:
        return None
    assert isinstance(reply, list), reply
    f = _pairs(reply)
    return QueueStat(
        name=_str(f["name"]), len=_int(f["len"]), age_ms=_seconds(f["age"]),
        idle_ms=_seconds(f["idle"]),
        blocked=_int(f["blocked"]), import_from=_str_list(f["import-from"]),
        import_rate=_int(f["import-rate"]), jobs_in=_int(f["jobs-in"]),
        jobs_out=_int(f["jobs-out"]), pause=_str(f["pause"]),
    )


def qstat(queue: str) -> Cmd[QueueStat | None]:
    return Cmd(("QSTAT", queue), _queue_stat)


def pause(queue: str, flags: Sequence[PauseOption], bcast: bool) -> Cmd[str]:
    """No flags: only ask the state."""
    words = [(flag.lower(), True) for flag in flags or ("state",)]
    return Cmd(("PAUSE", queue, *_options(PAUSE, [*words, ("bcast", bcast)])), _str)


def cron_add(name: str, queue: str, spec: str, body: Body,
             options: Mapping[str, object]) -> Cmd[str]:
    """CRON ADD (a disq extension); `options`: CRON_ADD's fields (repl, retry, ttl,
    priority, group, tz), None where not given."""
    return Cmd(("CRON", "ADD", name, queue, spec, to_body(body),
                *_options(CRON_ADD, options)), _str)


def cron_del(name: str) -> Cmd[int]:
    return Cmd(("CRON", "DEL", name), _int)


def _cron_entries(reply: object) -> list[CronEntry]:
    assert isinstance(reply, list), reply
    out = []
    for item in reply:
        assert isinstance(item, list), item
        f = _pairs(item)
        out.append(CronEntry(_str(f["name"]), _str(f["queue"]), _str(f["spec"]),
                             _str(f["tz"]), _int(f["next-fire-in"]),
                             _optional_int(f["last-fire"]),
                             _optional_str(f["last-job"]),
                             _optional_int(f.get("replicate")),
                             _optional_int(f.get("tick-replicate"))))
    return out


def cron_list() -> Cmd[list[CronEntry]]:
    return Cmd(("CRON", "LIST"), _cron_entries)


# -- batches (disq's extensions) -----------------------------------------------------------
def batch_new(bid: Arg, options: Mapping[str, object]) -> Cmd[str]:
    """BATCH NEW; `options`: BATCH_NEW's fields (ondone, onsuccess: (queue, body); ttl)."""
    return Cmd(("BATCH", "NEW", bid, *_options(BATCH_NEW, {
        name: (value[0], to_body(value[1])) if isinstance(value, tuple) else value
        for name, value in options.items()})), _str)


def batch_close(bid: Arg) -> Cmd[int]:
    return Cmd(("BATCH", "CLOSE", bid), _int)


def _batch_status(reply: object) -> BatchStatus:
    assert isinstance(reply, list), reply
    f = _pairs(reply)
    callbacks = f["callbacks"]
    assert isinstance(callbacks, list), callbacks
    return BatchStatus(_str(f["id"]), _str(f["state"]), _int(f["members"]),
                       _int(f["pending"]), _int(f["acked"]), _int(f["dead"]),
                       [_str(c) for c in callbacks], _int(f["expires"]))


def batch_status(bid: Arg) -> Cmd[BatchStatus]:
    return Cmd(("BATCH", "STATUS", bid), _batch_status)


def _batch_statuses(reply: object) -> list[BatchStatus]:
    assert isinstance(reply, list), reply
    return [_batch_status(item) for item in reply]


def batch_list(state: str | None) -> Cmd[list[BatchStatus]]:
    """BATCH LIST [STATE open|closed|done]."""
    return Cmd(("BATCH", "LIST", *_options(BATCH_LIST, {"state": state})), _batch_statuses)


# -- topics (disq's extensions) ------------------------------------------------------------
def topic_change(verb: str, topic: Arg, queue: Arg) -> Cmd[int]:
    """TOPIC SUBSCRIBE / UNSUBSCRIBE: 1 if it changed something, else 0."""
    return Cmd(("TOPIC", verb, topic, queue), _int)


def _topics(reply: object) -> dict[str, list[str]]:
    assert isinstance(reply, list), reply
    out = {}
    for item in reply:
        assert isinstance(item, list) and len(item) >= 2, item  # (then the filters)
        out[_str(item[0])] = _str_list(item[1])
    return out


def topic_list(topic: Arg | None) -> Cmd[dict[str, list[str]]]:
    return Cmd(("TOPIC", "LIST", *(() if topic is None else (topic,))), _topics)


def _published(reply: object) -> dict[str, str | ErrorReply]:
    assert isinstance(reply, list), reply
    return {_str(reply[i]): (reply[i + 1] if isinstance(reply[i + 1], ErrorReply)
                             else _str(reply[i + 1])) for i in range(0, len(reply), 2)}


def topic_publish(topic: Arg, body: Body, options: Mapping[str, object]
                  ) -> Cmd[dict[str, str | ErrorReply]]:
    """TOPIC PUBLISH; `options`: TOPIC_PUBLISH's fields (msgid, ADDJOB's but dedup and
    unique). Each subscribed queue and its job's ID, or its error."""
    values = dict(options)
    if values.get("at") is not None:
        values["at"] = unix_ms(values["at"])  # type: ignore[arg-type]
    return Cmd(("TOPIC", "PUBLISH", topic, to_body(body), *_options(TOPIC_PUBLISH, values)),
               _published)


# -- when jobs fail (disq's extensions) -----------------------------------------------------
def rate_arg(rate: float) -> Arg:
    """QPOLICY's RATE as sent: an int as it is, a float in Python's shortest form."""
    return rate if isinstance(rate, int) else repr(float(rate))


def qpolicy_set(queue: str, max_deliveries: int | None, deadletter: Arg | None,
                backoff: tuple[int, int] | None, rate: float | None,
                result_ttl: int | None = None, concurrency: int | None = None, *,
                retry: int | None = None, ttl: int | None = None,
                replicate: int | None = None, maxlen: int | None = None,
                group_concurrency: int | None = None,
                group_rate: float | None = None, retain: int | None = None,
                retain_bytes: int | None = None) -> Cmd[str]:
    """QPOLICY queue SET: the fields given replace the policy's, the others stay."""
    return Cmd(("QPOLICY", queue, "SET", *_options(QPOLICY_SET, {
        "max_deliveries": max_deliveries, "deadletter": deadletter, "backoff": backoff,
        "rate": None if rate is None else rate_arg(rate), "result_ttl": result_ttl,
        "concurrency": concurrency, "retry": retry, "ttl": ttl, "replicate": replicate,
        "maxlen": maxlen, "group_concurrency": group_concurrency,
        "group_rate": None if group_rate is None else rate_arg(group_rate),
        "retain": retain, "retain_bytes": retain_bytes})), _str)


def _queue_policy(reply: object) -> QueuePolicy | None:
    if reply is None:
        return None
    assert isinstance(reply, list), reply
    f = _pairs(reply)
    pair = f["backoff"]  # [base-ms, max-ms] or nil
    backoff = None
    if pair is not None:
        assert isinstance(pair, list) and len(pair) == 2, pair
        backoff = (_int(pair[0]), _int(pair[1]))
    rate = f["rate"]  # a bulk string: "2.5", "10"
    group_rate = f.get("group-rate")
    return QueuePolicy(_str(f["queue"]), _optional_int(f["maxdeliveries"]),
                       _str(f["deadletter"]), backoff,
                       None if rate is None else float(_str(rate)),
                       _optional_seconds(f.get("result-ttl")),
                       _optional_int(f.get("concurrency")),
                       _optional_seconds(f.get("retry")), _optional_seconds(f.get("ttl")),
                       _optional_int(f.get("replicate")), _optional_int(f.get("maxlen")),
                       _optional_int(f.get("group-concurrency")),
                       None if group_rate is None else float(_str(group_rate)),
                       _optional_seconds(f.get("retain")),
                       _optional_int(f.get("retain-bytes")))


def qpolicy_get(queue: str) -> Cmd[QueuePolicy | None]:
    return Cmd(("QPOLICY", queue, "GET"), _queue_policy)


def _bool(value: object) -> bool:
    return bool(_int(value))


def qpolicy_del(queue: str) -> Cmd[bool]:
    return Cmd(("QPOLICY", queue, "DEL"), _bool)


def qdel(queue: str) -> Cmd[int]:
    """QDEL queue: the jobs deleted on the node asked."""
    return Cmd(("QDEL", queue), _int)


def qpurge(queue: str) -> Cmd[int]:
    """QPURGE queue: the jobs deleted on the node asked."""
    return Cmd(("QPURGE", queue), _int)


def requeue_dead(dlq: str, count: int | None) -> Cmd[int]:
    """DEADLETTER REQUEUE dlq [COUNT n]: how many dead letters went back."""
    return Cmd(("DEADLETTER", "REQUEUE", dlq,
                *_options(DEADLETTER_REQUEUE, {"count": count})), _int)


def requeue_dead_jobs(ids: Iterable[str]) -> Cmd[int]:
    """DEADLETTER REQUEUE-JOB id...: how many of these dead letters went back."""
    return Cmd(("DEADLETTER", "REQUEUE-JOB", *ids), _int)


def _scan_page(reply: object) -> tuple[int, list[object]]:
    assert isinstance(reply, list) and len(reply) == 2, reply
    cursor, items = reply
    assert isinstance(items, list), items
    return int(_str(cursor)), items


def qscan(cursor: int, count: int | None, minlen: int | None, maxlen: int | None,
          importrate: int | None) -> Cmd[tuple[int, list[object]]]:
    options = _options(QSCAN, {"cursor": cursor, "count": count, "minlen": minlen,
                            "maxlen": maxlen, "importrate": importrate})
    return Cmd(("QSCAN", *options), _scan_page)


def jscan(cursor: int, count: int | None, queue: str | None, states: Sequence[str],
          reply_all: bool) -> Cmd[tuple[int, list[object]]]:
    options = _options(JSCAN, {"cursor": cursor, "count": count, "queue": queue,
                            "states": states, "reply": "all" if reply_all else "id"})
    return Cmd(("JSCAN", *options), _scan_page)


def scan_names(items: list[object]) -> list[str]:
    return [_str(item) for item in items]


def scan_infos(items: list[object]) -> list[JobInfo]:
    infos = [job_info(item) for item in items]
    return [info for info in infos if info is not None]


# -- server ---------------------------------------------------------------------------------
def _hello(reply: object) -> Hello:
    assert isinstance(reply, list) and len(reply) >= 2, reply
    version, my_id, *entries = reply
    nodes = []
    for entry in entries:
        assert isinstance(entry, list) and len(entry) == 4, entry
        node_id, host, port, priority = entry
        nodes.append(HelloNode(_str(node_id), _str(host), int(_str(port)),
                               int(_str(priority))))
    return Hello(_int(version), _str(my_id), nodes)


def hello() -> Cmd[Hello]:
    return Cmd(("HELLO",), _hello)


def _value(text: str) -> str | int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _info(reply: object) -> dict[str, dict[str, str | int | float]]:
    sections: dict[str, dict[str, str | int | float]] = {}
    current: dict[str, str | int | float] = {}
    for line in _str(reply).splitlines():
        if line.startswith("#"):
            current = sections.setdefault(line[1:].strip().lower(), {})
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = _value(value)
    return sections


def info(section: str | None) -> Cmd[dict[str, dict[str, str | int | float]]]:
    return Cmd(("INFO",) if section is None else ("INFO", section), _info)


def ping() -> Cmd[str]:
    return Cmd(("PING",), _str)


def replay(queue: str, start: int, end: int | None, into: str | None,
           where: Sequence[Sequence[Arg]] = ()) -> Cmd[dict[str, int]]:
    """REPLAY queue FROM start [TO end] [INTO queue] [WHERE ...] (a disq extension):
    the retained jobs of the window added again; what came of it (added, skipped,
    failed, nodes, unreached)."""
    options = _options(REPLAY, {"start": start, "end": end, "into": into})
    for condition in where:
        options += ("WHERE", *condition)
    return Cmd(("REPLAY", queue, *options), _replay_result)


def _replay_result(reply: object) -> dict[str, int]:
    assert isinstance(reply, list), reply
    return {k: _int(v) for k, v in _pairs(reply).items()}


def retained(queue: str, start: int, end: int | None, after: str | None, count: int | None,
             shard: tuple[int, int] | None, where: Sequence[Sequence[Arg]] = ()
             ) -> Cmd[tuple[str, list[RetainedJob]]]:
    """RETAINED queue FROM start ... (a disq extension): a page of one node's retained
    jobs, and the cursor of the next page ("" after the last)."""
    options = _options(RETAINED, {"start": start, "end": end, "after": after,
                                  "count": count,
                                  "shard": None if shard is None else f"{shard[0]}/{shard[1]}"})
    for condition in where:
        options += ("WHERE", *condition)
    return Cmd(("RETAINED", queue, *options), _retained_page)


def _retained_page(reply: object) -> tuple[str, list[RetainedJob]]:
    assert isinstance(reply, list) and len(reply) == 2, reply
    cursor, items = reply
    assert isinstance(items, list), items
    jobs = []
    for item in items:
        assert isinstance(item, list) and len(item) == 7, item
        job_id, queue, body, created, acked, nodes, attrs = item
        assert isinstance(body, bytes) and isinstance(nodes, list) and isinstance(attrs, list)
        jobs.append(RetainedJob(_str(job_id), _str(queue), body, _int(created), _int(acked),
                                [_str(n) for n in nodes],
                                {_str(attrs[i]): _str(attrs[i + 1])
                                 for i in range(0, len(attrs) - 1, 2)}))
    return _str(cursor), jobs
