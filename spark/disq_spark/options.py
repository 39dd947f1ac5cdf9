"""The data source's options: Spark passes them as strings (`.option("replicate", 2)`
arrives as "2"); they become the typed `WriteOptions` and `ReadOptions` here, on the
driver, where a wrong option fails the query before any task runs. Every option is
listed once in OPTIONS, with its kind and what it does (README.md shows the table).
Every duration is an option named `*_ms`, whole milliseconds; the options that took
seconds are gone, and giving one is an error that names the new one (RENAMED)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .reader import ACK_COMMANDS, ReadOptions
from .writer import WriteOptions

# Options Spark itself adds or that other sinks take, which mean nothing here.
SPARK_OPTIONS = frozenset({"path", "paths", "checkpointlocation"})

BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}

# Options that took seconds, and the option in milliseconds that replaced each: a job
# retried or a socket timed out 1000 times too soon is worse than an error.
RENAMED = {"retry": "retry_ms", "ttl": "ttl_ms", "delay": "delay_ms",
           "socket_timeout_s": "socket_timeout_ms"}


@dataclass(frozen=True)
class Opt:
    name: str  # as given to .option(), any case
    kind: str  # str, int, ms (a duration: whole milliseconds >= 0), bool, column, choice
    side: str  # "both", "write" or "read"
    doc: str
    field: str = ""  # the WriteOptions / ReadOptions field (default: the name)
    choices: tuple[str, ...] = ()

    @property
    def attr(self) -> str:
        return self.field or self.name


OPTIONS = (
    Opt("nodes", "str", "both", "host:port of the disq nodes, comma-separated; list them "
        "all (required)"),
    Opt("queue", "str", "both", "the queue written or read (required)"),
    Opt("password", "str", "both", "for nodes with requirepass (AUTH on every connection)"),
    Opt("ssl", "bool", "both", "connect over TLS (the nodes' tls-port)"),
    Opt("ssl_ca_certs", "str", "both", "the CA file that signed the nodes' certificates"),
    Opt("ssl_certfile", "str", "both", "a client certificate (tls-auth-clients yes)"),
    Opt("ssl_keyfile", "str", "both", "its key"),
    Opt("ssl_check_hostname", "bool", "both", "check the certificate names the host "
        "(default true)"),
    Opt("socket_timeout_ms", "ms", "both", "bound on every wait for a reply, ms (30000; "
        "0: none)"),
    Opt("connect_timeout_ms", "ms", "both", "bound on connecting to a node, ms (5000; "
        "0: none)"),
    # -- writes ----------------------------------------------------------------------------
    Opt("body", "column", "write", "the column of the job bodies (default body): binary as "
        "it is, string as UTF-8, anything else as JSON"),
    Opt("key", "column", "write", "a column giving each row's identity: one job per key "
        "value, across retries and re-runs (DEDUP)"),
    Opt("job_name", "str", "write", "names the write in its DEDUP keys (default: the queue "
        "with `key`; else a new name per batch write, the query ID when streaming)"),
    Opt("dedup", "bool", "write", "send DEDUP keys (default true); false: plain ADDJOBs, "
        "at least once"),
    Opt("replicate", "int", "write", "ADDJOB REPLICATE: copies of each job"),
    Opt("retry_ms", "ms", "write", "ADDJOB RETRY, ms: sent in whole seconds, rounded up "
        "(1500: RETRY 2)"),
    Opt("ttl_ms", "ms", "write", "ADDJOB TTL, ms: sent in whole seconds, rounded up"),
    Opt("delay_ms", "ms", "write", "ADDJOB DELAY, ms: sent as DELAY when whole seconds, "
        "else as DELAY-MS"),
    Opt("at", "column", "write", "a column of timestamps or Unix ms: each job's ADDJOB AT"),
    Opt("priority", "int", "write", "ADDJOB PRIORITY, 0 (most urgent) .. 255"),
    Opt("priority_column", "column", "write", "each row's PRIORITY (a null: `priority`)",
        field="priority_field"),
    Opt("group", "str", "write", "ADDJOB GROUP, a fairness group"),
    Opt("group_column", "column", "write", "each row's GROUP (a null: `group`)",
        field="group_field"),
    Opt("max_deliveries", "int", "write", "ADDJOB MAXDELIVERIES"),
    Opt("maxlen", "int", "write", "ADDJOB MAXLEN: refused (and retried) while the queue "
        "is that long"),
    Opt("async", "bool", "write", "ADDJOB ASYNC: answered before the copies are made",
        field="async_"),
    Opt("timeout_ms", "ms", "write", "ADDJOB's timeout: how long the copies may take, "
        "ms (10000)"),
    Opt("batch_size", "int", "write", "jobs per pipelined write (1000, at most 10000)"),
    Opt("bulk", "bool", "write", "true (default): a write is one ADDJOBS (disq's batch "
        "of ADDJOBs); false: one ADDJOB a row (always so with per-row AT, PRIORITY or "
        "GROUP)"),
    Opt("pipeline", "int", "write", "such writes in flight per task (2)"),
    Opt("max_body_bytes", "int", "write", "larger bodies are bad rows (1 MiB)"),
    Opt("max_attempts", "int", "write", "sends of a batch before the task fails (10)"),
    Opt("backoff_ms", "ms", "write", "the wait before a batch is sent again, ms (50), "
        "doubled each time (with jitter) up to backoff_max_ms (2000)"),
    Opt("backoff_max_ms", "ms", "write", "the longest such wait, ms (2000)"),
    Opt("bad_rows", "choice", "write", "fail (default): the write fails after the other "
        "rows were added, naming the bad ones; log: a warning, and the count in stats_file",
        choices=("fail", "log")),
    Opt("stats_file", "str", "write", "a file on the driver where each committed write "
        "appends its counts as a JSON line"),
    # -- streaming reads -------------------------------------------------------------------
    Opt("max_jobs_per_batch", "int", "read", "jobs one micro-batch takes at most "
        "(100000)"),
    Opt("fetch_count", "int", "read", "jobs per GETJOB (1000)"),
    Opt("num_partitions", "int", "read", "partitions of a micro-batch (default: one per "
        "node)"),
    Opt("poll_ms", "ms", "read", "with nothing queued, how long one GETJOB waits for "
        "jobs, ms (500)"),
    Opt("ack", "choice", "read", "ackjob (default) or fastack, at commit",
        choices=tuple(ACK_COMMANDS)),
    Opt("keepalive_ms", "ms", "read", "> 0: WORKING for the jobs held every keepalive_ms "
        "(set it below the jobs' RETRY if a batch may take longer)"),
    Opt("topic", "str", "read", "subscribe `queue` to this topic first (TOPIC SUBSCRIBE): "
        "the query reads every message published to it from then on"),
    # -- batch reads of retained jobs (QPOLICY ... RETAIN) -----------------------------------
    Opt("from", "int", "read", "a batch read (spark.read): the queue's retained jobs created "
        "from this Unix ms on (RETAINED)", field="start"),
    Opt("to", "int", "read", "... up to this Unix ms (default: now)", field="end"),
)
BY_NAME = {o.name: o for o in OPTIONS}


@dataclass
class WriteSettings:
    """What the data source's writers need beyond the per-partition `WriteOptions`."""

    options: WriteOptions
    bad_rows: str = "fail"
    stats_file: str | None = None
    job_name_given: bool = False


def _value(opt: Opt, raw: str) -> Any:
    text = str(raw).strip()
    if opt.kind == "ms":
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f"disq: option {opt.name} takes whole milliseconds (an "
                             f"integer >= 0), not {raw!r}")
        return int(text)
    try:
        if opt.kind == "int":
            return int(text)
        if opt.kind == "float":
            return float(text)
    except ValueError:
        raise ValueError(f"disq: option {opt.name} must be a number, not {raw!r}") from None
    if opt.kind == "bool":
        value = BOOL_WORDS.get(text.lower())
        if value is None:
            raise ValueError(f"disq: option {opt.name} must be true or false, not {raw!r}")
        return value
    if opt.kind == "choice":
        if text.lower() not in opt.choices:
            raise ValueError(f"disq: option {opt.name} must be one of "
                             f"{', '.join(opt.choices)}, not {raw!r}")
        return text.lower()
    return text


def parse(options: Mapping[str, str], side: str) -> dict[str, Any]:
    """The options given, typed, by name; ValueError for an unknown one (a typo would
    otherwise be ignored) or one of the other side (a read option on a write)."""
    values: dict[str, Any] = {}
    for raw_name, raw in options.items():
        name = raw_name.lower()
        if name in SPARK_OPTIONS:
            continue
        opt = BY_NAME.get(name)
        if opt is None and name in RENAMED:
            raise ValueError(renamed(name, raw))
        if opt is None:
            raise ValueError(f"disq: unknown option {raw_name!r} (options: "
                             f"{', '.join(o.name for o in OPTIONS)})")
        if opt.side not in ("both", side):
            raise ValueError(f"disq: option {opt.name} is for {opt.side}s")
        values[opt.name] = _value(opt, raw)
    for required in ("nodes", "queue"):
        if not values.get(required):
            raise ValueError(f"disq: option {required} is required")
    values["nodes"] = [n.strip() for n in values["nodes"].split(",") if n.strip()]
    return values


def renamed(name: str, raw: str) -> str:
    """The error for an option that took seconds (RENAMED), with the value it means in
    milliseconds when it is a number."""
    new = RENAMED[name]
    try:
        hint = f": {raw} s is {new}={round(float(str(raw)) * 1000)}"
    except (ValueError, OverflowError):
        hint = ""
    return f"disq: option {name!r} is gone: give {new} (milliseconds){hint}"


def write_settings(options: Mapping[str, str], columns: list[str] | None = None
                   ) -> WriteSettings:
    """The options of a write; `columns`: the DataFrame's, to check the column options
    name some (case-insensitively, as Spark; the columns are then taken by position)."""
    values = parse(options, "write")
    settings = WriteSettings(WriteOptions(nodes=values["nodes"], queue=values["queue"]))
    settings.bad_rows = values.pop("bad_rows", "fail")
    settings.stats_file = values.pop("stats_file", None)
    settings.job_name_given = "job_name" in values
    for name, value in values.items():
        if name in ("nodes", "queue"):
            continue
        opt = BY_NAME[name]
        if opt.kind == "column" and columns is not None:
            value = column_index(columns, value, name)
        setattr(settings.options, opt.attr, value)
    if columns is not None and "body" not in values:
        settings.options.body = column_index(columns, "body", "body")
    settings.options.check()
    return settings


def column_index(columns: list[str], name: str, option: str) -> int:
    lower = [c.lower() for c in columns]
    try:
        return lower.index(name.lower())
    except ValueError:
        raise ValueError(f"disq: option {option} names column {name!r}, which the "
                         f"DataFrame does not have (columns: {', '.join(columns)})") from None


def read_options(options: Mapping[str, str]) -> ReadOptions:
    values = parse(options, "read")
    read = ReadOptions(nodes=values.pop("nodes"), queue=values.pop("queue"))
    for name, value in values.items():
        setattr(read, BY_NAME[name].attr, value)
    read.check()
    return read


def options_table(side: str) -> str:
    """The options of `side` ("both", "write" or "read") as a Markdown table (README.md
    shows the three)."""
    rows = [f"| `{o.name}` | {o.doc} |" for o in OPTIONS if o.side == side]
    return "\n".join(["| option | |", "|---|---|", *rows])
