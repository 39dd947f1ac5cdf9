"""Queue permissions (ACL `~pattern`) in the commands that name a queue or a job.

The connection's dispatch checks the command, then the queues its arguments name where
its declaration says they are (`CommandSpec.queues`: `user_may_use_all`); the jobs a
command names are checked by the job service (`JobService.allowed`: their queues are
known once they are looked up); a front end other than RESP has the queues it names
checked by `JobService.gate`. These are the services' part: queues known from stored
state (a schedule CRON ADD replaces, cron_service.py). Each helper costs one attribute
test for a user allowed every queue (`all_queues`, the default user).

- A queue named (ADDJOB, GETJOB FROM, QLEN, QPEEK, PAUSE, QPOLICY, CRON ADD...) must
  match one of the user's patterns, else -NOPERM for the whole command (GETJOB FROM
  q1 q2 with q2 forbidden is refused, as Redis refuses a command if one key is).
- A job named by its ID: its queue decides. If one of the jobs named is in a queue
  the user may not use, the whole command is refused. A job this node does not know
  is left out of the command for a restricted user (so ACKJOB/FASTACK of an unknown
  ID, which Disque spreads to the whole cluster, cannot reach a job of another queue
  held elsewhere): it counts as unknown, as it would anyway.
- What lists (JSCAN, QSCAN, CRON LIST) only shows what the user may see.

`refusal` is the one sequence of the checks a command passes before it runs, after
its arity and authentication: the user's commands and queues, -OOM, the node's state
(-MISCONF, -LOADING). The RESP dispatch asks it only when one of them may refuse (its
fast path: a user allowed everything, a node not refusing, memory under the 95% mark);
`JobService.gate` asks it for the other front ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..errors import OOM, DisqError, fixed

if TYPE_CHECKING:
    from ..acl import AclTable, User
    from .app import Server
    from .connection import Client
    from .table import CommandSpec

NOPERM_KEY = fixed("NOPERM_KEY", "NOPERM", "No permissions to access a key")
# The subcommands Redis puts in @connection, not @admin, are allowed to every user: ACL
# WHOAMI and CAT, CLIENT ID, GETNAME, SETNAME and SETINFO (which client libraries send
# on connecting).
_EVERY_USERS_SUBCOMMANDS: Final = {"acl": (b"whoami", b"cat"),
                                   "client": (b"id", b"getname", b"setname", b"setinfo")}


class CommandDenied(DisqError):
    """-NOPERM for a command the user may not run. Its RESP reply names the user as
    Redis does, by at most 128 bytes of its name; its message (the HTTP API's detail)
    by the whole name."""

    __slots__ = ("user_name", "command")

    def __init__(self, user_name: str, command: str) -> None:
        super().__init__("NOPERM", f"User {user_name} has no permissions to run the "
                         f"'{command}' command")
        self.user_name = user_name
        self.command = command

    def reply(self) -> bytes:
        return b"-NOPERM User %s has no permissions to run the '%s' command\r\n" % (
            printable(self.user_name.encode()), self.command.encode())


def printable(name: bytes) -> bytes:
    """A name the client sent (or a user's), as an error reply quotes it: at most 128
    bytes, on one line."""
    return name[:128].replace(b"\r", b" ").replace(b"\n", b" ")


def out_of_memory(server: Server, spec: CommandSpec) -> bool:
    """-OOM: the command may take memory (`denyoom`) while the jobs are over the 95%
    mark and eviction cannot bring them under it; never while loading (Disque)."""
    node = server.node
    return spec.denyoom and node.job_bytes > node.full_bytes and (
        not server.loading and not node.make_room(0))


def refusal(server: Server, user: User, spec: CommandSpec, args: list[bytes] | None,
            queues: list[bytes] | None = None) -> DisqError | None:
    """What refuses running `spec` for `user` now, a fresh error (None: it runs), in
    Disque's order: the user may not run the command (-NOPERM), nor use a queue it
    names (-NOPERM: `queues`, or where its declaration finds them in the RESP request
    `args`), the node is out of memory (-OOM), the node's state refuses it (-MISCONF,
    -LOADING: `Server.refusal`). The commands a client runs before it authenticates
    and the subcommands every user may run pass the user's command rules: RESP's
    (`args`), not another front end's."""
    if user.restricted and spec.name not in user.allowed and not (
            args is not None and (spec.noauth or _every_users_subcommand(spec, args))):
        server.acl.denied_cmd += 1
        return CommandDenied(user.name, spec.name)
    if not user.all_queues:
        if args is not None and spec.queues is not None:
            queues = spec.queues.find(args)
        if queues and not user_may_use_all(user, queues):
            server.acl.denied_key += 1
            return NOPERM_KEY()
    if out_of_memory(server, spec):
        return OOM()
    if server.hot.refusing:
        return server.refusal(spec.flags, spec.name)
    return None


def _every_users_subcommand(spec: CommandSpec, args: list[bytes]) -> bool:
    if len(args) > 1:
        allowed = _EVERY_USERS_SUBCOMMANDS.get(spec.name)
        return allowed is not None and args[1].lower() in allowed
    return False


def user_may_use_all(user: User, queues: list[bytes]) -> bool:
    """Whether `user` may use every queue of `queues` (the dispatch's check of the
    queues a command's arguments name)."""
    return all(user.may_use(queue) for queue in queues)


def check_queue(acl: AclTable, user: User, queue: bytes) -> None:
    """-NOPERM unless `user` may use `queue` (counted in `acl`'s refusals)."""
    if not user.all_queues and not user.may_use(queue):
        acl.denied_key += 1
        raise NOPERM_KEY


def user_may_see(user: User, queue: bytes | None) -> bool:
    """For listings: may the user see this queue (or a job of it)?"""
    return user.all_queues or (queue is not None and user.may_use(queue))


def may_see(client: Client, queue: bytes | None) -> bool:
    """`user_may_see` for the client's user."""
    return user_may_see(client.user, queue)
