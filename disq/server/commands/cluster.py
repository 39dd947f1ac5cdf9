"""Cluster commands: CLUSTER (MYID NODES INFO SAVECONFIG LEAVING) and HELLO."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from ...config import VERSION
from ...errors import DisqError, err, fixed
from ...exposure import is_loopback, meet_refusal
from ...options import parse_int
from .. import reply
from ..table import ADMIN, command
from .acl import WRONGPASS, authenticate

if TYPE_CHECKING:
    from ..connection import Client

_WRONG = fixed("WRONG", "ERR", "Wrong CLUSTER subcommand or number of arguments")


# HELLO protover...: Redis's handshake; l: Redis answers it while loading
@command("hello", -1, "rFal", shown=(1, "rF"),
         acl=("connection",),
         syntax='HELLO [protover [AUTH username password] [SETNAME name]]',
         summary=("Disque's HELLO: this node's ID and every known node (Redis's handshake when a "
                  'protocol version is given).'),
         reply='array: 1, my ID, then [ID, ip, port, priority] per node')
def hello(client: Client, args: list[bytes]) -> bytes:
    """HELLO: [1, my id, [id, ip, port, priority] for every known node].

    With arguments it is Redis 6's handshake (`HELLO protover [AUTH user pass]
    [SETNAME name]`), which redis-py 8 sends on connect; Disque clients never do."""
    if len(args) > 1:
        return _handshake(client, args)
    if not client.authenticated and client.server.acl.auth_required:
        return b"-NOAUTH Authentication required.\r\n"
    admin = client.server.admin_service
    entries: list[object] = [1, admin.my_id().encode()]
    for node_id, ip, port, priority in admin.hello_nodes(client.local_ip):
        entries.append([node_id.encode(), ip.encode(), str(port).encode(),
                        str(priority).encode()])
    return reply.encode(entries)


@command("cluster", -2, "sr",
         acl=ADMIN,
         syntax=('CLUSTER MEET ip port | FORGET id | RESET [SOFT|HARD] | MYID | NODES | INFO | '
                 'SAVECONFIG | LEAVING [yes|no]'),
         summary="Manage the node's cluster membership.",
         reply='depends on the subcommand')
def cluster(client: Client, args: list[bytes]) -> bytes:
    """CLUSTER MEET ip port | FORGET id | RESET [SOFT|HARD] | MYID | NODES | INFO |
    SAVECONFIG | LEAVING [yes|no]"""
    sub = args[1].lower()
    argc = len(args)
    server = client.server
    membership = server.membership
    if sub == b"meet" and argc == 4:
        return _meet(client, args[2], args[3])
    if sub == b"forget" and argc == 3:
        node_id = args[2].decode("latin-1")
        if len(node_id) != 40:
            raise err("Invalid node identifier")
        if node_id == membership.myself.id:
            raise err("I tried hard but I can't forget myself...")
        if node_id not in membership.nodes:
            raise err(f"Unknown node {node_id}")
        assert server.bus is not None  # CLUSTER runs once the bus is up
        server.bus.forget(node_id)
        return reply.OK
    if sub == b"reset" and argc in (2, 3):
        mode = args[2].lower() if argc == 3 else b"soft"
        if mode not in (b"soft", b"hard"):
            raise err("syntax error")
        server.cluster_reset(hard=mode == b"hard")
        return reply.OK
    if sub == b"myid" and argc == 2:
        return reply.bulk(membership.myself.id.encode())
    if sub == b"nodes" and argc == 2:
        return reply.bulk(server.admin_service.cluster_nodes(client.local_ip).encode())
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


def _meet(client: Client, ip_arg: bytes, port_arg: bytes) -> bytes:
    port = parse_int(port_arg)
    if port is None:
        raise err(f"Invalid TCP port specified: {port_arg.decode('latin-1')}")
    ip = ip_arg.decode("latin-1")
    try:
        ipaddress.ip_address(ip)
        valid = 0 < port <= 55535
    except ValueError:
        valid = False
    if not valid:
        raise err(f"Invalid node address specified: {ip}:{port}")
    bus = client.server.bus
    assert bus is not None  # CLUSTER runs once the bus is up
    if bus.closed and not is_loopback(ip):
        raise err(meet_refusal(ip, port))
    bus.meet(ip, port)
    return reply.OK


def _handshake(client: Client, args: list[bytes]) -> bytes:
    version = parse_int(args[1])
    if version is None:
        raise err("Protocol version is not an integer or out of range")
    if version not in (2, 3):
        raise DisqError("NOPROTO", "unsupported protocol version")
    j = 2
    while j < len(args):
        opt = args[j].lower()
        if opt == b"auth" and j + 2 < len(args):
            if authenticate(client, args[j + 1].decode("latin-1"), args[j + 2]) is None:
                raise WRONGPASS
            j += 3
        elif opt == b"setname" and j + 1 < len(args):
            client.name = args[j + 1]
            j += 2
        else:
            raise err(f"Syntax error in HELLO option '{args[j].decode('latin-1')}'")
    if not client.authenticated and client.server.acl.auth_required:
        return b"-NOAUTH HELLO must be called with the client already authenticated, " \
               b"otherwise the HELLO <proto> AUTH <user> <pass> option can be used to " \
               b"authenticate the client and select the RESP protocol version at the same " \
               b"time\r\n"
    client.resp3 = version == 3
    fields = [b"server", b"disque", b"version", VERSION.encode(), b"proto", version,
              b"id", client.id, b"mode", b"cluster", b"role", b"master", b"modules", []]
    if version == 3:
        return b"%7\r\n" + b"".join(reply.encode(f) for f in fields)
    return reply.encode(fields)
