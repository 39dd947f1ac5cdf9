"""The server's side of users and permissions (disq/acl.py): the aclfile loaded at
start, requirepass changed, what a change does to the connected clients,
and the link to the cluster (disq/replication/users.py). A part of `Server`
(`server.access`)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..acl import AclError, AclTable, User
from .reactions import reacts_to

if TYPE_CHECKING:
    from ..replication.users import UserSync
    from .clients import ClientRegistry

log = logging.getLogger("disq")


class Access:
    """What a change of the users does to the server and the cluster (`server.access`),
    for the server's table of users (`server.acl`)."""

    __slots__ = ("acl", "clients", "loop", "user_sync")

    def __init__(self, acl: AclTable, clients: ClientRegistry) -> None:
        self.acl = acl
        acl.on_delete = self._user_deleted
        acl.on_change = self._user_changed
        self.clients = clients
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs
        self.user_sync: UserSync | None = None  # once the cluster is connected

    @reacts_to("requirepass")
    def _requirepass_changed(self, password: str) -> None:
        self.acl.set_requirepass(password)

    def load_aclfile(self, node_id: str) -> None:
        """At start, after `dir` is entered: an aclfile that cannot be read or has an
        error stops the start, as in Redis. Its users' version is the file's mtime, so
        that what the cluster changed since it was written wins."""
        acl = self.acl
        if not acl.aclfile:
            return
        try:
            mtime = int(os.stat(acl.aclfile).st_mtime * 1000)
            count = acl.load_file((mtime, node_id), at_start=True)
        except OSError as exc:
            raise SystemExit(f"Aborting disq startup because of ACL errors: can't read "
                             f"aclfile '{acl.aclfile}': {exc.strerror or exc}") from None
        except AclError as exc:
            raise SystemExit(f"Aborting disq startup because of ACL errors: {exc}") from None
        log.info("%d users loaded from %s", count, acl.aclfile)

    def _user_changed(self, user: User) -> None:
        """Changed here (ACL SETUSER, DELUSER, LOAD): tell every node."""
        if self.user_sync is not None:
            self.user_sync.changed(user)

    def users_changed(self, users: list[User], on_held: Callable[[list[str]], None]) -> None:
        """Changed here by ACL SETUSER / DELUSER: tell every node, and `on_held` once
        every reachable one holds them (at once without a cluster bus)."""
        if self.user_sync is None:
            on_held([])
        else:
            self.user_sync.changed_all(users, on_held)

    def _user_deleted(self, user: User) -> None:
        """A deleted user's clients are disconnected, as in Redis: on the next loop
        turn, so that a client deleting its own user gets its reply first."""
        for client in list(self.clients.connected.values()):
            if client.user is user and client.name != b"http":
                if self.loop is not None:
                    self.loop.call_soon(client.close)
                else:
                    client.close()
