"""Queue commands: QLEN QPEEK QSTAT QSCAN JSCAN PAUSE."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import errors
from ...errors import fixed
from ...job import STATE_BY_NAME, Job
from ...node import now_ms
from ...queue import PAUSE_NAMES, PAUSED_ALL, PAUSED_IN, PAUSED_OUT, Queue
from ...requests import parse_int
from .. import reply
from ..table import command
from .jobs import show_job

if TYPE_CHECKING:
    from ...scantable import ScanTable
    from ..connection import Client, Pending

_BAD_CURSOR = fixed("BAD_CURSOR", "ERR", "invalid cursor or option name")
_BAD_STATE = fixed("BAD_STATE", "ERR", "Invalid job state name")
_BAD_REPLY = fixed("BAD_REPLY", "ERR", "Invalid REPLY type, try ID or ALL")


@command("qlen", 2, "r")
def qlen(client: Client, args: list[bytes]) -> bytes:
    """QLEN queue: jobs queued on this node."""
    return reply.integer(client.node.qlen(args[1]))


@command("globalqlen", 2, "r")
def globalqlen(client: Client, args: list[bytes]) -> bytes | Pending:
    """GLOBALQLEN queue (a later Disque command): jobs queued in the whole cluster,
    this node's QLEN plus each reachable node's, answered once they all replied."""
    local = client.node.qlen(args[1])
    replication = client.server.replication
    if replication is None or client.node.cluster.size() <= 1:
        return reply.integer(local)
    pending = client.pending()
    replication.global_qlen(args[1],
                            lambda others: pending.answer(reply.integer(local + others)))
    return pending


@command("qpeek", 3, "r")
def qpeek(client: Client, args: list[bytes]) -> bytes:
    """QPEEK queue count: oldest first for count > 0, newest first for count < 0."""
    count = parse_int(args[2])
    if count is None:
        raise errors.NOT_INTEGER
    queue = client.node.queues.get(args[1])
    if queue is None or count == 0:
        return reply.EMPTY_ARRAY
    jobs = queue.jobs.head(count) if count > 0 else queue.jobs.tail(-count)
    return b"*%d\r\n" % len(jobs) + b"".join(map(reply.job_entry, jobs))


@command("qstat", 2, "r")
def qstat(client: Client, args: list[bytes]) -> bytes:
    """QSTAT queue: the queue's counters, or a null array if it does not exist."""
    queue = client.node.queues.get(args[1])
    if queue is None:
        return reply.NULL_ARRAY
    now = now_ms()
    importers = sorted(queue.needjobs_responders or ())
    return reply.encode([
        b"name", queue.name,
        b"len", len(queue.jobs),
        b"age", (now - queue.ctime) // 1000,
        b"idle", (now - queue.atime) // 1000,
        b"blocked", len(queue.waiters),
        b"import-from", [n.encode() for n in importers],
        b"import-rate", queue.import_rate_at(now),
        b"jobs-in", queue.jobs_in,
        b"jobs-out", queue.jobs_out,
        b"pause", PAUSE_NAMES[queue.flags & PAUSED_ALL],
    ])


def _scan_common(args: list[bytes], extra: dict[bytes, int]) -> tuple[int, int, bool, list]:
    """Parse the options every SCAN shares. `extra` names option -> 1 (takes a value)
    or 0 (flag); their values are returned in order as (name, value) pairs."""
    cursor: int | None = None
    count = 100
    busyloop = False
    options: list[tuple[bytes, bytes | None]] = []
    j = 1
    argc = len(args)
    while j < argc:
        opt = args[j].lower()
        has_value = j + 1 < argc
        if opt == b"count" and has_value:
            value = parse_int(args[j + 1])
            if value is None:
                raise errors.NOT_INTEGER
            count = value  # not range-checked, as in Disque: < 1 means one step
            j += 1
        elif opt == b"busyloop":
            busyloop = True
        elif opt in extra and (extra[opt] == 0 or has_value):
            options.append((opt, args[j + 1] if extra[opt] else None))
            j += extra[opt]
        else:
            if cursor is not None:
                raise errors.SYNTAX
            value = parse_int(args[j])
            if value is None or value < 0:
                raise _BAD_CURSOR
            cursor = value
        j += 1
    return cursor or 0, count, busyloop, options


def _scan(table: ScanTable[Any, Any], cursor: int, count: int, busyloop: bool,
          keep: Callable[[Any], bool] | None) -> tuple[int, list[Any]]:
    """A negative COUNT scans to the end, as in Disque (its bounds wrap around)."""
    if count < 0:
        busyloop = True
    items: list[Any] = []
    while True:
        cursor, found = table.scan(cursor, count, keep)
        items.extend(found)
        if cursor == 0 or not busyloop:
            return cursor, items


@command("qscan", -1, "r")
def qscan(client: Client, args: list[bytes]) -> bytes:
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE n]"""
    cursor, count, busyloop, options = _scan_common(
        args, {b"minlen": 1, b"maxlen": 1, b"importrate": 1})
    minlen = maxlen = importrate = -1
    for opt, value in options:
        number = parse_int(value or b"")
        if number is None:
            raise errors.NOT_INTEGER
        if opt == b"minlen":
            minlen = number
        elif opt == b"maxlen":
            maxlen = number
        else:
            importrate = number

    now = now_ms()

    def keep(queue: Queue) -> bool:
        n = len(queue.jobs)
        return (
            (minlen < 0 or n >= minlen)
            and (maxlen < 0 or n <= maxlen)
            and (importrate < 0 or queue.import_rate_at(now) >= importrate)
        )

    cursor, queues = _scan(client.node.queues, cursor, count, busyloop, keep)
    return reply.encode([str(cursor).encode(), [q.name for q in queues]])


@command("jscan", -1, "r")
def jscan(client: Client, args: list[bytes]) -> bytes:
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY all|id]"""
    cursor, count, busyloop, options = _scan_common(
        args, {b"queue": 1, b"state": 1, b"reply": 1})
    queue_name: bytes | None = None
    states: set[int] = set()
    reply_all = False
    for opt, value in options:
        assert value is not None
        if opt == b"queue":
            queue_name = value
        elif opt == b"state":
            state = STATE_BY_NAME.get(value.decode("latin-1").lower())
            if state is None:
                raise _BAD_STATE
            states.add(state)
        else:
            kind = value.lower()
            if kind not in (b"all", b"id"):
                raise _BAD_REPLY
            reply_all = kind == b"all"

    def keep(job: Job) -> bool:
        return (
            job.body is not None  # dummy acks are not listed
            and (queue_name is None or job.queue == queue_name)
            and (not states or job.state in states)
        )

    cursor, jobs = _scan(client.node.jobs, cursor, count, busyloop, keep)
    if reply_all:
        items = [show_job(job, client.node.id) for job in jobs]
    else:
        items = [b"+" + job.id + b"\r\n" for job in jobs]
    return b"*2\r\n" + reply.bulk(str(cursor).encode()) + reply.array(items)


_PAUSE_OPTIONS = {b"in": PAUSED_IN, b"out": PAUSED_OUT, b"all": PAUSED_ALL}


@command("pause", -3, "w")
def pause(client: Client, args: list[bytes]) -> bytes:
    """PAUSE queue in|out|all|none|state|bcast ...: replies the resulting state."""
    node = client.node
    old = node.pause_flags(args[1])
    flags = 0  # as Disque: the options given replace the state, they don't add to it
    update = broadcast = False
    for arg in args[2:]:
        opt = arg.lower()
        if opt == b"none":
            flags = 0
            update = True
        elif opt in _PAUSE_OPTIONS:
            flags |= _PAUSE_OPTIONS[opt]
            update = True
        elif opt == b"state":
            pass
        elif opt == b"bcast":
            broadcast = True
        else:
            raise errors.SYNTAX
    if update and (flags != old or node.queues.get(args[1]) is not None):
        node.set_pause(args[1], flags, broadcast)
    else:
        flags = old  # no update (or none on a missing queue): report the state as is
        if broadcast:
            node.cluster.pause(args[1], flags)
    return reply.status(PAUSE_NAMES[flags])
