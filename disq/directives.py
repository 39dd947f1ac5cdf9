"""Every configuration directive: its default, how its value parses and shows, and
its one-line doc: the table that `Config` (config.py), `disq-server --help` and the
sample disq.conf are built from.

Directive names and value syntax follow Disque (itself Redis 3): `port 7711`,
`maxmemory 1gb`, `appendonly yes`. disq's own extensions (metrics-port, request
limits) use the same syntax and are listed after Disque's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .job import MAX_BODY

VERSION = "1.0-rc1"  # the Disque version disq is compatible with
DISQ_VERSION = "0.1.0"


class ConfigError(Exception):
    """A bad directive or value; the message is shown to the user as is."""


class ConfigApplyError(ConfigError):
    """A valid value the server could not put into effect (CONFIG SET appendonly yes
    when the AOF cannot be opened): CONFIG SET answers with this message as is."""


_MEMORY_UNITS = {
    "": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3,
}


def parse_memory(text: str) -> int:
    """Parse Redis memory notation: `100`, `1k`, `1kb`, `2mb`, `1gb` (case-insensitive)."""
    s = text.strip().lower()
    i = len(s)
    while i > 0 and s[i - 1].isalpha():
        i -= 1
    number, unit = s[:i], s[i:]
    if unit not in _MEMORY_UNITS or not number or not number.lstrip("-").isdigit():
        raise ConfigError(f"argument must be a memory value: '{text}'")
    value = int(number) * _MEMORY_UNITS[unit]
    if value < 0:
        raise ConfigError(f"argument must be a memory value: '{text}'")
    return value


def parse_int(text: str, low: int | None = None, high: int | None = None) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ConfigError(f"argument must be an integer: '{text}'") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(f"argument out of range: '{text}'")
    return value


def parse_bool(text: str) -> bool:
    s = text.lower()
    if s == "yes":
        return True
    if s == "no":
        return False
    raise ConfigError("argument must be 'yes' or 'no'")


@dataclass(frozen=True)
class Directive:
    name: str
    default: Any
    parse: Callable[[list[str]], Any]
    show: Callable[[Any], str]
    settable: bool = False  # CONFIG SET allowed at run time
    nargs: int = 1  # -1 = one or more
    doc: str = ""  # one line for `disq-server --help` and the sample disq.conf


def _one(parser: Callable[[str], Any]) -> Callable[[list[str]], Any]:
    return lambda args: parser(args[0])


def _int(low: int | None = None, high: int | None = None) -> Callable[[list[str]], int]:
    return lambda args: parse_int(args[0], low, high)


def _enum(*choices: str) -> Callable[[list[str]], str]:
    def parse(args: list[str]) -> str:
        value = args[0].lower()
        if value not in choices:
            raise ConfigError(f"argument must be one of: {', '.join(choices)}")
        return value

    return parse


def _show_bool(v: bool) -> str:
    return "yes" if v else "no"


def _show_list(v: list[str]) -> str:
    return " ".join(v)


_CLIENT_CLASSES = ("normal", "slave", "pubsub")


def _parse_output_limits(args: list[str]) -> dict[str, tuple[int, int, int]]:
    if len(args) % 4 != 0:
        raise ConfigError("Wrong number of arguments in buffer limit configuration.")
    limits = dict(_DEFAULT_OUTPUT_LIMITS)
    for i in range(0, len(args), 4):
        cls = args[i].lower()
        if cls not in _CLIENT_CLASSES:
            raise ConfigError("Invalid client class specified in buffer limit configuration.")
        hard, soft = parse_memory(args[i + 1]), parse_memory(args[i + 2])
        secs = parse_int(args[i + 3], 0)
        limits[cls] = (hard, soft, secs)
    return limits


def _show_output_limits(v: dict[str, tuple[int, int, int]]) -> str:
    return " ".join(f"{c} {h} {s} {t}" for c, (h, s, t) in v.items())


_DEFAULT_OUTPUT_LIMITS = {
    "normal": (0, 0, 0),
    "slave": (256 * 1024**2, 64 * 1024**2, 60),
    "pubsub": (32 * 1024**2, 8 * 1024**2, 60),
}

def _tls_protocols(text: str) -> str:
    if any(word.lower() not in ("tlsv1.2", "tlsv1.3") for word in text.split()):
        raise ConfigError("argument must be a list of: TLSv1.2, TLSv1.3")
    return text


SYSLOG_FACILITIES = ("user",) + tuple(f"local{n}" for n in range(8))


def _syslog_facility(args: list[str]) -> str:
    value = args[0].lower()
    if value not in SYSLOG_FACILITIES:
        raise ConfigError("Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7")
    return value


def _databases(args: list[str]) -> int:
    """Disque has no databases (no SELECT): it only reports the number, 16 by default.
    Another number would promise databases that do not exist."""
    value = parse_int(args[0], 1)
    if value != 16:
        raise ConfigError("disq, like Disque, has no databases (there is no SELECT): "
                          "only the default 'databases 16' is accepted")
    return value


_str = _one(str)
_mem = _one(parse_memory)


def _mem_range(low: int, high: int) -> Callable[[list[str]], int]:
    def parse(args: list[str]) -> int:
        value = parse_memory(args[0])
        if not low <= value <= high:
            raise ConfigError(f"argument out of range: '{args[0]}' (from {low} to {high} "
                              "bytes)")
        return value
    return parse
_bool = _one(parse_bool)


def _directives() -> list[Directive]:
    d = Directive
    return [
        # -- network
        d("port", 7711, _int(0, 65535 - 10000), str,
          doc="TCP port for clients (0: none); the cluster bus listens on port + 10000"),
        d("bind", ["127.0.0.1", "::1"], list, _show_list, nargs=-1,
          doc="addresses to listen on (one or more)"),
        d("tcp-backlog", 511, _int(0), str,
          doc="backlog of the listening sockets"),
        d("tcp-keepalive", 0, _int(0), str, settable=True,
          doc="non-zero: TCP keepalive on client connections"),
        d("timeout", 0, _int(0), str, settable=True,
          doc="close a client idle for this many seconds (0: never)"),
        d("unixsocket", "", _str, str,
          doc="also listen on this unix socket"),
        d("unixsocketperm", 0, _one(lambda s: int(s, 8)), lambda v: f"{v:o}",
          doc="permissions of the unix socket, in octal (e.g. 700)"),
        d("maxclients", 10000, _int(1), str, settable=True,
          doc="most clients at once; more are refused with an error"),
        d("requirepass", "", _str, str, settable=True,
          doc="clients must AUTH with this password (\"\": none)"),
        # users and permissions (disq/acl.py)
        d("aclfile", "", _str, str,
          doc="users (Redis's aclfile format: user name on >pw ~queue* +@all), read at "
              "start; ACL SAVE / ACL LOAD"),
        # -- process
        d("dir", ".", _str, str, settable=True,
          doc="working directory (it must exist): nodes.conf, the AOF, a relative logfile"),
        d("daemonize", False, _bool, _show_bool,
          doc="yes: detach and run in the background (logfile \"\": logs go nowhere)"),
        d("pidfile", "", _str, str,
          doc="write the process ID to this file"),
        d("loglevel", "notice", _enum("debug", "verbose", "notice", "warning"), str, settable=True,
          doc="debug, verbose, notice or warning"),
        d("logfile", "", _str, str,
          doc="log to this file (\"\": standard output)"),
        d("syslog-enabled", False, _bool, _show_bool,
          doc="also log to the local syslog (/dev/log; the start fails if it is missing)"),
        d("syslog-ident", "disque", _str, str,
          doc="program name of the syslog messages"),
        d("syslog-facility", "local0", _syslog_facility, str,
          doc="syslog facility: user or local0 to local7"),
        d("databases", 16, _databases, str,
          doc="only 16 (Disque's default): like Disque, disq has no databases (no SELECT)"),
        d("hz", 10, _int(1, 500), str, settable=True,
          doc="background tasks per second (idle clients, queue collection, AOF fsync)"),
        d("activerehashing", True, _bool, _show_bool, settable=True,
          doc="yes or no: both hold, as tables grow in one step and never wait to rehash"),
        d("watchdog-period", 0, _int(0), str, settable=True,
          doc="log a stack trace when the event loop is stuck this many ms (0: off)"),
        # -- memory
        d("maxmemory", 1024**3, _mem, str, settable=True,
          doc="data memory limit (INFO used_memory): above 95% ADDJOB evicts, then answers -OOM"),
        d("maxmemory-policy", "acks", _enum("acks", "noeviction"), str, settable=True,
          doc="acks (evict acknowledged jobs when full) or noeviction"),
        d("maxmemory-samples", 5, _int(1), str, settable=True,
          doc="jobs looked at per eviction round (more: better picks, slower rounds)"),
        d("client-output-buffer-limit", dict(_DEFAULT_OUTPUT_LIMITS), _parse_output_limits,
          _show_output_limits, settable=True, nargs=-1,
          doc="class hard soft seconds: drop a normal client with that much output unread"),
        # -- append only file
        d("appendonly", False, _bool, _show_bool, settable=True,
          doc="log jobs to the append-only file and reload it at start"),
        d("appendfilename", "disque.aof", _str, str,
          doc="name of the append-only file, in dir"),
        d("appendfsync", "everysec", _enum("always", "everysec", "no"), str, settable=True,
          doc="always, everysec or no: when the AOF is fsynced"),
        d("no-appendfsync-on-rewrite", False, _bool, _show_bool,  # not settable in Disque
          doc="no fsync of the AOF while it is being rewritten"),
        d("auto-aof-rewrite-percentage", 100, _int(0), str, settable=True,
          doc="rewrite the AOF once it grew by this % since the last rewrite (0: never)"),
        d("auto-aof-rewrite-min-size", 64 * 1024**2, _mem, str, settable=True,
          doc="no automatic rewrite of an AOF smaller than this"),
        d("aof-rewrite-incremental-fsync", True, _bool, _show_bool, settable=True,
          doc="fsync a rewritten AOF every 32 MB while writing it"),
        d("aof-load-truncated", True, _bool, _show_bool, settable=True,
          doc="load an AOF cut off in its last record (no: refuse to start)"),
        d("aof-enqueue-jobs-once", False, _bool, _show_bool, settable=True,
          doc="queue the jobs of the AOF at the next start (then turns itself off)"),
        # checksums and encryption at rest (disq/aof/frames.py): disq extensions
        d("aof-checksum", True, _bool, _show_bool,
          doc="frame the AOF's records with CRC32C checksums (no: Disque's plain file)"),
        d("aof-load-corrupt", "refuse", _enum("refuse", "truncate"), str, settable=True,
          doc="a damaged record at load: refuse to start, or truncate the file there"),
        d("aof-encryption-key-file", "", _str, str,
          doc="encrypt the AOF (AES-256-GCM) with the key in this file (64 hex digits)"),
        # -- cluster
        d("cluster-config-file", "nodes.conf", _str, str,
          doc="the node's ID and its peers, kept by the node (in dir)"),
        d("cluster-node-timeout", 15000, _int(1), str, settable=True,
          doc="milliseconds without an answer before a peer is flagged fail?"),
        # -- diagnostics
        d("slowlog-log-slower-than", 10000, _int(), str, settable=True,
          doc="SLOWLOG keeps commands slower than this many microseconds (<0: none)"),
        d("slowlog-max-len", 128, _int(0), str, settable=True,
          doc="most entries SLOWLOG keeps"),
        d("latency-monitor-threshold", 0, _int(0), str, settable=True,
          doc="LATENCY records commands and job timer runs of this many ms or more (0: off)"),
        # -- disq extensions
        d("metrics-port", 0, _int(0, 65535), str,
          doc="serve Prometheus metrics on http://metrics-bind:port/metrics (0: off)"),
        d("metrics-bind", "127.0.0.1", _str, str,
          doc="address of the metrics endpoint"),
        d("client-query-buffer-limit", 1024**3, _mem, str, settable=True,
          doc="disconnect a client whose pending request grows past this"),
        d("proto-max-bulk-len", 512 * 1024**2, _mem, str, settable=True,
          doc="largest single argument of a request"),
        d("proto-max-multibulk-len", 1024 * 1024, _int(1), str, settable=True,
          doc="most arguments in one request"),
        # A bus frame carries one copy of a body this long at most (job.MAX_BODY).
        d("job-max-body", MAX_BODY, _mem_range(1, MAX_BODY), str, settable=True,
          doc="largest job body (ADDJOB, ADDJOBS, HTTP, CRON); at most 100mb, what the "
              "cluster bus carries"),
        # Bus links authenticate with it (both ends prove they know it); "" = closed bus.
        d("cluster-secret", "", _str, str,
          doc="bus links must prove they know this secret, both ways "
              "(\"\": none, the bus stays on loopback)"),
        # Without a secret (or tls-cluster) the bus is closed: loopback only (exposure.py).
        d("cluster-open-bus", False, _bool, _show_bool,
          doc="yes: without cluster-secret, the bus still listens on bind (Disque's open bus)"),
        d("clock-skew-warn-ms", 100, _int(0), str, settable=True,
          doc="log a warning when a peer's clock is this many ms off this node's (0: never)"),
        d("maxclients-per-ip", 0, _int(0), str, settable=True,
          doc="connections per client IP (0: any); the commands of later ones get -BUSY"),
        d("client-rate-limit", 0, _int(0), str, settable=True,
          doc="commands a second per connection, as a burst too (0: off); more get -BUSY"),
        # -- the HTTP API and dashboard (disq/server/http/)
        d("http-port", 0, _int(0, 65535), str,
          doc="serve the HTTP API, its docs (/docs) and the dashboard (/) on this port (0: off)"),
        d("http-bind", "", _str, str,
          doc="addresses of the HTTP port, space separated (\"\": the node's bind)"),
        d("http-max-body", 16 * 1024**2, _mem, str, settable=True,
          doc="largest HTTP request body (a batch of jobs included); larger ones get 413"),
        # Against strangers and web pages (http/connections.py, http/crosssite.py; the
        # metrics port too: http/metricsport.py).
        d("http-read-timeout", 10, _int(1), str,
          doc="seconds an HTTP or metrics client has for a request's headers (from "
              "connecting or its last answer), as many for its body"),
        d("http-allowed-hosts", "", _str, str, settable=True,
          doc="Host names the HTTP and metrics ports answer besides the node's own, space "
              "separated (\"*\": any)"),
        d("http-allowed-origins", "", _str, str, settable=True,
          doc="web origins (https://host:port) whose pages may call the HTTP API and "
              "/metrics, space separated"),
        # -- TLS (Redis 6's directives; see disq/tls.py)
        d("tls-port", 0, _int(0, 65535 - 10000), str,
          doc="also serve clients over TLS on this port (0: off)"),
        d("tls-cert-file", "", _str, str,
          doc="the node's certificate (PEM), for the TLS port and the bus"),
        d("tls-key-file", "", _str, str,
          doc="the key of tls-cert-file (PEM)"),
        d("tls-ca-cert-file", "", _str, str,
          doc="CA certificates that client and peer certificates must chain to"),
        d("tls-ca-cert-dir", "", _str, str,
          doc="a directory of such CA certificates"),
        d("tls-auth-clients", "yes", _enum("yes", "no", "optional"), str,
          doc="yes, optional or no: TLS clients must present a certificate"),
        d("tls-cluster", False, _bool, _show_bool,
          doc="the bus speaks TLS only, mutually authenticated"),
        d("tls-protocols", "", _one(_tls_protocols), str,
          doc="TLS versions allowed, e.g. \"TLSv1.2 TLSv1.3\" (\"\": TLSv1.2 and up)"),
    ]


DIRECTIVES: dict[str, Directive] = {d.name: d for d in _directives()}
# Accepted on the command line / config file only, with special handling.
# (usage, one line) of those, for `disq-server --help` and the sample disq.conf
SPECIAL_DOCS = (
    ("include /path/to/other.conf", "read another config file at this point"),
    ("rename-command NAME NEW-NAME",
     "the command answers only as NEW-NAME (\"\": it no longer exists)"),
)


def _memory_text(value: int) -> str:
    """1073741824 -> "1gb": how a person writes a size in a config file."""
    for unit, size in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def default_lines(name: str) -> list[str]:
    """The config file lines that give directive `name` its default value (sizes as
    `1gb`): what `disq-server --help` and the sample disq.conf show."""
    directive = DIRECTIVES[name]
    if directive.parse is _mem:
        return [f"{name} {_memory_text(directive.default)}"]
    if name == "client-output-buffer-limit":
        return [f"{name} {cls} {_memory_text(hard)} {_memory_text(soft)} {seconds}"
                for cls, (hard, soft, seconds) in directive.default.items()]
    return config_lines(name, directive.default)


def config_lines(name: str, value: Any) -> list[str]:
    """The config file lines that set directive `name` to `value`."""
    directive = DIRECTIVES[name]
    shown = directive.show(value)
    if name == "client-output-buffer-limit":
        parts = shown.split()
        return [f"{name} {' '.join(parts[i:i + 4])}" for i in range(0, len(parts), 4)]
    if directive.nargs == 1 and (shown == "" or " " in shown):
        return [f'{name} "{shown}"']
    return [f"{name} {shown}"]
