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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import fixed

if TYPE_CHECKING:
    from ..acl import AclTable, User
    from .connection import Client

NOPERM_KEY = fixed("NOPERM_KEY", "NOPERM", "No permissions to access a key")


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
