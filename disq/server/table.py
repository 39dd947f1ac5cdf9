"""The command table: the one index of every command the server understands.

Each command module registers its handlers with `@command(name, arity, flags)`.
Arity follows Redis: N = exactly N arguments including the name, -N = at least N.
A handler takes (client, args) and returns the encoded reply, or a `Pending` (from
`client.pending()` or `client.park()`) that is answered later: synchronous replication,
a DEDUP check, a blocking GETJOB.

Flags: w = writes jobs (refused after an AOF write error), m = may use memory (refused
at OOM), a = allowed before AUTH, l = allowed while loading, r = read only, s = admin,
F = fast (O(1) or about). COMMAND shows them (write, denyoom, noauth, loading, readonly,
admin, fast). A command Disque has shows Disque's arity and flags (its server.c),
exactly, since clients and tools compare them: where disq accepts more (AUTH username
password and HELLO protover take more arguments; AUTH and HELLO are answered before
AUTH, and PING, TIME, HELLO, CONFIG, DEBUG, CLIENT, SLOWLOG while the AOF loads) the
declaration says what COMMAND shows beside what the node enforces (`shown`).

ACL categories (disq/acl.py, `ACL CAT`): every command is listed in `CATEGORIES`
below; registering a command missing there fails at import, so a new command must
choose who may run it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .connection import Client
    from .pending import Pending

Handler = Callable[["Client", list[bytes]], "bytes | Pending"]


# -- ACL categories of every command (disq/acl.py CATEGORIES) ---------------------------
_ADMIN: Final = ("admin", "dangerous")
_CONSUME: Final = ("consume", "write")
CATEGORIES: dict[str, tuple[str, ...]] = {
    "addjob": ("produce", "write"), "addjobs": ("produce", "write"), "cron": ("produce", "write"),
    "jobset": ("produce", "write"),
    "getjob": _CONSUME, "ackjob": _CONSUME, "fastack": _CONSUME, "nack": _CONSUME,
    "enqueue": _CONSUME, "dequeue": _CONSUME, "working": _CONSUME,
    "deadletter": _CONSUME,
    "deljob": ("write",), "pause": ("write",), "qpolicy": ("write",),
    "show": ("read",), "qlen": ("read",), "globalqlen": ("read",), "qpeek": ("read",),
    "qstat": ("read",), "qscan": ("read",), "jscan": ("read",),
    "ping": ("connection",), "auth": ("connection",), "hello": ("connection",),
    "time": ("connection",), "command": ("connection",),
    "info": ("dangerous",),
    "cluster": _ADMIN, "config": _ADMIN, "debug": _ADMIN, "client": _ADMIN,
    "shutdown": _ADMIN, "bgrewriteaof": _ADMIN, "monitor": _ADMIN, "slowlog": _ADMIN,
    "latency": _ADMIN, "acl": _ADMIN, "loadjob": _ADMIN,
}


class CommandSpec:
    __slots__ = ("name", "handler", "arity", "flags", "calls", "usec", "bname", "noauth",
                 "while_loading", "denyoom", "shown_arity", "shown_flags")

    def __init__(self, name: str, handler: Handler, arity: int, flags: str,
                 shown: tuple[int, str] | None = None) -> None:
        self.name = name
        self.bname = name.encode()
        self.handler = handler
        self.arity = arity
        self.flags = flags
        self.shown_arity, self.shown_flags = shown if shown is not None else (arity, flags)
        self.noauth = "a" in flags
        self.while_loading = "l" in flags
        self.denyoom = "m" in flags
        self.calls = 0
        self.usec = 0


COMMANDS: Final[dict[bytes, CommandSpec]] = {}
# Name as sent -> spec, for the spellings clients use (lowercase, as redis-cli sends,
# and uppercase, as most libraries do): found without lowercasing the name first.
LOOKUP: Final[dict[bytes, CommandSpec]] = {}


def command(name: str, arity: int, flags: str = "",
            shown: tuple[int, str] | None = None) -> Callable[[Handler], Handler]:
    """Register a handler. `shown`: the (arity, flags) COMMAND reports when they differ
    from what the node enforces: Disque's own, for a command disq extends."""
    if name not in CATEGORIES:
        raise KeyError(f"command {name!r} has no ACL categories in table.CATEGORIES")

    def register(handler: Handler) -> Handler:
        spec = CommandSpec(name, handler, arity, flags, shown)
        COMMANDS[spec.bname] = LOOKUP[spec.bname] = LOOKUP[spec.bname.upper()] = spec
        return handler

    return register


def rename_command(name: bytes, new_name: bytes) -> None:
    """rename-command: `name` (lowercase) answers only as `new_name`, or not at all
    when it is b"". As in Redis the spec keeps its own name, so COMMAND and INFO
    commandstats still show the original one (a secret new name does not leak)."""
    spec = COMMANDS.pop(name)
    for spelling in [key for key, value in LOOKUP.items() if value is spec]:
        del LOOKUP[spelling]
    if new_name:
        COMMANDS[new_name] = LOOKUP[new_name] = LOOKUP[new_name.upper()] = spec

