"""The process around a node: its log (file, standard output, syslog), daemonize,
the open files limit, and the start-up warning about an exposed port."""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
import sys
import time
from typing import Any

from ..config import Config
from ..exposure import is_loopback

log = logging.getLogger("disq")

LEVELS = {"debug": logging.DEBUG, "verbose": 15, "notice": logging.INFO,
           "warning": logging.WARNING}
_SYMBOLS = {logging.DEBUG: ".", 15: "-", logging.INFO: "*", logging.WARNING: "#",
            logging.ERROR: "#", logging.CRITICAL: "#"}


class _RedisFormatter(logging.Formatter):
    """`pid:M 21 Nov 09:15:28.123 * message`, as Redis and Disque log."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        stamp = time.strftime("%d %b %H:%M:%S", t) + f".{int(record.msecs):03d}"
        text = f"{os.getpid()}:M {stamp} {_SYMBOLS.get(record.levelno, '*')} " \
               f"{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


SYSLOG_ADDRESS = "/dev/log"
# Redis's syslog priorities: verbose is info, notice is notice.
_SYSLOG_PRIORITIES = {logging.DEBUG: "debug", 15: "info", logging.INFO: "notice",
                      logging.WARNING: "warning", logging.ERROR: "err",
                      logging.CRITICAL: "crit"}


def _syslog_handler(address: str, facility: int) -> logging.Handler:
    """syslog-enabled: `<ident>[<pid>]: message`, at Redis's priorities
    (logging.handlers is imported only for a node that logs there)."""
    from logging import handlers

    class SysLogHandler(handlers.SysLogHandler):
        _level = logging.WARNING  # of the record being sent (mapPriority gets its name)

        def emit(self, record: logging.LogRecord) -> None:
            self._level = record.levelno
            super().emit(record)

        def mapPriority(self, levelName: str) -> str:  # noqa: N802 (the stdlib's name)
            return _SYSLOG_PRIORITIES.get(self._level, "warning")

    return SysLogHandler(address, facility)


def _probe_syslog(address: str) -> None:
    """Connect to the syslog socket (datagram, else stream, as SysLogHandler tries)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
    except OSError as exc:
        if exc.errno != errno.EPROTOTYPE:
            raise
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(address)


def setup_logging(config: Config, syslog_address: str = SYSLOG_ADDRESS) -> None:
    """The log: logfile (or standard output), and the syslog with syslog-enabled. A
    syslog that cannot be reached stops the start (SystemExit): a node that was told
    to log there must not run unheard."""
    handler: logging.Handler
    if config.logfile:
        handler = logging.FileHandler(config.logfile)
    else:
        handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_RedisFormatter())
    handlers: list[logging.Handler] = [handler]
    if config.syslog_enabled:
        from logging.handlers import SysLogHandler

        facility = SysLogHandler.facility_names[config.syslog_facility]
        try:
            _probe_syslog(syslog_address)  # the handler itself would fail silently
            syslog = _syslog_handler(syslog_address, facility)
        except OSError as exc:
            raise SystemExit(
                f"syslog-enabled yes: can't reach the syslog at {syslog_address} "
                f"({exc.strerror or exc}); set syslog-enabled no or start a syslog "
                "daemon") from None
        syslog.setFormatter(logging.Formatter(f"{config.syslog_ident}[%(process)d]: "
                                              "%(message)s"))
        handlers.append(syslog)
    for old in log.handlers:
        old.close()
    log.handlers[:] = handlers
    log.setLevel(LEVELS[config.loglevel])
    log.propagate = False


def log_stream() -> Any:
    """The file the log is written to (the software watchdog writes there too)."""
    for handler in log.handlers:
        if isinstance(handler, logging.StreamHandler) and hasattr(handler.stream, "fileno"):
            return handler.stream
    return sys.stderr


def daemonize() -> None:
    """daemonize yes, as Redis does: fork, the parent exits, the child leaves the
    terminal's session and its standard streams point to /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


RESERVED_FDS = 32  # listeners, logs, cluster links... (Redis keeps 32 as well)


def adjust_open_files_limit(config: Config) -> None:
    """As Redis does at start-up: raise the soft RLIMIT_NOFILE to maxclients + 32, and
    if the system does not allow it, lower maxclients to fit (clients beyond the fd
    limit would otherwise be reset instead of told `max number of clients reached`)."""
    wanted = config.maxclients + RESERVED_FDS
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    except (OSError, ValueError) as exc:
        log.warning("Can't raise the open files limit to %d: %s", target, exc)
    if soft < wanted:
        reduced = max(soft - RESERVED_FDS, 1)
        log.warning("You requested maxclients of %d requiring at least %d max file "
                    "descriptors. Current maximum open files is %d. maxclients has been "
                    "reduced to %d to compensate for low ulimit.",
                    config.maxclients, wanted, soft, reduced)
        config.apply("maxclients", [str(reduced)])
    else:
        log.info("Increased maximum number of open files to %d (it was originally set "
                 "to a lower value).", soft)


def exposure_warning(bind: list[str], auth_required: bool) -> str | None:
    """Redis's protected-mode advice, as a start-up warning (disq refuses no client):
    listening beyond loopback while a new connection needs no password (the default
    user on and nopass: no requirepass, and no aclfile that changes it)."""
    exposed = [host for host in bind if not is_loopback(host)]
    if not exposed or auth_required:
        return None
    return (f"WARNING: listening on {', '.join(exposed)} without a password: anyone who "
            "can reach this port can add, read and delete jobs. Set requirepass (or give "
            "the default user a password, or turn it off, in the aclfile), or bind to "
            "127.0.0.1 only.")
