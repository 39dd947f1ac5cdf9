"""Typed requests: a command's arguments parsed once, checked as Disque checks them,
then handed to the core (`Admission.add_job(request)`). Every front end builds the same
objects: the RESP server with `parse`, the HTTP API from its JSON fields with
`from_fields` (ADDJOB, JOBSET), each value checked by the same option's parser. The
options come from one table per command (disq_client.spec), which the Python client
encodes with.

The options' parsing is options.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

from disq_client.spec import (
    ADDJOB,
    GETJOB,
    JOBSET,
    MAX_ADDJOBS,
    MAX_ATTRS,
    NACK,
    CommandOptions,
)

from . import errors
from .clock import ms_after
from .dedup_table import client_key, is_unique, scoped_key, unique_key
from .errors import fixed
from .ids import is_valid_job_id
from .options import (
    OptionParser,
    compile_options,
    options_before_ids,
    parse_options,
    parsers_by_field,
    set_fields,
    timeout_ms,
    validate_ids,
)
from .where import BAD_WHERE, MAX_CONDITIONS, Condition, parse_condition

DEFAULT_TTL: Final = 24 * 3600

TOO_MANY_ATTRS: Final = fixed(
    "TOO_MANY_ATTRS", "ERR", f"ATTR: a job takes at most {MAX_ATTRS} attributes")
STRICT_WITHOUT_ORDERKEY: Final = fixed(
    "STRICT_WITHOUT_ORDERKEY", "ERR", "STRICT needs an ORDERKEY")
DEDUP_AND_UNIQUE: Final = fixed(
    "DEDUP_AND_UNIQUE", "ERR", "DEDUP and UNIQUE cannot be combined: give one key")


class AddJobExt:
    """ADDJOB's scheduling, priority and dead-letter options: a plain ADDJOB's request has
    none (`AddJob.ext` None), so the hot path sets one field for them all. `unique`, the
    UNIQUE key as parsed, moves to `AddJob.dedup` once the options are read
    (`AddJob._take_unique`)."""

    __slots__ = ("delay_ms", "at", "priority", "group", "max_deliveries", "unique", "batch",
                 "after", "attrs", "orderkey", "strict")

    def __init__(self) -> None:
        self.delay_ms: int | None = None  # ms, from the ADDJOB
        self.at: int | None = None  # Unix ms
        self.priority: int | None = None  # None: DEFAULT_PRIORITY
        self.group: bytes | None = None
        self.max_deliveries: int | None = None  # None: the queue's policy
        self.unique: bytes | None = None  # the client's UNIQUE key, until taken out
        self.batch: bytes | None = None  # BATCH: the batch the job is a member of
        self.after: list[bytes] | None = None  # AFTER: its parents (job or batch IDs)
        self.attrs: dict[bytes, bytes] | None = None  # ATTR: key -> value, as given
        self.orderkey: bytes | None = None  # ORDERKEY: delivered in order, one at a time
        self.strict = False  # ... STRICT: only on a side with a majority

    def empty(self) -> bool:
        """Whether no option is set: the job needs no `JobExt`."""
        return (self.delay_ms is None and self.at is None and self.priority is None
                and self.group is None and self.max_deliveries is None and self.unique is None
                and self.batch is None and self.after is None and self.attrs is None
                and self.orderkey is None and not self.strict)


class AddJob:
    """ADDJOB queue body ms-timeout [REPLICATE n] [DELAY s] [RETRY s] [TTL s]
    [MAXLEN n] [ASYNC] [QUEUE-RANDOMLY] [DEDUP key] [UNIQUE key] [DELAY-MS ms] [AT unix-ms]
    [PRIORITY p] [GROUP g] [MAXDELIVERIES n]. `repl` None: the cluster's default (3, or
    its size if smaller); `retry` None: derived from the TTL; `ttl` 0: not given (the
    queue's QPOLICY TTL, else DEFAULT_TTL: admission.py). DEDUP and the last five
    are disq's extensions; the last five live in `ext` (an `AddJobExt`, None when none is given:
    the job then gets no `JobExt`, and a plain ADDJOB pays one test in the core). They
    read and set as fields of the request all the same (properties below).

    `dedup` is the DEDUP key scoped to the queue (`dedup.scoped_key`: the key of the
    DEDUP table and of the bus), from the constructor's and the parser's client key,
    or the UNIQUE key (`dedup_table.unique_key`): the DEDUP machinery checks both, and a
    UNIQUE key names its job only while the job lives (disq/dedup_table.py). UNIQUE is
    parsed into `ext` (a plain ADDJOB pays nothing for it), then moved here.
    `dedup_check` is no option: the cluster's DEDUP side sets it when the job's copies
    are to check its key (disq/replication/dedup_checks.py)."""

    __slots__ = ("queue", "body", "timeout", "repl", "delay", "retry", "ttl", "maxlen",
                 "async_", "queue_randomly", "dedup", "dedup_check", "ext")
    OPTIONS: ClassVar[CommandOptions] = ADDJOB
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(ADDJOB)
    _FIELDS: ClassVar[dict[str, OptionParser]] = parsers_by_field(_PARSERS)

    def __init__(self, queue: bytes, body: bytes, timeout: int = 0, repl: int | None = None,
                 delay: int = 0, retry: int | None = None, ttl: int = 0,
                 maxlen: int = 0, async_: bool = False, queue_randomly: bool = False,
                 dedup: bytes | None = None, delay_ms: int | None = None,
                 at: int | None = None, priority: int | None = None,
                 group: bytes | None = None, max_deliveries: int | None = None) -> None:
        self.queue = queue
        self.body = body
        self.timeout = timeout  # ms to wait for the copies (0: the default)
        self.repl = repl
        self.delay = delay
        self.retry = retry
        self.ttl = ttl
        self.maxlen = maxlen
        self.async_ = async_
        self.queue_randomly = queue_randomly
        self.dedup = None if dedup is None else scoped_key(queue, dedup)
        self.dedup_check = False
        self.ext: AddJobExt | None = None
        if delay_ms is not None or at is not None or priority is not None or (
                group is not None or max_deliveries is not None):
            ext = self.ext = AddJobExt()
            ext.delay_ms, ext.at, ext.priority, ext.group = delay_ms, at, priority, group
            ext.max_deliveries = max_deliveries
            self._check_exclusive({token for token, value in (
                ("DELAY", delay or None), ("DELAY-MS", delay_ms), ("AT", at))
                if value is not None})

    @classmethod
    def parse(cls, args: list[bytes]) -> AddJob:
        """From a RESP request (args[0] is the command name): __init__'s defaults, then
        the options. (A blank `object.__new__` instance with the defaults set here was
        faster in pure Python, but mypyc's classes refuse one; compiled, the call to
        __init__ is a C call.)"""
        request = AddJob(args[1], args[2])
        if len(args) > 4:
            parse_options(request, cls._PARSERS, args, 4)
            if request.dedup is not None:  # the client's key, in the queue's namespace
                request.dedup = scoped_key(request.queue, request.dedup)
            ext: AddJobExt | None = request.ext  # set by parse_options
            if ext is not None and ext.unique is not None:
                ext = request._take_unique(ext.unique)
            if ext is not None and (ext.delay_ms is not None or ext.at is not None):
                request._check_exclusive(cls._tokens(args, 4))
            if ext is not None and ext.strict and ext.orderkey is None:
                raise STRICT_WITHOUT_ORDERKEY
        timeout = args[3]
        if timeout != b"0":  # options first, then the timeout: Disque's order of errors
            request.timeout = timeout_ms(timeout)
        return request

    @classmethod
    def from_fields(cls, queue: bytes, body: bytes, timeout: int,
                    values: Mapping[str, object]) -> AddJob:
        """From a front end that has the options typed (the HTTP API's JSON): `values`
        by field name (disq_client.spec), each checked as `parse` checks it, in the
        order given, then the timeout (ms, >= 0): the same errors."""
        request = AddJob(queue, body)
        given = set_fields(request, cls._FIELDS, values)
        if request.dedup is not None:  # the client's key, in the queue's namespace
            request.dedup = scoped_key(queue, request.dedup)
        ext = request.ext
        if ext is not None and ext.unique is not None:
            ext = request._take_unique(ext.unique)
        if ext is not None and (ext.delay_ms is not None or ext.at is not None):
            by_field = cls.OPTIONS.by_field
            request._check_exclusive({by_field[field].token for field in given})
        if ext is not None and ext.strict and ext.orderkey is None:
            raise STRICT_WITHOUT_ORDERKEY
        if timeout:
            request.timeout = timeout_ms(b"%d" % timeout)
        return request

    def _take_unique(self, key: bytes) -> AddJobExt | None:
        """The UNIQUE key parsed into `ext`, in the queue's namespace, becomes `dedup`
        (refused with DEDUP); `ext` goes if nothing else is in it. Returns `ext`."""
        if self.dedup is not None:
            raise DEDUP_AND_UNIQUE
        self.dedup = unique_key(self.queue, key)
        ext = self.ext
        assert ext is not None
        ext.unique = None
        if ext.empty():
            self.ext = ext = None
        return ext

    def _ext(self) -> AddJobExt:
        ext = self.ext
        if ext is None:
            ext = self.ext = AddJobExt()
        return ext

    @property
    def extended(self) -> bool:
        """Whether any of DELAY-MS, AT, PRIORITY, GROUP, MAXDELIVERIES was given."""
        return self.ext is not None

    # The fields of `ext`, as the option parser and the other front ends see them.
    @property
    def delay_ms(self) -> int | None:
        return None if self.ext is None else self.ext.delay_ms

    @delay_ms.setter
    def delay_ms(self, value: int) -> None:
        self._ext().delay_ms = value

    @property
    def at(self) -> int | None:
        return None if self.ext is None else self.ext.at

    @at.setter
    def at(self, value: int) -> None:
        self._ext().at = value

    @property
    def priority(self) -> int | None:
        return None if self.ext is None else self.ext.priority

    @priority.setter
    def priority(self, value: int) -> None:
        self._ext().priority = value

    @property
    def group(self) -> bytes | None:
        return None if self.ext is None else self.ext.group

    @group.setter
    def group(self, value: bytes) -> None:
        self._ext().group = value

    @property
    def unique(self) -> bytes | None:
        """The client's UNIQUE key (None: none)."""
        key = self.dedup
        if key is not None and is_unique(key):
            return client_key(key)
        return None if self.ext is None else self.ext.unique

    @unique.setter
    def unique(self, value: bytes) -> None:
        self._ext().unique = value

    @property
    def max_deliveries(self) -> int | None:
        return None if self.ext is None else self.ext.max_deliveries

    @max_deliveries.setter
    def max_deliveries(self, value: int) -> None:
        self._ext().max_deliveries = value

    @property
    def batch(self) -> bytes | None:
        return None if self.ext is None else self.ext.batch

    @batch.setter
    def batch(self, value: bytes) -> None:
        self._ext().batch = value

    @property
    def after(self) -> list[bytes] | None:
        return None if self.ext is None else self.ext.after

    @after.setter
    def after(self, value: bytes | list[bytes]) -> None:
        """AFTER is given again for each parent: each value adds one (a list: the
        typed front ends' whole list)."""
        ext = self._ext()
        parents = list(value) if isinstance(value, list) else [value]
        if ext.after is None:
            ext.after = parents
        else:
            ext.after += parents

    @property
    def attrs(self) -> list[tuple[bytes, bytes]] | None:
        return None if self.ext is None or self.ext.attrs is None else list(
            self.ext.attrs.items())

    @attrs.setter
    def attrs(self, value: tuple[bytes, bytes] | list[tuple[bytes, bytes]]) -> None:
        """ATTR is given again for each attribute: each pair adds one (a list: the typed
        front ends' whole list); a key given again takes the last value. More than
        MAX_ATTRS keys is an error."""
        ext = self._ext()
        attrs = ext.attrs if ext.attrs is not None else {}
        for key, text in value if isinstance(value, list) else [value]:
            attrs[key] = text
        if len(attrs) > MAX_ATTRS:
            raise TOO_MANY_ATTRS
        ext.attrs = attrs

    @property
    def orderkey(self) -> bytes | None:
        return None if self.ext is None else self.ext.orderkey

    @orderkey.setter
    def orderkey(self, value: bytes) -> None:
        self._ext().orderkey = value

    @property
    def strict(self) -> bool:
        return self.ext is not None and self.ext.strict

    @strict.setter
    def strict(self, value: bool) -> None:
        self._ext().strict = value

    def with_job(self, body: bytes, dedup: bytes | None) -> AddJob:
        """The request of one job of an ADDJOBS: this one's options (`ext` shared: it
        is not changed once parsed), `body` and its DEDUP key (the client's)."""
        request = AddJob(self.queue, body, self.timeout, self.repl, self.delay, self.retry,
                         self.ttl, self.maxlen, self.async_, self.queue_randomly, dedup)
        request.ext = self.ext
        return request

    @classmethod
    def _tokens(cls, args: list[bytes], start: int, end: int = -1) -> set[str]:
        """The option tokens (as spelled in the table) of args[start:end] (to the end
        if -1), options known to be valid."""
        parsers = cls._PARSERS
        by_field = cls.OPTIONS.by_field
        given = set()
        j = start
        if end < 0:
            end = len(args)
        while j < end:
            parser = parsers.get(args[j]) or parsers[args[j].lower()]
            given.add(by_field[parser.field].token)
            j += 1 + parser.values
        return given

    @classmethod
    def _check_exclusive(cls, given: set[str]) -> None:
        """At most one of DELAY, DELAY-MS and AT (an option error: before the timeout's)."""
        message = cls.OPTIONS.exclusive_error(given)
        if message is not None:
            raise errors.err(message)


ADDJOBS_SYNTAX: Final = fixed(
    "ADDJOBS_SYNTAX", "ERR", "ADDJOBS needs JOBS body [body ...] or DEDUP-JOBS key body "
    "[key body ...] after its options")
ADDJOBS_DEDUP: Final = fixed(
    "ADDJOBS_DEDUP", "ERR", "ADDJOBS takes its DEDUP keys per job: DEDUP-JOBS key body "
    "[key body ...]")
ADDJOBS_UNIQUE: Final = fixed(
    "ADDJOBS_UNIQUE", "ERR", "ADDJOBS takes no UNIQUE key (one key would name one job of "
    "the batch): add such jobs with ADDJOB ... UNIQUE key")
ADDJOBS_TOO_MANY: Final = fixed(
    "ADDJOBS_TOO_MANY", "ERR", f"ADDJOBS takes at most {MAX_ADDJOBS} jobs")


class AddJobs:
    """ADDJOBS queue ms-timeout [ADDJOB's options but DEDUP, UNIQUE] JOBS body [body ...]
    | DEDUP-JOBS key body [key body ...] (a disq extension): many jobs of one queue,
    each added as its own ADDJOB with the options (`job(i)`). Every key is checked
    before any job is added; JOBS or DEDUP-JOBS ends the options (a body may look like
    an option)."""

    __slots__ = ("options", "args", "first", "keyed", "count")

    def __init__(self, options: AddJob, args: list[bytes], first: int, keyed: bool) -> None:
        self.options = options  # the ADDJOB options every job gets (body unset)
        self.args = args
        self.first = first  # args[first]: the first job's body (or key)
        self.keyed = keyed
        self.count = (len(args) - first) // 2 if keyed else len(args) - first

    @classmethod
    def parse(cls, args: list[bytes]) -> AddJobs:
        options = AddJob(args[1], b"")
        end = parse_options(options, AddJob._PARSERS, args, 3, b"jobs", b"dedup-jobs")
        if end >= len(args) - 1:
            raise ADDJOBS_SYNTAX
        if options.dedup is not None:
            raise ADDJOBS_DEDUP
        ext = options.ext
        if ext is not None and ext.unique is not None:
            raise ADDJOBS_UNIQUE
        if ext is not None and (ext.delay_ms is not None or ext.at is not None):
            options._check_exclusive(AddJob._tokens(args, 3, end))
        if ext is not None and ext.strict and ext.orderkey is None:
            raise STRICT_WITHOUT_ORDERKEY
        keyed = args[end].lower() == b"dedup-jobs"
        first = end + 1
        if keyed:
            if (len(args) - first) % 2:
                raise ADDJOBS_SYNTAX
            check_key = AddJob._PARSERS[b"dedup"].value
            for j in range(first, len(args), 2):
                check_key(args[j])
        request = cls(options, args, first, keyed)
        if request.count > MAX_ADDJOBS:
            raise ADDJOBS_TOO_MANY
        timeout = args[2]
        if timeout != b"0":
            options.timeout = timeout_ms(timeout)
        return request

    def job(self, i: int) -> AddJob:
        """The ADDJOB of the i-th job."""
        if self.keyed:
            at = self.first + 2 * i
            return self.options.with_job(self.args[at + 1], self.args[at])
        return self.options.with_job(self.args[self.first + i], None)


class JobSet:
    """JOBSET id [PRIORITY p] [AT unix-ms] [DELAY-MS ms] (a disq extension): change a
    job not acknowledged yet, on every node that holds it. At least one option; AT and
    DELAY-MS exclusive, as in ADDJOB."""

    __slots__ = ("job_id", "priority", "at", "delay_ms")
    OPTIONS: ClassVar[CommandOptions] = JOBSET
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(JOBSET)
    _FIELDS: ClassVar[dict[str, OptionParser]] = parsers_by_field(_PARSERS)

    def __init__(self, job_id: bytes, priority: int | None = None, at: int | None = None,
                 delay_ms: int | None = None) -> None:
        self.job_id = job_id
        self.priority = priority
        self.at = at  # Unix ms (a time in the past: now)
        self.delay_ms = delay_ms  # (built from fields: the builder's to check, `_check`)

    @classmethod
    def parse(cls, args: list[bytes]) -> JobSet:
        """From a RESP request (args[0] is the command name): the ID is checked first,
        then the options in the order given."""
        if not is_valid_job_id(args[1]):
            raise errors.BADID
        request = JobSet(args[1])
        parse_options(request, cls._PARSERS, args, 2)
        request._check()
        return request

    @classmethod
    def from_fields(cls, job_id: bytes, values: Mapping[str, object]) -> JobSet:
        """From typed options (the HTTP API's JSON; `AddJob.from_fields`), the ID
        checked first, as `parse` does."""
        if not is_valid_job_id(job_id):
            raise errors.BADID
        request = JobSet(job_id)
        set_fields(request, cls._FIELDS, values)
        request._check()
        return request

    def _check(self) -> None:
        if self.at is not None and self.delay_ms is not None:
            raise errors.err(self.OPTIONS.exclusive_error(("AT", "DELAY-MS")) or "")
        if self.priority is None and self.at is None and self.delay_ms is None:
            raise errors.err("JOBSET needs PRIORITY, AT or DELAY-MS")

    def due(self, now: int) -> int | None:
        """The new due time (Unix ms on this node's clock; an AT in the past is now),
        None if the request does not change it."""
        if self.delay_ms is not None:
            return ms_after(now, self.delay_ms)
        if self.at is not None:
            return self.at if self.at > now else now
        return None


class GetJob:
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] [WHERE key op value ...]
    FROM queue [queue ...]. WHERE (a disq extension, where.py) takes only the jobs
    whose attributes match; blocked, it is served only the jobs queued later that
    match (Consumers: each arriving job is checked against the filtered consumers)."""

    __slots__ = ("queues", "nohang", "timeout", "count", "with_counters", "where")
    OPTIONS: ClassVar[CommandOptions] = GETJOB
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(GETJOB)

    def __init__(self, queues: list[bytes], nohang: bool = False, timeout: int = 0,
                 count: int = 1, with_counters: bool = False,
                 where: list[Condition] | None = None) -> None:
        self.queues = queues
        self.nohang = nohang
        self.timeout = timeout  # ms; 0: wait for ever
        self.count = count
        self.with_counters = with_counters
        self.where = where  # None: every job (the plain path)

    @classmethod
    def parse(cls, args: list[bytes]) -> GetJob:
        request = cls([])
        start = parse_options(request, cls._PARSERS, args, 1, b"from", b"where")
        while start < len(args) and args[start].lower() == b"where":
            condition, after = parse_condition(args, start + 1)
            where = request.where
            if where is None:
                where = request.where = []
            elif len(where) >= MAX_CONDITIONS:
                raise BAD_WHERE
            where.append(condition)
            start = parse_options(request, cls._PARSERS, args, after, b"from", b"where")
        start += 1
        if start >= len(args):  # no FROM, or no queue after it
            raise errors.SYNTAX
        request.queues = args[start:]
        return request


class Nack:
    """NACK [DELAY-MS ms] [ERROR reason] id [id ...]: DELAY-MS (a disq extension) queues
    the jobs again after that delay, not at once; ERROR (one too) is kept with each
    job. No job ID can be an option's token."""

    __slots__ = ("ids", "delay_ms", "error")
    OPTIONS: ClassVar[CommandOptions] = NACK
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(NACK)

    def __init__(self, ids: list[bytes], delay_ms: int | None = None,
                 error: bytes | None = None) -> None:
        self.ids = ids
        self.delay_ms = delay_ms
        self.error = error  # ERROR reason (a disq extension): kept with each job

    @classmethod
    def parse(cls, args: list[bytes]) -> Nack:
        request = cls([])
        start = options_before_ids(request, cls._PARSERS, args)
        request.ids = validate_ids(args[start:])  # none: 0, as Disque answers
        return request

    @classmethod
    def from_fields(cls, ids: list[bytes], values: Mapping[str, object]) -> Nack:
        """From typed options (the HTTP API's JSON), checked as `parse` checks them."""
        request = cls(validate_ids(ids))
        set_fields(request, parsers_by_field(cls._PARSERS), values)
        return request
