"""Users and permissions across the cluster: every node holds every user
(disq/acl.py), so a client may AUTH on any node as on the one where its user was made.

A change made on a node (ACL SETUSER, DELUSER, LOAD) goes to every reachable node at
once (ACL_SET), and each node sends every user changed by a command to a random peer
every SYNC_PERIOD_MS (ACL_SYNC, tables.py): a node that was down or cut off catches
up within a few periods. Each user carries its version (ms, node ID of the change):
the newest wins on every node; a deleted user is a tombstone, so the deletion spreads
too. A peer's user is parsed with the same rules as ACL SETUSER: a malformed one is
ignored. Users as requirepass or the start-up make them (version 0) stay on their
node: `requirepass` stays a per-node setting, as in Disque.
"""

from __future__ import annotations

from ..acl import AclTable, User
from ..cluster import messages as m
from ..cluster.port import BusPort
from .tables import OnHeld, SyncedTable


class UserSync:
    def __init__(self, acl: AclTable, bus: BusPort) -> None:
        self.acl = acl
        self.sync = SyncedTable(bus, m.ACL_SET, m.ACL_SYNC, m.ACL_HELD, acl.replicated,
                                self._merge)

    def changed(self, user: User) -> None:
        """A user defined or deleted here: tell every node."""
        self.sync.changed(user.to_wire())

    def changed_all(self, users: list[User], on_held: OnHeld) -> None:
        """Users defined or deleted here by a command: tell every node, and `on_held`
        once every reachable one holds them (tables.py)."""
        self.sync.changed_all([user.to_wire() for user in users], on_held)

    def cron(self, now: int) -> None:
        self.sync.cron(now)

    def _merge(self, data: object) -> None:
        self.acl.merge(data)
