"""The commands' options, defined once.

The server parses requests with these tables (disq/requests.py), this client encodes
its calls with them, and the HTTP API maps its fields through them: an option is
added here, and every front end takes it. The module has no dependency, so the client
installs without the server; the server depends on this package for it.

An option is a token, optionally followed by one value. `field` is its name in a
parsed request and in the client's keyword arguments. Values are checked as Disque
checks them (strtoll: optional sign, digits only, 64-bit), and an option out of its
range is refused with its own message, Disque's text where Disque has the option.
A command may also take one argument without a token among its options (`positional`:
the SCAN commands' cursor), and an option may be given again (`repeat`: JSCAN's STATE).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

FLAG = "flag"  # the token alone: the field becomes True
INT = "int"  # an integer in [low, high]
MS = "ms"  # a timeout in milliseconds: an integer >= 0 (Disque's timeout errors)
BYTES = "bytes"  # a string of min_len to max_len bytes
CHOICE = "choice"  # one of `choices`, in any case: the field is the choice as spelled here
NUMBER = "number"  # a decimal number (2, 0.5) above low, at most high: a float
INT_PAIR = "int-pair"  # two integers in [low, high], the second not below the first
QUEUE_BODY = "queue-body"  # a queue name (min_len to max_len bytes), then a job body
# a key of min_len to max_len bytes, then a value of 0 to `high` bytes (ADDJOB's ATTR)
STR_PAIR = "str-pair"
PAIRS = (INT_PAIR, QUEUE_BODY, STR_PAIR)  # the kinds followed by two values

LL_MIN = -(2**63)  # INT: the lowest bound, for a number taken as it is


@dataclass(frozen=True)
class Option:
    token: str  # as sent: REPLICATE (upper case but for PAUSE's words)
    field: str  # the request's attribute and the client's keyword: repl
    kind: str  # FLAG, INT, MS, BYTES or CHOICE
    error: str = ""  # INT/BYTES/CHOICE: the -ERR message for a value out of range
    low: int = 0  # INT: inclusive bounds
    high: int = 2**63 - 1
    min_len: int = 1  # BYTES: inclusive bounds
    max_len: int = 512 * 1024 * 1024
    extension: bool = False  # a disq extension: Disque has no such option
    choices: tuple[str, ...] = ()  # CHOICE: the values taken, lower case
    repeat: bool = False  # may be given again: the field is the list of the values
    doc: str = ""  # what it does, its unit (the command reference, the OpenAPI bodies)
    # The value on the wire is whole seconds (Disque's unit for DELAY, RETRY, TTL), but the
    # Python client and the HTTP API take milliseconds for it, as for every other duration:
    # `<field>_ms` (an int, or a timedelta under `<field>` in the client), rounded up to
    # whole seconds when sent, so that a job is never retried or expired early.
    seconds: bool = False

    @property
    def takes_value(self) -> bool:
        return self.kind != FLAG

    @property
    def values(self) -> int:
        """How many arguments follow the token."""
        return 0 if self.kind == FLAG else 2 if self.kind in PAIRS else 1


@dataclass(frozen=True)
class CommandOptions:
    name: str
    options: tuple[Option, ...]
    positional: Option | None = None  # an argument without token, sent first
    # Tokens of which one request may give at most one (ADDJOB's DELAY, DELAY-MS, AT).
    exclusive: tuple[str, ...] = ()
    by_token: dict[bytes, Option] = field(init=False, repr=False, compare=False)
    by_field: dict[str, Option] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # lowercase and uppercase spellings: found without lowercasing the token first
        tokens = {}
        for option in self.options:
            token = option.token.encode()
            tokens[token] = tokens[token.lower()] = option
        object.__setattr__(self, "by_token", tokens)
        object.__setattr__(self, "by_field", {o.field: o for o in self.options})

    def lookup(self, token: bytes) -> Option | None:
        return self.by_token.get(token) or self.by_token.get(token.lower())

    def exclusive_error(self, given: Collection[str]) -> str | None:
        """The -ERR message for `given` (the tokens of a request's options, as in the
        table) if two of them are exclusive, naming the first two; else None."""
        both = [token for token in self.exclusive if token in given]
        return f"{both[0]} and {both[1]} are mutually exclusive" if len(both) > 1 else None

    def encode(self, values: Mapping[str, object] | Iterable[tuple[str, object]]
               ) -> list[object]:
        """The option tokens and values for `values` (field -> value, or (field, value)
        pairs where the order matters: PAUSE's words): None and False leave an option
        out, a repeated option takes a list. A field this command does not have is a
        TypeError."""
        out: list[object] = []
        positional = self.positional
        for name, value in values.items() if isinstance(values, Mapping) else values:
            if positional is not None and name == positional.field:
                if value is not None:
                    out.insert(0, value)
                continue
            option = self.by_field.get(name)
            if option is None:
                raise TypeError(f"{self.name} has no option {name!r}")
            if value is None or value is False:
                continue
            if option.repeat and option.kind in PAIRS:  # ATTR: pairs (a dict too)
                items = value.items() if isinstance(value, Mapping) else value
                for first, second in cast(Iterable[tuple[object, object]], items):
                    out += (option.token, first, second)
            elif option.repeat:
                for item in cast(Iterable[object], value):
                    out += (option.token, item)
            elif option.kind in PAIRS:
                first, second = cast(tuple[object, object], value)
                out += (option.token, first, second)
            elif option.takes_value:
                out += (option.token, value)
            else:
                out.append(option.token)
        return out


DEDUP_KEY_MAX_LEN = 256
MAX_ADDJOBS = 10_000  # jobs in one ADDJOBS: a bigger batch would hold a node's loop
MAX_DELIVERIES = 65535
GROUP_MAX_LEN = 256
BATCH_ID_MAX_LEN = 256
QUEUE_NAME_MAX_LEN = 1024  # a dead-letter queue's name, a callback's queue
MIN_PRIORITY, MAX_PRIORITY = 0, 255  # 0 is the most urgent; a job without PRIORITY: 128
# ADDJOB ... ATTR key value: a few small strings kept with a job (GETJOB ... WHERE)
MAX_ATTRS = 16
ATTR_KEY_MAX_LEN = 64
ATTR_VALUE_MAX_LEN = 256
ORDERKEY_MAX_LEN = 256

ADDJOB = CommandOptions("ADDJOB", (
    Option("REPLICATE", "repl", INT, "REPLICATE must be between 1 and 65535", 1, 65535,
           doc="copies of the job in the cluster, this node's included, before the reply (default: 3, or the cluster's size if smaller)"),
    Option("DELAY", "delay", INT, "DELAY time must be a non negative number", 0,
           seconds=True, doc="seconds before the job is queued (delivered no earlier)"),
    Option("RETRY", "retry", INT, "RETRY time must be a non negative number", 0,
           seconds=True, doc="seconds after a delivery before the job, not acknowledged, is queued again (0: at most once; default 300, or a tenth of TTL if that is smaller, at least 1)"),
    Option("TTL", "ttl", INT, "TTL must be a number > 0", 1,
           seconds=True, doc="seconds the job lives, delivered or not (default a day)"),
    Option("MAXLEN", "maxlen", INT, "MAXLEN must be a positive number", 1,
           doc="refuse the job (-MAXLEN) if the queue has this many jobs here already"),
    Option("ASYNC", "async_", FLAG,
           doc="answer once this node has the job; the copies are made in the background"),
    Option("QUEUE-RANDOMLY", "queue_randomly", FLAG,
           doc="queue the job on a random node among its holders, not this one"),
    Option("DEDUP", "dedup", BYTES, f"DEDUP key must be 1 to {DEDUP_KEY_MAX_LEN} bytes",
           max_len=DEDUP_KEY_MAX_LEN, extension=True,
           doc="a key: if the cluster added a job with it already, that job's ID is answered and nothing is added"),
    # at most one job with the key in the queue while one is queued or running
    Option("UNIQUE", "unique", BYTES, f"UNIQUE key must be 1 to {DEDUP_KEY_MAX_LEN} bytes",
           max_len=DEDUP_KEY_MAX_LEN, extension=True,
           doc="a key: while a job added with it to the queue is queued or running, that job's ID is answered and nothing is added"),
    # scheduling to the millisecond, priorities and fairness groups
    Option("DELAY-MS", "delay_ms", INT, "DELAY-MS time must be a non negative number", 0,
           extension=True,
           doc="milliseconds before the job is queued (delivered no earlier)"),
    Option("AT", "at", INT, "AT must be a Unix time in milliseconds", 0, extension=True,
           doc="Unix time in milliseconds at which the job is queued (delivered no earlier)"),
    Option("PRIORITY", "priority", INT,
           f"PRIORITY must be between {MIN_PRIORITY} and {MAX_PRIORITY}", MIN_PRIORITY,
           MAX_PRIORITY, extension=True,
           doc="0 (most urgent) to 255; default 128: a lower one is delivered first"),
    Option("GROUP", "group", BYTES, f"GROUP must be 1 to {GROUP_MAX_LEN} bytes",
           max_len=GROUP_MAX_LEN, extension=True,
           doc="a fairness group: a queue's groups are served in turn"),
    # deliveries before the job becomes a dead letter (wins over QPOLICY's)
    Option("MAXDELIVERIES", "max_deliveries", INT,
           f"MAXDELIVERIES must be between 1 and {MAX_DELIVERIES}", 1, MAX_DELIVERIES,
           extension=True,
           doc="deliveries after which a failed job becomes a dead letter (wins over QPOLICY's)"),
    # a member of a batch (BATCH NEW): its callback waits for the job's end
    Option("BATCH", "batch", BYTES, f"BATCH must be 1 to {BATCH_ID_MAX_LEN} bytes",
           max_len=BATCH_ID_MAX_LEN, extension=True,
           doc="the batch (BATCH NEW) the job is a member of"),
    # a flow: the job waits until each parent (a job ID, or a batch ID) is acked or done
    Option("AFTER", "after", BYTES, f"AFTER must be a job ID or a batch ID of 1 to "
           f"{BATCH_ID_MAX_LEN} bytes", max_len=BATCH_ID_MAX_LEN, extension=True,
           repeat=True,
           doc="a parent job or batch ID: the job waits until it is acknowledged or done (a flow)"),
    # attributes: a key and a value each time (the same key again: the last value)
    Option("ATTR", "attrs", STR_PAIR, f"ATTR needs a key of 1 to {ATTR_KEY_MAX_LEN} bytes "
           f"and a value of at most {ATTR_VALUE_MAX_LEN} bytes", high=ATTR_VALUE_MAX_LEN,
           max_len=ATTR_KEY_MAX_LEN, extension=True, repeat=True,
           doc="an attribute, key then value: GETJOB ... WHERE and topic filters match on them"),
    # the jobs of one key in the queue delivered one at a time, in order (SQS FIFO's
    # message groups); STRICT: never on a side of a partition without a majority
    Option("ORDERKEY", "orderkey", BYTES, f"ORDERKEY must be 1 to {ORDERKEY_MAX_LEN} bytes",
           max_len=ORDERKEY_MAX_LEN, extension=True,
           doc="a key: the queue's jobs of one key are delivered one at a time, in the order they were added"),
    Option("STRICT", "strict", FLAG, extension=True,
           doc="with ORDERKEY: refused (-NOMAJORITY) on a side of a partition without a majority"),
), exclusive=("DELAY", "DELAY-MS", "AT"))

# JOBSET id [options] (a disq extension): change a job not acknowledged yet, wherever
# it is held. The same bounds and messages as ADDJOB's options.
JOBSET = CommandOptions("JOBSET", tuple(
    ADDJOB.by_field[name] for name in ("priority", "at", "delay_ms")
), exclusive=("DELAY-MS", "AT"))

# GETJOB's options come before FROM; every argument after FROM is a queue name.
GETJOB = CommandOptions("GETJOB", (
    Option("NOHANG", "nohang", FLAG,
           doc="answer at once, an empty reply if no job is queued"),
    Option("TIMEOUT", "timeout", MS,
           doc="milliseconds to wait for a job (0: for ever; default 0)"),
    Option("COUNT", "count", INT, "COUNT must be a number greater than zero", 1,
           doc="jobs to take at most (default 1)"),
    Option("WITHCOUNTERS", "with_counters", FLAG,
           doc="each job with its nacks and additional deliveries"),
))

# -- the SCAN commands: [cursor] [COUNT n] [BUSYLOOP] and each one's filters --------------
# Their numbers have no range (negative ones are taken): the one error is not a number.
NOT_INTEGER = "value is not an integer or out of range"
JOB_STATES = ("wait-repl", "active", "queued", "acked")  # JSCAN's STATE names


def _scan(name: str, *filters: Option) -> CommandOptions:
    return CommandOptions(name, (
        Option("COUNT", "count", INT, NOT_INTEGER, LL_MIN),  # < 1: one step
        Option("BUSYLOOP", "busyloop", FLAG),
        *filters,
    ), positional=Option("", "cursor", INT, "invalid cursor or option name"))


QSCAN = _scan(
    "QSCAN",
    Option("MINLEN", "minlen", INT, NOT_INTEGER, LL_MIN),  # < 0: no filter
    Option("MAXLEN", "maxlen", INT, NOT_INTEGER, LL_MIN),
    Option("IMPORTRATE", "importrate", INT, NOT_INTEGER, LL_MIN),
)

JSCAN = _scan(
    "JSCAN",
    Option("QUEUE", "queue", BYTES, min_len=0),
    Option("STATE", "states", CHOICE, "Invalid job state name", choices=JOB_STATES,
           repeat=True),  # any of them
    Option("REPLY", "reply", CHOICE, "Invalid REPLY type, try ID or ALL", choices=("all", "id")),
)

# PAUSE queue word [word ...], the words applied in order: in, out and all add to the
# state asked, none clears it, state asks no change, bcast sends the result to every node.
PAUSE = CommandOptions("PAUSE", tuple(
    Option(word, word, FLAG) for word in ("in", "out", "all", "none", "state", "bcast")))

# CRON ADD name queue spec body [options] (a disq extension): the options of the jobs
# each tick adds, as ADDJOB's, and the time zone the spec is read in.
CRON_NAME_MAX_LEN = 256
CRON_ADD = CommandOptions("CRON ADD", (
    Option("REPLICATE", "repl", INT, "REPLICATE must be between 1 and 65535", 1, 65535,
           doc="copies of each tick's job (as ADDJOB's)"),
    Option("RETRY", "retry", INT, "RETRY time must be a non negative number", 0,
           seconds=True, doc="each tick's job's RETRY, seconds"),
    Option("TTL", "ttl", INT, "TTL must be a number > 0", 1,
           seconds=True, doc="each tick's job's TTL, seconds"),
    Option("PRIORITY", "priority", INT, "PRIORITY must be between 0 and 255", 0, 255,
           extension=True,
           doc="each tick's job's PRIORITY"),
    Option("GROUP", "group", BYTES, "GROUP must be 1 to 256 bytes", max_len=256,
           extension=True,
           doc="each tick's job's GROUP"),
    Option("TZ", "tz", BYTES, "TZ must be a time zone name", max_len=64, extension=True,
           doc="the time zone the schedule is read in (an IANA name; default UTC)"),
))

# -- how jobs end ----------------------------------------------------------------------------
# ACKJOB id RESULT blob (a disq extension): one job acknowledged with its result, kept on
# its holders for its queue's RESULT-TTL. Plain ACKJOB id [id ...] takes no option.
ACKJOB = CommandOptions("ACKJOB", (
    Option("RESULT", "result", BYTES, min_len=0, extension=True,
           doc="the job's result, kept for its queue's RESULT-TTL (WAITJOB returns it)"),
))

# WAITJOB [TIMEOUT ms] [ANY] id [id ...] (a disq extension): until every job (ANY: one)
# ended, or the timeout (0 or none: no timeout).
MAX_WAITED = 10_000  # job IDs in one WAITJOB
WAITJOB = CommandOptions("WAITJOB", (
    Option("TIMEOUT", "timeout", MS, extension=True,
           doc="milliseconds to wait at most (0 or none: no limit)"),
    Option("ANY", "any", FLAG, extension=True,
           doc="answer once one of the jobs ended, not all"),
))

# BATCH NEW bid [ONDONE queue body] [ONSUCCESS queue body] [TTL s] (a disq extension): a
# batch of jobs (ADDJOB ... BATCH bid) whose callback job is added once every member ended.
MAX_BATCH_TTL = 90 * 24 * 3600
BATCH_NEW = CommandOptions("BATCH NEW", (
    Option("ONDONE", "ondone", QUEUE_BODY, "ONDONE needs a queue name and a job body",
           max_len=QUEUE_NAME_MAX_LEN, extension=True,
           doc="a queue and a body: the job added once every member ended"),
    Option("ONSUCCESS", "onsuccess", QUEUE_BODY, "ONSUCCESS needs a queue name and a job body",
           max_len=QUEUE_NAME_MAX_LEN, extension=True,
           doc="a queue and a body: the job added once every member ended, none dead"),
    Option("TTL", "ttl", INT, f"TTL must be between 1 and {MAX_BATCH_TTL} seconds", 1,
           MAX_BATCH_TTL, extension=True,
           seconds=True, doc="seconds the batch is kept (default a week)"),
))

# BATCH LIST [STATE open|closed|done] (a disq extension): the batches a node knows, the
# newest MAX_BATCHES_LISTED (by creation) of those in that state.
MAX_BATCHES_LISTED = 1000
BATCH_STATES = ("open", "closed", "done")
BATCH_LIST = CommandOptions("BATCH LIST", (
    Option("STATE", "state", CHOICE, "STATE must be open, closed or done",
           choices=BATCH_STATES, extension=True),
))

# TOPIC PUBLISH topic body [MSGID id] [ADDJOB's options but DEDUP, UNIQUE, ORDERKEY,
# STRICT] (a disq extension): one job in each queue subscribed to the topic; a retried
# publish with the same MSGID adds nothing twice to any queue.
MSGID_MAX_LEN = 256
TOPIC_PUBLISH = CommandOptions("TOPIC PUBLISH", (
    Option("MSGID", "msgid", BYTES, f"MSGID must be 1 to {MSGID_MAX_LEN} bytes",
           max_len=MSGID_MAX_LEN, extension=True,
           doc="a message ID: a publish retried with it adds nothing twice to any queue"),
    *(option for option in ADDJOB.options
      if option.field not in ("dedup", "unique", "orderkey", "strict")),
), exclusive=ADDJOB.exclusive)

# -- when jobs fail ------------------------------------------------------------------------
# NACK [DELAY-MS ms] [ERROR reason] id ...: the jobs are queued again after that delay; the
# reason is kept with each job, its last MAX_ERRORS (disq extensions).
MAX_ERROR_LEN = 1024  # bytes of one NACK ... ERROR reason
MAX_ERRORS = 5  # errors a job keeps
NACK = CommandOptions("NACK", (
    ADDJOB.by_field["delay_ms"],
    Option("ERROR", "error", BYTES, f"ERROR must be a reason of 1 to {MAX_ERROR_LEN} bytes",
           max_len=MAX_ERROR_LEN, extension=True,
           doc="why it failed: kept with the job (its last 5), shown by SHOW"),
))

# WORKING id [PROGRESS 0-100] [DATA blob] (disq extensions): the job's progress, kept with it
# on its holders until the next report (WAITJOB's answer for an active job: the DATA).
MAX_PROGRESS_DATA = 4096
WORKING = CommandOptions("WORKING", (
    Option("PROGRESS", "progress", INT, "PROGRESS must be between 0 and 100", 0, 100,
           extension=True,
           doc="how far the job is, 0 to 100 (shown by SHOW and WAITJOB)"),
    Option("DATA", "data", BYTES, f"DATA must be at most {MAX_PROGRESS_DATA} bytes",
           min_len=0, max_len=MAX_PROGRESS_DATA, extension=True,
           doc="progress data, as the worker wants it"),
))

# QPOLICY queue SET [options]: a queue's policy, every node's. The fields given replace
# those of the policy in force; the others stay.
MAX_BACKOFF_MS = 2**32 - 1  # ~50 days
MAX_RATE = 1_000_000_000
MAX_RESULT_TTL = 30 * 24 * 3600  # s: a month
MAX_CONCURRENCY = 1_000_000
MAX_DEFAULT_SECONDS = 1_000_000_000  # a queue's default RETRY or TTL: ~31 years
MAX_MAXLEN = 2**32 - 1
MAX_RETAIN = 10 * 365 * 24 * 3600  # s: ten years
MAX_RETAIN_BYTES = 2**62
QPOLICY_SET = CommandOptions("QPOLICY SET", (
    ADDJOB.by_field["max_deliveries"],
    Option("DEADLETTER", "deadletter", BYTES,
           f"DEADLETTER must be a queue name of 1 to {QUEUE_NAME_MAX_LEN} bytes",
           max_len=QUEUE_NAME_MAX_LEN, extension=True,
           doc="the dead-letter queue (default dead:<queue>)"),
    Option("BACKOFF", "backoff", INT_PAIR,
           f"BACKOFF needs base-ms and max-ms, 1 <= base-ms <= max-ms <= {MAX_BACKOFF_MS}",
           1, MAX_BACKOFF_MS, extension=True,
           doc="base and maximum milliseconds: a failed job waits min(max, base * 2^(n-1)) before it is queued again"),
    Option("RATE", "rate", NUMBER,
           f"RATE must be a number of jobs per second, > 0 and <= {MAX_RATE}", 0, MAX_RATE,
           extension=True,
           doc="jobs delivered per second at most, across the cluster"),
    # jobs delivered and not yet ended at a time, cluster-wide
    Option("CONCURRENCY", "concurrency", INT,
           f"CONCURRENCY must be between 1 and {MAX_CONCURRENCY}", 1, MAX_CONCURRENCY,
           extension=True,
           doc="jobs delivered and not ended at once at most, across the cluster"),
    # how long results are kept once a job ended (0: none)
    Option("RESULT-TTL", "result_ttl", INT,
           f"RESULT-TTL must be between 0 and {MAX_RESULT_TTL} seconds", 0, MAX_RESULT_TTL,
           extension=True,
           seconds=True, doc="seconds a job's result is kept"),
    # the defaults of an ADDJOB to the queue that does not give the option
    Option("RETRY", "retry", INT,
           f"RETRY must be between 0 and {MAX_DEFAULT_SECONDS} seconds", 0,
           MAX_DEFAULT_SECONDS, extension=True,
           seconds=True, doc="the RETRY, in seconds, of the queue's jobs added without one"),
    Option("TTL", "ttl", INT, f"TTL must be between 1 and {MAX_DEFAULT_SECONDS} seconds",
           1, MAX_DEFAULT_SECONDS, extension=True,
           seconds=True, doc="the TTL, in seconds, of the queue's jobs added without one"),
    Option("REPLICATE", "replicate", INT, "REPLICATE must be between 1 and 65535", 1, 65535,
           extension=True,
           doc="the REPLICATE of the queue's jobs added without one"),
    Option("MAXLEN", "maxlen", INT, f"MAXLEN must be between 1 and {MAX_MAXLEN}", 1,
           MAX_MAXLEN, extension=True,
           doc="the MAXLEN of ADDJOBs without one"),
    # CONCURRENCY and RATE for each GROUP of the queue
    Option("GROUP-CONCURRENCY", "group_concurrency", INT,
           f"GROUP-CONCURRENCY must be between 1 and {MAX_CONCURRENCY}", 1, MAX_CONCURRENCY,
           extension=True,
           doc="jobs of one GROUP delivered and not ended at once at most"),
    Option("GROUP-RATE", "group_rate", NUMBER,
           f"GROUP-RATE must be a number of jobs per second, > 0 and <= {MAX_RATE}", 0,
           MAX_RATE, extension=True,
           doc="jobs of one GROUP delivered per second at most"),
    # acked jobs kept on disk this long, for REPLAY (at most RETAIN-BYTES of them a node)
    Option("RETAIN", "retain", INT, f"RETAIN must be between 1 and {MAX_RETAIN} seconds",
           1, MAX_RETAIN, extension=True,
           seconds=True, doc="seconds the queue's acknowledged jobs are kept on disk, for REPLAY"),
    Option("RETAIN-BYTES", "retain_bytes", INT,
           f"RETAIN-BYTES must be between 1 and {MAX_RETAIN_BYTES}", 1, MAX_RETAIN_BYTES,
           extension=True, doc="bytes of retained jobs a node keeps at most (the oldest go)"),
))

# DEADLETTER REQUEUE dlq [COUNT n]: dead letters back to the queues they came from.
DEADLETTER_REQUEUE = CommandOptions("DEADLETTER REQUEUE", (
    Option("COUNT", "count", INT, "COUNT must be a number greater than zero", 1,
           doc="dead letters to requeue at most (default all)"),
))

# REPLAY queue FROM unix-ms [TO unix-ms] [INTO queue] [WHERE key op value ...]: the
# retained jobs of a window added again (QPOLICY ... RETAIN keeps them).
MAX_UNIX_MS = 2**47 - 1
_WINDOW = (
    Option("FROM", "start", INT, f"FROM must be a Unix time in ms, 0 to {MAX_UNIX_MS}", 0,
           MAX_UNIX_MS, extension=True),
    Option("TO", "end", INT, f"TO must be a Unix time in ms, 0 to {MAX_UNIX_MS}", 0,
           MAX_UNIX_MS, extension=True),
)
REPLAY = CommandOptions("REPLAY", (
    *_WINDOW,
    Option("INTO", "into", BYTES, f"INTO must be a queue name of 1 to {QUEUE_NAME_MAX_LEN} bytes",
           max_len=QUEUE_NAME_MAX_LEN, extension=True),
))
# RETAINED queue FROM unix-ms [TO unix-ms] [AFTER cursor] [COUNT n] [SHARD i/n]
# [WHERE ...]: one node's retained jobs of a window, a page at a time.
MAX_RETAINED_COUNT = 100_000
RETAINED = CommandOptions("RETAINED", (
    *_WINDOW,
    Option("AFTER", "after", BYTES, "AFTER must be a cursor a RETAINED reply gave",
           max_len=128, extension=True),
    Option("COUNT", "count", INT, f"COUNT must be between 1 and {MAX_RETAINED_COUNT}", 1,
           MAX_RETAINED_COUNT, extension=True),
    Option("SHARD", "shard", BYTES, "SHARD must be i/n, 0 <= i < n <= 65536", max_len=16,
           extension=True),
))


def wire_seconds(ms: int) -> int:
    """A duration in milliseconds as an option in seconds takes it (`Option.seconds`):
    rounded up, so that a job is never retried, expired or forgotten early."""
    return -(-ms // 1000)
