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

Each declaration also says who may run the command (its ACL categories, disq/acl.py),
where its arguments name queues and job IDs (`At`, `From`, ...: what a user allowed
some queues only may name), its options (disq_client/spec.py's tables, which the
parser, the client and the HTTP API share), and its documentation: the command
reference, docs/reference/commands.md, is generated from the declarations
(`python -m disq.server.commanddocs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from disq_client.spec import CommandOptions

if TYPE_CHECKING:
    from .connection import Client
    from .histograms import Histogram
    from .pending import Pending

Handler = Callable[["Client", list[bytes]], "bytes | Pending"]


# ACL categories (disq/acl.py, `ACL CAT`) of every command, as each declares them.
CATEGORIES: dict[str, tuple[str, ...]] = {}
ADMIN: Final = ("admin", "dangerous")
CONSUME: Final = ("consume", "write")
PRODUCE: Final = ("produce", "write")


class At:
    """Where a command names queues or jobs: the argument at `index`."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def find(self, args: list[bytes]) -> list[bytes]:
        return args[self.index:self.index + 1]

    def describe(self) -> str:
        return f"argument {self.index}"


class From:
    """... every argument from `index` on."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def find(self, args: list[bytes]) -> list[bytes]:
        return args[self.index:]

    def describe(self) -> str:
        return f"arguments {self.index} on"


class AfterToken:
    """... every argument after the first `token` (any case) from `start` on, as
    GETJOB's queues follow FROM."""

    __slots__ = ("token", "start")

    def __init__(self, token: bytes, start: int = 1) -> None:
        self.token = token.lower()
        self.start = start

    def find(self, args: list[bytes]) -> list[bytes]:
        for i in range(self.start, len(args)):
            if args[i].lower() == self.token:
                return args[i + 1:]
        return []

    def describe(self) -> str:
        return f"the arguments after {self.token.upper().decode()}"


class AfterOptions:
    """... every argument after the options of `options` that start at `start`, as
    NACK's job IDs follow its DELAY-MS."""

    __slots__ = ("options", "start")

    def __init__(self, options: CommandOptions, start: int = 1) -> None:
        self.options = options
        self.start = start

    def find(self, args: list[bytes]) -> list[bytes]:
        i, lookup = self.start, self.options.lookup
        while i < len(args) and (option := lookup(args[i])) is not None:
            i += 1 + option.values
        return args[i:]

    def describe(self) -> str:
        return f"the arguments after {self.options.name}'s options"


class OptionValue:
    """... the value of option `token`, looked for from `start` on (QPOLICY SET's
    DEADLETTER queue)."""

    __slots__ = ("token", "start")

    def __init__(self, token: bytes, start: int) -> None:
        self.token = token.lower()
        self.start = start

    def find(self, args: list[bytes]) -> list[bytes]:
        for i in range(self.start, len(args) - 1):
            if args[i].lower() == self.token:
                return [args[i + 1]]
        return []

    def describe(self) -> str:
        return f"the value of {self.token.upper().decode()}"


class Subcommand:
    """... as the subcommand (argument 1, any case) says: `by_name` maps a
    lowercase subcommand to where that form names them."""

    __slots__ = ("by_name",)

    def __init__(self, by_name: dict[bytes, Locator]) -> None:
        self.by_name = by_name

    def find(self, args: list[bytes]) -> list[bytes]:
        where = self.by_name.get(args[1].lower()) if len(args) > 1 else None
        return [] if where is None else where.find(args)

    def describe(self) -> str:
        return "; ".join(f"{name.upper().decode()}: {where.describe()}"
                         for name, where in self.by_name.items())


class Both:
    """... in both places (QPOLICY's queue and its DEADLETTER queue)."""

    __slots__ = ("first", "second")

    def __init__(self, first: Locator, second: Locator) -> None:
        self.first = first
        self.second = second

    def find(self, args: list[bytes]) -> list[bytes]:
        return self.first.find(args) + self.second.find(args)

    def describe(self) -> str:
        return f"{self.first.describe()} and {self.second.describe()}"


Locator = At | From | AfterToken | AfterOptions | OptionValue | Subcommand | Both


class CommandSpec:
    """A command's one declaration: what the server enforces (arity, flags), what
    COMMAND shows, who may run it (ACL categories), where it names queues and job IDs,
    its options, and its documentation (syntax, summary, reply), from which the
    command reference (docs/reference/commands.md) is generated."""

    __slots__ = ("name", "handler", "arity", "flags", "calls", "usec", "bname", "noauth",
                 "while_loading", "denyoom", "shown_arity", "shown_flags", "categories",
                 "syntax", "summary", "reply", "options", "queues", "jobs", "extension",
                 "histogram")

    def __init__(self, name: str, handler: Handler, arity: int, flags: str,
                 shown: tuple[int, str] | None = None, *,
                 categories: tuple[str, ...] = (), syntax: str = "", summary: str = "",
                 reply: str = "", options: tuple[CommandOptions, ...] = (),
                 queues: Locator | None = None, jobs: Locator | None = None,
                 extension: bool = False) -> None:
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
        self.categories = categories
        self.syntax = syntax
        self.summary = summary
        self.reply = reply
        self.options = options
        self.queues = queues
        self.jobs = jobs
        self.extension = extension
        # ADDJOB's and GETJOB's latencies until answered (the server installs them)
        self.histogram: Histogram | None = None


COMMANDS: Final[dict[bytes, CommandSpec]] = {}
# Name as sent -> spec, for the spellings clients use (lowercase, as redis-cli sends,
# and uppercase, as most libraries do): found without lowercasing the name first.
LOOKUP: Final[dict[bytes, CommandSpec]] = {}


def command(name: str, arity: int, flags: str = "", shown: tuple[int, str] | None = None,
            *, acl: tuple[str, ...], syntax: str, summary: str, reply: str,
            options: tuple[CommandOptions, ...] = (), queues: Locator | None = None,
            jobs: Locator | None = None, extension: bool = False
            ) -> Callable[[Handler], Handler]:
    """Declare a command and register its handler. `shown`: the (arity, flags) COMMAND
    reports when they differ from what the node enforces: Disque's own, for a command
    disq extends. `acl`: its ACL categories (a command must choose who may run it).
    `queues`/`jobs`: where its arguments name queues and job IDs. `extension`: a
    command Disque does not have."""
    if not acl or not syntax or not summary or not reply:
        raise ValueError(f"command {name!r}: declare its ACL categories and its docs")

    def register(handler: Handler) -> Handler:
        spec = CommandSpec(name, handler, arity, flags, shown, categories=acl,
                           syntax=syntax, summary=summary, reply=reply, options=options,
                           queues=queues, jobs=jobs, extension=extension)
        COMMANDS[spec.bname] = LOOKUP[spec.bname] = LOOKUP[spec.bname.upper()] = spec
        CATEGORIES[name] = acl
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

