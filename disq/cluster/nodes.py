"""A known node (ClusterNode), its flags (NodeFlag) and the cluster config file.

nodes.conf holds one line per node, `<id> <ip:port> <flags> <ping_sent> <pong_recv>
<link-state>`: Disque's format, the same text CLUSTER NODES shows. The line flagged
`myself` keeps this node's identity across restarts. The flags' Disque names
("fail?", ...) appear only there, in CLUSTER NODES and on the bus (gossip, the frame
header): inside, they are a NodeFlag.

After the node lines, the file may hold records of other parts of the node that every
node keeps and a restart needs without the AOF (CRON's schedules): one per line,
`<kind> <payload>`, the kind a lowercase word (never a node ID), the payload base64
of the part's own encoding. `read_config` skips them, `read_records` returns them.
"""

from __future__ import annotations

import base64
import enum
import os
import time
from collections.abc import Iterable
from typing import Any, Final

from ..ids import is_valid_node_id
from .clocks import PeerClock


class NodeFlag(enum.IntFlag):
    MYSELF = 1
    PFAIL = 2  # "fail?": no PONG for cluster-node-timeout
    FAIL = 4  # a majority of the cluster reported it PFAIL
    HANDSHAKE = 8  # met by address, its ID not known yet
    NOADDR = 16  # its address was taken over by another node ID
    LEAVING = 32  # CLUSTER LEAVING yes
    MEET = 64  # internal, never shown: its handshake starts with a MEET (CLUSTER MEET)


NO_FLAGS: Final = NodeFlag(0)
# Disque's names, in the order CLUSTER NODES and nodes.conf list them.
FLAG_NAMES: tuple[tuple[NodeFlag, str], ...] = (
    (NodeFlag.MYSELF, "myself"), (NodeFlag.PFAIL, "fail?"), (NodeFlag.FAIL, "fail"),
    (NodeFlag.HANDSHAKE, "handshake"), (NodeFlag.NOADDR, "noaddr"),
    (NodeFlag.LEAVING, "leaving"))
_BY_NAME: Final = {name: flag for flag, name in FLAG_NAMES}
# The same flags as plain ints, for the paths taken per message or per frame: an
# IntFlag operation costs ~1 us on CPython 3.11, an int one ~20 ns.
MYSELF_BIT: Final = NodeFlag.MYSELF.value
HANDSHAKE_BIT: Final = NodeFlag.HANDSHAKE.value
LEAVING_BIT: Final = NodeFlag.LEAVING.value
FAILING_BITS: Final = NodeFlag.PFAIL.value | NodeFlag.FAIL.value


def flag_names(flags: NodeFlag) -> list[str]:
    """Disque's names of the flags, in Disque's order (MEET has none)."""
    return [name for flag, name in FLAG_NAMES if flag in flags]


def parse_flag_names(names: Iterable[object]) -> NodeFlag:
    """The flags named (as gossip or nodes.conf name them); anything else is ignored."""
    flags = NO_FLAGS
    for name in names:
        if type(name) is str:
            flags |= _BY_NAME.get(name, NO_FLAGS)
    return flags


# HELLO priorities
PRIORITY_OK: Final = 1
PRIORITY_NO_LINK: Final = 5
PRIORITY_PFAIL: Final = 10
PRIORITY_FAIL: Final = 100


class ClusterNode:
    """A node as this one knows it. `flags` is a NodeFlag kept as the int `flag_bits`,
    which the per-message paths test (see MYSELF_BIT)."""

    __slots__ = ("id", "ip", "port", "flag_bits", "ping_sent", "pong_received", "linked",
                 "connected", "link", "fail_reports", "last_connect", "created", "fail_time",
                 "clock", "unreached")

    def __init__(self, node_id: str, ip: str, port: int, flags: NodeFlag = NO_FLAGS,
                 created: int = 0) -> None:
        self.id = node_id
        self.ip = ip
        self.port = port
        self.flag_bits: int = flags.value
        self.ping_sent = 0  # ms of the PING still unanswered, 0 = none in flight
        self.pong_received = 0  # ms of the last PONG
        # The outbound link, as Membership sees it: `linked` from the moment it asks
        # for one (Connect) until the bus reports it lost; `connected` while it is up.
        self.linked = False
        self.connected = False
        self.link: Any = None  # that link (disq.cluster.bus.Link): the bus's, not Membership's
        self.fail_reports: dict[str, int] = {}  # reporter id -> ms of its report
        self.last_connect = 0  # ms of the last connection attempt
        self.created = created  # ms (a handshake not answered in time is given up)
        self.fail_time = 0
        self.clock: PeerClock | None = None  # its clock offset, from my PINGs' PONGs
        # The bus's last try to reach it failed (its dial, or a link closed before it
        # carried messages); False until then, and again once a link that did carry
        # messages dropped (it is dialled again): BusPort.reaching_peers.
        self.unreached = False

    @property
    def flags(self) -> NodeFlag:
        return NodeFlag(self.flag_bits)

    @flags.setter
    def flags(self, flags: NodeFlag) -> None:
        self.flag_bits = flags.value

    @property
    def is_myself(self) -> bool:
        return bool(self.flag_bits & MYSELF_BIT)

    def priority(self) -> int:
        flags = self.flags
        if flags & (NodeFlag.FAIL | NodeFlag.LEAVING):
            return PRIORITY_FAIL
        if NodeFlag.PFAIL in flags:
            return PRIORITY_PFAIL
        if not self.is_myself and not self.connected:
            return PRIORITY_NO_LINK
        return PRIORITY_OK

    def describe(self, shown_ip: str | None = None) -> str:
        """Its CLUSTER NODES (and nodes.conf) line."""
        flags = ",".join(flag_names(self.flags)) or "noflags"
        link = "connected" if self.is_myself or self.connected else "disconnected"
        ip = self.ip or ("" if NodeFlag.NOADDR in self.flags else shown_ip or "")
        return f"{self.id} {ip}:{self.port} {flags} {self.ping_sent} {self.pong_received} {link}"


def read_config(config_path: str) -> list[ClusterNode] | None:
    """The nodes of the cluster config file, None if there is none. A line that is not
    a node's stops the start (ValueError)."""
    if not os.path.exists(config_path):
        return None
    nodes = []
    now = int(time.time() * 1000)
    with open(config_path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            words = line.split()
            if not words or words[0].startswith("#") or words[0] == "vars" or (
                    _is_record_kind(words[0])):
                continue
            if len(words) < 3 or not is_valid_node_id(words[0]):
                raise ValueError(f"Unrecoverable error: corrupted cluster config file "
                                 f"'{config_path}' at line {lineno}")
            ip, _, port_text = words[1].rpartition(":")
            flags = parse_flag_names(words[2].split(","))  # ("noflags": none)
            nodes.append(ClusterNode(words[0], ip, int(port_text or 0),
                                     flags & ~NodeFlag.PFAIL, created=now))
    return nodes


def write_config(config_path: str, nodes: Iterable[ClusterNode],
                 records: Iterable[tuple[str, bytes]] = (), fsync: bool = True) -> None:
    """Save every node but those in handshake, then `records` ((kind, payload)
    pairs), atomically (a rename), fsynced unless told not to."""
    lines = [node.describe() for node in nodes if not node.flag_bits & HANDSHAKE_BIT]
    lines.extend(f"{kind} {base64.b64encode(payload).decode()}" for kind, payload in records)
    tmp = f"{config_path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, config_path)


def read_records(config_path: str) -> dict[str, list[bytes]]:
    """The records of the cluster config file by kind, in file order ({} if there is
    no file). A record whose payload is not base64 is skipped: its part decides what
    a bad payload means."""
    records: dict[str, list[bytes]] = {}
    try:
        fh = open(config_path, encoding="utf-8")
    except FileNotFoundError:
        return records
    with fh:
        for line in fh:
            words = line.split()
            if 1 <= len(words) <= 2 and _is_record_kind(words[0]):
                try:  # (an empty payload is no word at all)
                    payload = base64.b64decode(words[1] if len(words) == 2 else "",
                                               validate=True)
                except ValueError:
                    continue
                records.setdefault(words[0], []).append(payload)
    return records


def _is_record_kind(word: str) -> bool:
    return word.isalpha() and word.islower() and word != "vars" and (
        not is_valid_node_id(word))
