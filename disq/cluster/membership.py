"""Known nodes and the cluster config file (Disque's nodes.conf format).

Each line is `<id> <ip:port> <flags> <ping_sent> <pong_recv> <link-state>`, the same
text CLUSTER NODES shows. The line flagged `myself` keeps this node's identity across
restarts.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..ids import is_valid_node_id, new_node_id

# HELLO priorities
PRIORITY_OK = 1
PRIORITY_NO_LINK = 5
PRIORITY_PFAIL = 10
PRIORITY_FAIL = 100


class ClusterNode:
    __slots__ = ("id", "ip", "port", "flags", "ping_sent", "pong_received", "connected",
                 "link", "fail_reports", "last_connect", "created", "fail_time")

    def __init__(self, node_id: str, ip: str, port: int, flags: set[str] | None = None) -> None:
        self.id = node_id
        self.ip = ip
        self.port = port
        self.flags: set[str] = flags if flags is not None else set()
        self.ping_sent = 0  # ms of the PING still unanswered, 0 = none in flight
        self.pong_received = 0  # ms of the last PONG
        self.connected = False  # the outbound link is up
        self.link: Any = None  # the outbound bus link (disq.cluster.bus.Link)
        self.fail_reports: dict[str, int] = {}  # reporter id -> ms of its report
        self.last_connect = 0  # ms of the last connection attempt
        self.created = int(time.time() * 1000)
        self.fail_time = 0

    @property
    def is_myself(self) -> bool:
        return "myself" in self.flags

    def priority(self) -> int:
        if self.flags & {"fail", "leaving"}:
            return PRIORITY_FAIL
        if "fail?" in self.flags:
            return PRIORITY_PFAIL
        if not self.is_myself and not self.connected:
            return PRIORITY_NO_LINK
        return PRIORITY_OK

    def describe(self, shown_ip: str | None = None) -> str:
        order = ("myself", "fail?", "fail", "handshake", "noaddr", "leaving")
        flags = ",".join(f for f in order if f in self.flags) or "noflags"
        link = "connected" if self.is_myself or self.connected else "disconnected"
        ip = self.ip or ("" if "noaddr" in self.flags else shown_ip or "")
        return f"{self.id} {ip}:{self.port} {flags} {self.ping_sent} {self.pong_received} {link}"


_UNREACHABLE = frozenset({"handshake", "leaving", "fail?", "fail", "myself"})


class Membership:
    """The nodes this node knows, itself first."""

    def __init__(self, myself: ClusterNode, config_path: str) -> None:
        self.myself = myself
        self.nodes: dict[str, ClusterNode] = {myself.id: myself}
        self.config_path = config_path
        self.messages_sent = 0
        self.messages_received = 0
        self.restored = False  # the node's identity came from the config file

    @classmethod
    def load_or_create(cls, config_path: str, port: int) -> Membership:
        """Read the cluster config file, or create it with a new node ID."""
        others: list[ClusterNode] = []
        myself: ClusterNode | None = None
        if os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    words = line.split()
                    if not words or words[0].startswith("#") or words[0] == "vars":
                        continue
                    if len(words) < 3 or not is_valid_node_id(words[0]):
                        raise ValueError(
                            f"Unrecoverable error: corrupted cluster config file "
                            f"'{config_path}' at line {lineno}")
                    ip, _, port_text = words[1].rpartition(":")
                    flags = set() if words[2] == "noflags" else set(words[2].split(","))
                    flags.discard("fail?")
                    node = ClusterNode(words[0], ip, int(port_text or 0), flags)
                    if node.is_myself:
                        myself = node
                    else:
                        others.append(node)
        created = myself is None
        if myself is None:
            myself = ClusterNode(new_node_id(), "", port, {"myself"})
        myself.port = port
        membership = cls(myself, config_path)
        membership.restored = not created
        for node in others:
            membership.nodes[node.id] = node
        if created:
            membership.save()
        return membership

    def set_my_id(self, node_id: str) -> None:
        del self.nodes[self.myself.id]
        self.myself.id = node_id
        self.nodes[node_id] = self.myself

    def save(self) -> None:
        lines = [node.describe() for node in self.nodes.values()
                 if "handshake" not in node.flags]
        tmp = f"{self.config_path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.config_path)

    def size(self) -> int:
        return sum(1 for n in self.nodes.values() if "handshake" not in n.flags)

    def reachable(self) -> list[ClusterNode]:
        """Peers a job can go to: not in handshake, PFAIL/FAIL or leaving (Disque's
        clusterUpdateReachableNodes). A peer whose link just dropped still counts until
        it is PFAIL: messages to it are dropped meanwhile and sent again by their
        senders, so a quick restart loses nothing."""
        return [n for n in self.nodes.values() if not (n.flags & _UNREACHABLE)]

    def reachable_peers(self) -> int:
        return len(self.reachable())

    def describe_all(self, shown_ip: str) -> str:
        return "".join(
            n.describe(shown_ip if n.is_myself else None) + "\n" for n in self.nodes.values())
