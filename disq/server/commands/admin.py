"""Server commands: PING INFO CONFIG DEBUG TIME COMMAND CLIENT SHUTDOWN SLOWLOG
LATENCY BGREWRITEAOF. (QUIT is answered by the connection itself.)"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ... import errors
from ...config import ConfigError
from ...errors import err
from ...options import parse_int, timeout_ms
from .. import reply
from ..table import ADMIN, COMMANDS, CommandSpec, command

if TYPE_CHECKING:
    from ..connection import Client


@command("ping", -1, "rFl", shown=(-1, "rF"),
         acl=("connection",),
         syntax='PING [message]',
         summary='Check the connection.',
         reply='status PONG, or the message as a bulk string')
def ping(client: Client, args: list[bytes]) -> bytes:
    if len(args) > 2:
        raise err("wrong number of arguments for 'ping' command")
    return reply.PONG if len(args) == 1 else reply.bulk(args[1])


@command("time", 1, "rFl", shown=(1, "rF"),
         acl=("connection",),
         syntax='TIME',
         summary="The node's clock.",
         reply='array: Unix seconds, microseconds')
def time_(client: Client, args: list[bytes]) -> bytes:
    now = time.time()
    seconds = int(now)
    return reply.encode([str(seconds).encode(), str(int((now - seconds) * 1e6)).encode()])


@command("info", -1, "rl",
         acl=("dangerous",),
         syntax='INFO [section]',
         summary="The node's state and counters, by section.",
         reply='bulk string of field:value lines')
def info_(client: Client, args: list[bytes]) -> bytes:
    if len(args) > 2:
        raise errors.SYNTAX
    section = args[1].decode("latin-1").lower() if len(args) == 2 else None
    return reply.bulk(client.server.admin_service.info(section).encode())


@command("config", -2, "srl", shown=(-2, "sr"),
         acl=ADMIN,
         syntax='CONFIG GET pattern | SET directive value | REWRITE | RESETSTAT',
         summary='Read and change directives at run time.',
         reply='depends on the subcommand')
def config(client: Client, args: list[bytes]) -> bytes:
    """CONFIG GET pattern | SET name value | REWRITE | RESETSTAT"""
    sub = args[1].lower()
    cfg = client.server.config
    argc = len(args)
    if sub == b"get" and argc == 3:
        pairs = cfg.get_matching(args[2].decode("latin-1"))
        flat = reply.encode([x.encode() for pair in pairs for x in pair])
        if client.resp3:  # after HELLO 3 (redis-py 8's default) Redis answers a map
            return b"%%%d\r\n" % len(pairs) + flat[flat.index(b"\n") + 1:]
        return flat
    if sub == b"set" and argc == 4:
        name, value = args[2].decode("latin-1"), args[3].decode("latin-1")
        try:
            cfg.set_runtime(name, value)
        except ConfigError as exc:
            raise err(str(exc)) from None
        return reply.OK
    if sub == b"rewrite" and argc == 2:
        try:
            cfg.rewrite()
        except ConfigError as exc:
            raise err(str(exc)) from None
        return reply.OK
    if sub == b"resetstat" and argc == 2:
        client.server.stats.reset_stats()
        return reply.OK
    if sub in (b"get", b"set", b"rewrite", b"resetstat"):
        raise err(f"Wrong number of arguments for CONFIG {args[1].decode('latin-1')}")
    raise err("CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


@command("debug", -2, "sl", shown=(-2, "s"),
         acl=ADMIN,
         syntax='DEBUG SLEEP s | FLUSHALL | LOADAOF | ...',
         summary='Debugging and testing aids.',
         reply='depends on the subcommand')
def debug(client: Client, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    argc = len(args)
    server = client.server
    if sub == b"flushall" and argc == 2:
        server.flush_data()
        return reply.OK
    if sub == b"sleep" and argc == 3:
        try:
            seconds = float(args[2])
        except ValueError:
            raise errors.NOT_INTEGER from None
        if seconds < 0 or seconds != seconds:
            raise errors.NOT_INTEGER
        time.sleep(seconds)  # blocking on purpose: DEBUG SLEEP simulates a stuck node
        return reply.OK
    if sub == b"loadaof" and argc == 2:
        return server.debug_load_aof()
    if sub == b"error" and argc == 3:
        return b"-" + args[2].replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n"
    if sub == b"structsize" and argc == 2:
        from ...job import Job
        from ...queue import Queue
        text = f"bits:64 job:{Job.__basicsize__} queue:{Queue.__basicsize__}\n"
        return reply.status(text.strip().encode())
    if sub in (b"restart", b"crash-and-recover") and argc in (2, 3):
        delay = parse_int(args[2]) if argc == 3 else 0
        server.shutdown.restart(graceful=sub == b"restart", delay_ms=max(delay or 0, 0))
        return reply.OK
    if sub == b"bus-clock-shift" and argc == 3:
        # disq: the PING/PONG timestamps of this node read its clock + ms, so its peers
        # see it skewed (tests) while its own timers keep the machine's clock.
        shift = parse_int(args[2])
        if shift is None:
            raise errors.NOT_INTEGER
        if server.bus is None:
            raise err("the cluster bus is not up yet")
        server.bus.clock_shift_us = shift * 1000
        return reply.OK
    if sub == b"segfault" and argc == 2:
        server.log_warning("DEBUG SEGFAULT: crashing on request")
        os.abort()
    raise err(
        f"Unknown DEBUG subcommand or wrong number of arguments for "
        f"'{args[1].decode('latin-1')}'")


# COMMAND's names of the table's flags, in Disque's order (Redis 3's), then noauth
_FLAG_NAMES = {"w": b"write", "r": b"readonly", "m": b"denyoom", "s": b"admin",
               "l": b"loading", "F": b"fast", "a": b"noauth"}


def _command_info(spec: CommandSpec, resp3: bool = False) -> bytes:
    """[name, arity, [flags], first key, last key, step] as Redis 3 answers COMMAND.
    After HELLO 3 the client expects Redis 6's form, which adds [ACL categories]
    (redis-py 8 indexes that 7th element)."""
    flags = [reply.status(name) for letter, name in _FLAG_NAMES.items()
             if letter in spec.shown_flags]
    return ((b"*7\r\n" if resp3 else b"*6\r\n") + reply.bulk(spec.bname)
            + reply.integer(spec.shown_arity) + reply.array(flags) + reply.ZERO + reply.ZERO
            + reply.ZERO + (reply.encode([b"@" + c.encode() for c in spec.categories])
                            if resp3 else b""))


@command("command", 0, "rl",
         acl=("connection",),
         syntax='COMMAND [COUNT | INFO name ... | DOCS name ...]',
         summary='The command table: arity, flags, first/last key, step.',
         reply='array')
def command_(client: Client, args: list[bytes]) -> bytes:
    """COMMAND [COUNT | INFO name ... | DOCS ...]"""
    if len(args) == 1:
        return reply.array([_command_info(spec, client.resp3) for spec in COMMANDS.values()])
    sub = args[1].lower()
    if sub == b"count" and len(args) == 2:
        return reply.integer(len(COMMANDS))
    if sub == b"info":
        out = []
        for name in args[2:]:
            spec = COMMANDS.get(name.lower())
            out.append(_command_info(spec, client.resp3) if spec else reply.NULL_BULK)
        return reply.array(out)
    if sub == b"docs":
        return reply.EMPTY_ARRAY
    raise err("Unknown subcommand or wrong number of arguments.")


@command("client", -2, "srl", shown=(-2, "sr"),
         acl=ADMIN,
         syntax=('CLIENT LIST | SETNAME name | GETNAME | KILL ... | ID | REPLY ON|OFF|SKIP | '
                 'SETINFO ...'),
         summary='Inspect and manage the connected clients.',
         reply='depends on the subcommand')
def client_(client: Client, args: list[bytes]) -> bytes:
    """CLIENT LIST | SETNAME name | GETNAME | KILL ... | ID | REPLY | SETINFO"""
    sub = args[1].lower()
    argc = len(args)
    server = client.server
    if sub == b"list" and argc == 2:
        text = "".join(c.info_line() + "\n" for c in server.clients.connected.values())
        return reply.bulk(text.encode())
    if sub == b"getname" and argc == 2:
        return reply.bulk(client.name) if client.name else reply.NULL_BULK
    if sub == b"setname" and argc == 3:
        name = args[2]
        if any(b <= 32 or b >= 127 for b in name):
            raise err("Client names cannot contain spaces, newlines or special characters.")
        client.name = name
        return reply.OK
    if sub == b"id" and argc == 2:
        return reply.integer(client.id)
    if sub == b"setinfo" and argc == 4:
        return reply.OK
    if sub == b"pause" and argc == 3:  # hold every client's requests for <ms>
        client.server.clients.pause_clients(timeout_ms(args[2]))
        return reply.OK
    if sub == b"kill" and argc > 2:  # bare CLIENT KILL must not kill everyone
        return _client_kill(client, args)
    raise err("Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)")


def _client_kill(client: Client, args: list[bytes]) -> bytes:
    server = client.server
    if len(args) == 3:  # old form: CLIENT KILL addr
        addr = args[2].decode("latin-1")
        for other in list(server.clients.connected.values()):
            if other.addr == addr:
                other.close_soon(client)
                return reply.OK
        raise err("No such client")
    if len(args) % 2 != 0:
        raise errors.SYNTAX
    want_id: int | None = None
    want_addr: str | None = None
    skipme = True
    for i in range(2, len(args), 2):
        opt, value = args[i].lower(), args[i + 1]
        if opt == b"id":
            want_id = parse_int(value)
            if want_id is None:
                raise errors.SYNTAX
        elif opt == b"addr":
            want_addr = value.decode("latin-1")
        elif opt == b"skipme":
            if value.lower() not in (b"yes", b"no"):
                raise errors.SYNTAX
            skipme = value.lower() == b"yes"
        elif opt == b"type":
            if value.lower() not in (b"normal",):
                raise err(f"Unknown client type '{value.decode('latin-1')}'")
        else:
            raise errors.SYNTAX
    killed = 0
    for other in list(server.clients.connected.values()):
        if want_id is not None and other.id != want_id:
            continue
        if want_addr is not None and other.addr != want_addr:
            continue
        if other is client and skipme:
            continue
        other.close_soon(client)
        killed += 1
    return reply.integer(killed)


@command("shutdown", -1, "srl",
         acl=ADMIN,
         syntax='SHUTDOWN [REWRITE-AOF | NOSAVE | SAVE]',
         summary='Stop the node (rewriting the AOF first with REWRITE-AOF).',
         reply='none: the connection closes')
def shutdown(client: Client, args: list[bytes]) -> bytes:
    """SHUTDOWN [REWRITE-AOF | NOSAVE | SAVE]"""
    rewrite_aof = False
    for arg in args[1:]:
        opt = arg.lower()
        if opt == b"rewrite-aof":
            rewrite_aof = True
        elif opt not in (b"nosave", b"save"):
            raise errors.SYNTAX
    if not client.server.shutdown.stop(rewrite_aof=rewrite_aof):
        raise err("Errors trying to SHUTDOWN. Check logs.")
    return b""  # no reply: the connection closes with the process


@command("bgrewriteaof", 1, "sr",
         acl=ADMIN,
         syntax='BGREWRITEAOF',
         summary='Compact the AOF to one record per live job, in the background.',
         reply='status')
def bgrewriteaof(client: Client, args: list[bytes]) -> bytes:
    """BGREWRITEAOF: compact the AOF to one record per live job, in the background."""
    aof = client.server.aof
    if aof.rewrite is not None:
        raise err("Background append only file rewriting already in progress")
    if not aof.start_rewrite():
        raise err(aof.rewrite_refused)  # e.g. aof-encryption-key-file unreadable
    return reply.status(b"Background append only file rewriting started")


@command("monitor", 1, "sr",
         acl=ADMIN,
         syntax='MONITOR',
         summary='Stream every command the node receives to this connection.',
         reply='status OK, then one status line per command')
def monitor(client: Client, args: list[bytes]) -> bytes:
    """MONITOR: stream every command the node receives to this client."""
    client.server.hot.monitors.add(client)
    return reply.OK


@command("slowlog", -2, "rl", shown=(-2, "r"),
         acl=ADMIN,
         syntax='SLOWLOG GET [n] | LEN | RESET',
         summary='The commands slower than slowlog-log-slower-than.',
         reply='depends on the subcommand')
def slowlog(client: Client, args: list[bytes]) -> bytes:
    """SLOWLOG GET [n] | LEN | RESET"""
    sub = args[1].lower()
    log = client.server.stats.slowlog
    if sub == b"len" and len(args) == 2:
        return reply.integer(len(log))
    if sub == b"reset" and len(args) == 2:
        log.clear()
        return reply.OK
    if sub == b"get" and len(args) in (2, 3):
        count = 10
        if len(args) == 3:
            value = parse_int(args[2])
            if value is None:
                raise errors.NOT_INTEGER
            count = value if value >= 0 else len(log)
        entries = list(log)[-count:][::-1] if count else []
        return reply.encode([list(e) for e in entries])
    raise err("Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")


@command("latency", -2, "srl",
         acl=ADMIN,
         syntax='LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR',
         summary='Latency events above latency-monitor-threshold.',
         reply='depends on the subcommand')
def latency(client: Client, args: list[bytes]) -> bytes:
    """LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR: the events
    latency-monitor-threshold records (commands, job timer runs)."""
    sub = args[1].lower()
    monitor = client.server.stats.latency
    if sub == b"latest" and len(args) == 2:
        return reply.encode(monitor.latest())
    if sub == b"history" and len(args) == 3:
        return reply.encode(monitor.history(args[2].decode("latin-1")))
    if sub == b"reset":
        events = [a.decode("latin-1") for a in args[2:]] or None
        return reply.integer(monitor.reset(events))
    if sub == b"doctor" and len(args) == 2:
        threshold = client.server.config.latency_monitor_threshold
        if not threshold and not monitor.events:
            return reply.bulk(b"Latency monitoring is disabled: CONFIG SET "
                              b"latency-monitor-threshold <milliseconds> enables it.")
        return reply.bulk(monitor.doctor(threshold).encode())
    raise err("LATENCY subcommand must be one of LATEST, HISTORY, RESET, DOCTOR")
