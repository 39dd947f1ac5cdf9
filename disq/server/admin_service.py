"""The node's own operations every front end runs (`Server.admin_service`): what it
knows of the cluster (HELLO, CLUSTER NODES, INFO, every node's stats) and its users
(ACL SETUSER, DELUSER, LIST). A RESP handler is parse -> service -> encode
(commands/cluster.py, admin.py, acl.py); an HTTP route is JSON -> service -> JSON
(http/api_admin.py).

A user changed here answers once every reachable node holds the change: a `Later` of
the nodes that did not confirm (later.py), as the stats of every node are a `Later` of
the answers (replication/stats.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import errors
from ..acl import DEFAULT_USER, AclError
from ..node import now_ms
from . import info
from .later import Later

if TYPE_CHECKING:
    from ..acl import AclTable, User, Version
    from ..replication.stats import NodeStats
    from .app import Server


def next_version(acl: AclTable, name: str, node_id: str) -> Version:
    """A version newer than the user's (the clock, or one more if it went back)."""
    user = acl.users.get(name)
    now = now_ms()
    if user is not None and user.version[0] >= now:
        now = user.version[0] + 1
    return (now, node_id)


class AdminService:
    """The cluster as this node knows it, and the node's users."""

    __slots__ = ("server",)

    def __init__(self, server: Server) -> None:
        self.server = server

    # -- the cluster ----------------------------------------------------------------------
    def my_id(self) -> str:
        return self.server.membership.myself.id

    def hello_nodes(self, local_ip: str) -> list[tuple[str, str, int, int]]:
        """HELLO: every known node, this one first, as (ID, IP, port, priority);
        `local_ip` stands for this node's IP while it does not know it. A leaving node
        announces priority 100 (no client should pick it)."""
        leaving = self.server.node.leaving
        nodes = []
        for node in self.server.membership.nodes.values():
            ip = node.ip or (local_ip if node.is_myself else "")
            priority = 100 if node.is_myself and leaving else node.priority()
            nodes.append((node.id, ip, node.port, priority))
        return nodes

    def cluster_nodes(self, local_ip: str) -> str:
        """CLUSTER NODES: a line per known node (nodes.conf's format)."""
        return self.server.membership.describe_all(local_ip)

    def info(self, section: str | None) -> str:
        """INFO: field:value lines under "# Section" headers."""
        return info.render(self.server, section)

    def node_stats(self) -> Later[dict[str, NodeStats]]:
        """Every reachable node's stats and this node's, by node ID, once they all
        answered or timed out (replication/stats.py): a node that did not is left out."""
        server = self.server
        replication = server.replication
        if replication is None:  # (no cluster layer)
            return Later.now({server.node.id: server.node_stats()})
        return Later.of(replication.stats.gather)

    # -- users ----------------------------------------------------------------------------
    def users(self) -> list[User]:
        """ACL LIST / USERS: the users, by name (deleted ones not)."""
        return self.server.acl.live()

    def set_user(self, name: str, rules: list[str]) -> Later[list[str]]:
        """ACL SETUSER: all the rules apply, or none (-ERR naming the wrong one); the
        user is created if there is none of that name."""
        acl = self.server.acl
        try:
            user = acl.set_user(name, rules, next_version(acl, name, self.server.node.id))
        except AclError as exc:
            raise errors.err(str(exc)) from None
        return self._spread([user])

    def delete_users(self, names: list[str]) -> tuple[int, Later[list[str]]]:
        """ACL DELUSER: how many of the users named existed (none is deleted if one is
        the default user: -ERR)."""
        acl = self.server.acl
        if DEFAULT_USER in names:
            raise errors.err("The 'default' user cannot be removed")
        node_id = self.server.node.id
        deleted = [acl.users[name] for name in names
                   if acl.delete(name, next_version(acl, name, node_id))]
        return len(deleted), self._spread(deleted)

    def _spread(self, users: list[User]) -> Later[list[str]]:
        """Tell every node of the users changed here (access.py)."""
        if not users:
            return Later.now([])
        return Later.of(lambda held: self.server.access.users_changed(users, held))
