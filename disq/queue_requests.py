"""Typed requests of the queue and schedule commands (QSCAN, JSCAN, PAUSE, CRON ADD,
QPOLICY SET, DEADLETTER REQUEUE), parsed as requests.py parses the job commands' (the
same option tables, disq_client.spec, and the same number rules)."""

from __future__ import annotations

from typing import ClassVar, Final, Self

from disq_client.spec import (
    CRON_ADD,
    CRON_NAME_MAX_LEN,
    DEADLETTER_REQUEUE,
    FLAG,
    JSCAN,
    PAUSE,
    QPOLICY_SET,
    QSCAN,
    CommandOptions,
)

from . import errors
from .options import OptionParser, compile_options, parse_options
from .queue import PAUSED_ALL, PAUSED_IN, PAUSED_OUT


class _Scan:
    """What QSCAN and JSCAN share: [cursor] [COUNT n] [BUSYLOOP], then each one's filters.
    The first argument that is not an option (or is one without its value) is the cursor;
    a second one is a syntax error. COUNT's value is checked as it is read, the filters'
    values once every argument is placed, in the order given: an error in a filter comes
    after the cursor's. A filter given twice is checked twice, the last one kept."""

    __slots__ = ("cursor", "count", "busyloop")
    _PARSERS: ClassVar[dict[bytes, OptionParser]]
    _CURSOR: ClassVar[OptionParser]

    def __init__(self, cursor: int = 0, count: int = 100, busyloop: bool = False) -> None:
        self.cursor = cursor
        self.count = count  # buckets per step (< 1: one step; negative: to the end)
        self.busyloop = busyloop  # on to the end of the table in this call

    @classmethod
    def parse(cls, args: list[bytes]) -> Self:
        request = cls()
        parsers = cls._PARSERS
        filters: list[tuple[OptionParser, bytes]] = []
        cursor_given = False
        argc = len(args)
        j = 1
        while j < argc:
            arg = args[j]
            parser = parsers.get(arg) or parsers.get(arg.lower())
            if parser is not None and parser.kind == FLAG:
                setattr(request, parser.field, True)
            elif parser is not None and j + 1 < argc:
                j += 1
                if parser.field == "count":
                    request.count = parser.value(args[j])  # type: ignore[assignment]
                else:
                    filters.append((parser, args[j]))
            elif cursor_given:
                raise errors.SYNTAX
            else:
                request.cursor = cls._CURSOR.value(arg)  # type: ignore[assignment]
                cursor_given = True
            j += 1
        for parser, arg in filters:
            if parser.repeat:
                getattr(request, parser.field).append(parser.value(arg))
            else:
                setattr(request, parser.field, parser.value(arg))
        return request


def _cursor_parser(spec: CommandOptions) -> OptionParser:
    assert spec.positional is not None
    return OptionParser(spec.positional)


class QScan(_Scan):
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]: queues
    of at least `minlen` and at most `maxlen` jobs, importing at least `importrate`
    jobs/s (a negative bound: no filter)."""

    __slots__ = ("minlen", "maxlen", "importrate")
    OPTIONS: ClassVar[CommandOptions] = QSCAN
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(QSCAN)
    _CURSOR: ClassVar[OptionParser] = _cursor_parser(QSCAN)

    def __init__(self, cursor: int = 0, count: int = 100, busyloop: bool = False,
                 minlen: int = -1, maxlen: int = -1, importrate: int = -1) -> None:
        super().__init__(cursor, count, busyloop)
        self.minlen = minlen
        self.maxlen = maxlen
        self.importrate = importrate


class JScan(_Scan):
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY all|id]: jobs
    of `queue` (None: any) in any of `states` (names; none: any), replied as IDs or,
    `reply` "all", as SHOW's fields."""

    __slots__ = ("queue", "states", "reply")
    OPTIONS: ClassVar[CommandOptions] = JSCAN
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(JSCAN)
    _CURSOR: ClassVar[OptionParser] = _cursor_parser(JSCAN)

    def __init__(self, cursor: int = 0, count: int = 100, busyloop: bool = False,
                 queue: bytes | None = None, states: list[str] | None = None,
                 reply: str = "id") -> None:
        super().__init__(cursor, count, busyloop)
        self.queue = queue
        self.states = states if states is not None else []
        self.reply = reply


class Pause:
    """PAUSE queue word [word ...], the words applied in order (disq_client.spec.PAUSE).
    `flags`: the pause state asked, None when no word asks one (only `state` or `bcast`:
    the state is replied as it is); `bcast`: send the result to every node."""

    __slots__ = ("queue", "flags", "bcast")
    OPTIONS: ClassVar[CommandOptions] = PAUSE
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(PAUSE)
    _FLAGS: ClassVar[dict[str, int]] = {"in": PAUSED_IN, "out": PAUSED_OUT, "all": PAUSED_ALL, "none": 0}

    def __init__(self, queue: bytes, flags: int | None = None, bcast: bool = False) -> None:
        self.queue = queue
        self.flags = flags
        self.bcast = bcast

    @classmethod
    def parse(cls, args: list[bytes]) -> Pause:
        request = cls(args[1])
        parsers = cls._PARSERS
        for arg in args[2:]:
            parser = parsers.get(arg) or parsers.get(arg.lower())
            if parser is None:
                raise errors.SYNTAX
            word = parser.field
            if word == "bcast":
                request.bcast = True
            elif word != "state":  # none clears what the words before asked
                bits = cls._FLAGS[word]
                request.flags = (request.flags or 0) | bits if bits else 0
        return request


class CronAdd:
    """CRON ADD name queue spec body [REPLICATE n] [RETRY s] [TTL s] [PRIORITY p]
    [GROUP g] [TZ zone] (a disq extension): a schedule (disq/schedules.py)."""

    __slots__ = ("name", "queue", "spec", "body", "repl", "retry", "ttl", "priority",
                 "group", "tz")
    OPTIONS: ClassVar[CommandOptions] = CRON_ADD
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(CRON_ADD)

    def __init__(self, name: bytes, queue: bytes, spec: bytes, body: bytes,
                 repl: int | None = None, retry: int | None = None, ttl: int | None = None,
                 priority: int | None = None, group: bytes | None = None,
                 tz: bytes = b"") -> None:
        self.name = name
        self.queue = queue
        self.spec = spec
        self.body = body
        self.repl = repl
        self.retry = retry
        self.ttl = ttl
        self.priority = priority
        self.group = group
        self.tz = tz

    @classmethod
    def parse(cls, args: list[bytes]) -> CronAdd:
        """From `CRON ADD name queue spec body ...` (args[0] is CRON)."""
        if len(args) < 6:
            raise errors.err("wrong number of arguments for 'cron add'")
        request = cls(args[2], args[3], args[4], args[5])
        if not 0 < len(request.name) <= CRON_NAME_MAX_LEN:
            raise errors.err(f"CRON name must be 1 to {CRON_NAME_MAX_LEN} bytes")
        if not request.queue:
            raise errors.err("CRON queue name must not be empty")
        parse_options(request, cls._PARSERS, args, 6)
        if request.retry == 0 and (request.repl is None or request.repl > 1):
            raise errors.err("With RETRY set to 0 please explicitly set  REPLICATE to 1 "
                             "(at-most-once delivery)")
        return request


# -- when jobs fail ----------------------------------------------------------------------
POLICY_FIELDS: Final = ", ".join(option.token for option in QPOLICY_SET.options)
POLICY_FIELD_CHOICE: Final = " or ".join(POLICY_FIELDS.rsplit(", ", 1))


class QPolicySet:
    """QPOLICY queue SET [MAXDELIVERIES n] [DEADLETTER queue] [BACKOFF base-ms max-ms]
    [RATE jobs-per-second] [CONCURRENCY n] [RESULT-TTL s] [RETRY s] [TTL s]
    [REPLICATE n] [MAXLEN n] [GROUP-CONCURRENCY n] [GROUP-RATE jobs-per-second] (a disq
    extension): the fields to change in the queue's policy (None: unchanged). At least
    one."""

    __slots__ = ("queue", "max_deliveries", "deadletter", "backoff", "rate", "result_ttl",
                 "concurrency", "retry", "ttl", "replicate", "maxlen", "group_concurrency",
                 "group_rate", "retain", "retain_bytes")
    OPTIONS: ClassVar[CommandOptions] = QPOLICY_SET
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(QPOLICY_SET)

    def __init__(self, queue: bytes, max_deliveries: int | None = None,
                 deadletter: bytes | None = None, backoff: tuple[int, int] | None = None,
                 rate: float | None = None, result_ttl: int | None = None,
                 concurrency: int | None = None, retry: int | None = None,
                 ttl: int | None = None, replicate: int | None = None,
                 maxlen: int | None = None, group_concurrency: int | None = None,
                 group_rate: float | None = None, retain: int | None = None,
                 retain_bytes: int | None = None) -> None:
        self.queue = queue
        self.max_deliveries = max_deliveries
        self.deadletter = deadletter
        self.backoff = backoff  # (base ms, max ms)
        self.rate = rate
        self.result_ttl = result_ttl  # s
        self.concurrency = concurrency
        self.retry = retry  # s: the ADDJOB defaults
        self.ttl = ttl  # s
        self.replicate = replicate
        self.maxlen = maxlen
        self.group_concurrency = group_concurrency
        self.group_rate = group_rate
        self.retain = retain  # s (retention/)
        self.retain_bytes = retain_bytes

    @classmethod
    def parse(cls, args: list[bytes]) -> QPolicySet:
        """From `QPOLICY queue SET ...` (args[0] is QPOLICY)."""
        request = cls(args[1])
        if len(args) < 4:
            raise errors.err(f"QPOLICY SET needs at least one of {POLICY_FIELDS}")
        j = 3
        while j < len(args):  # an unknown field is named (a value missing: syntax error)
            parser = cls._PARSERS.get(args[j]) or cls._PARSERS.get(args[j].lower())
            if parser is None:
                field = args[j].decode(errors="replace")[:64]
                raise errors.err(f"unknown QPOLICY field '{field}', try {POLICY_FIELD_CHOICE}")
            j += 1 + parser.values
        parse_options(request, cls._PARSERS, args, 3)
        if request.deadletter is not None and request.deadletter == request.queue:
            raise errors.err("DEADLETTER must be another queue than the queue itself")
        if request.retain_bytes is not None and request.retain is None:
            raise errors.err("RETAIN-BYTES needs RETAIN seconds in the same QPOLICY SET")
        return request


def check_defaults(retry: int, ttl: int, replicate: int) -> None:
    """A queue's ADDJOB defaults as they would be with this QPOLICY SET (-1 / 0:
    none): refused if every ADDJOB that takes them would be refused, or would never
    be retried (QPOLICY SET changes nothing then)."""
    if retry == 0 and replicate != 1:
        raise errors.err("With RETRY set to 0 please explicitly set  REPLICATE to 1 "
                         "(at-most-once delivery)")
    if retry > 0 and ttl and retry > ttl:
        raise errors.err("The specified RETRY is greater than TTL: the job would expire "
                         "before it is queued again")


class DeadletterRequeue:
    """DEADLETTER REQUEUE queue [COUNT n] (a disq extension)."""

    __slots__ = ("queue", "count")
    OPTIONS: ClassVar[CommandOptions] = DEADLETTER_REQUEUE
    _PARSERS: ClassVar[dict[bytes, OptionParser]] = compile_options(DEADLETTER_REQUEUE)

    def __init__(self, queue: bytes, count: int = 0) -> None:
        self.queue = queue
        self.count = count  # 0: all

    @classmethod
    def parse(cls, args: list[bytes]) -> DeadletterRequeue:
        """From `DEADLETTER REQUEUE queue ...` (args[0] is DEADLETTER)."""
        if len(args) < 3:
            raise errors.err("wrong number of arguments for 'deadletter requeue'")
        request = cls(args[2])
        parse_options(request, cls._PARSERS, args, 3)
        return request
