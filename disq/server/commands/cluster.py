"""Cluster commands: CLUSTER (MYID NODES INFO SAVECONFIG LEAVING) and HELLO."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import DisqError, err
from .. import reply
from ..table import command

if TYPE_CHECKING:
    from ..connection import Client

_WRONG = err("Wrong CLUSTER subcommand or number of arguments")


@command("hello", 1, "r")
def hello(client: Client, args: list[bytes]) -> bytes:
    """HELLO: [1, my id, [id, ip, port, priority] for every known node]."""
    membership = client.server.membership
    entries: list[object] = [1, membership.myself.id.encode()]
    for node in membership.nodes.values():
        ip = node.ip or (client.local_ip if node.is_myself else "")
        priority = node.priority()
        if node.is_myself and client.node.leaving:
            priority = 100
        entries.append([node.id.encode(), ip.encode(), str(node.port).encode(),
                        str(priority).encode()])
    return reply.encode(entries)


@command("cluster", -2, "r")
def cluster(client: Client, args: list[bytes]) -> bytes:
    """CLUSTER MYID | NODES | INFO | SAVECONFIG | LEAVING [yes|no]"""
    sub = args[1].lower()
    argc = len(args)
    server = client.server
    membership = server.membership
    if sub == b"myid" and argc == 2:
        return reply.bulk(membership.myself.id.encode())
    if sub == b"nodes" and argc == 2:
        return reply.bulk(membership.describe_all(client.local_ip).encode())
    if sub == b"info" and argc == 2:
        lines = [
            "cluster_state:ok",
            f"cluster_known_nodes:{len(membership.nodes)}",
            f"cluster_reachable_nodes:{membership.reachable_peers()}",
            f"cluster_size:{membership.size()}",
            f"cluster_stats_messages_sent:{membership.messages_sent}",
            f"cluster_stats_messages_received:{membership.messages_received}",
        ]
        return reply.bulk(("\r\n".join(lines) + "\r\n").encode())
    if sub == b"saveconfig" and argc == 2:
        try:
            membership.save()
        except OSError as exc:
            raise DisqError("ERR", f"error saving the cluster node config: {exc}") from None
        return reply.OK
    if sub == b"leaving" and argc in (2, 3):
        if argc == 2:
            return reply.status(b"yes" if client.node.leaving else b"no")
        value = args[2].lower()
        if value not in (b"yes", b"no"):
            raise err("Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        server.set_leaving(value == b"yes")
        return reply.OK
    raise _WRONG
