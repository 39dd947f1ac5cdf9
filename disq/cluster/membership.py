"""Cluster membership as a sans-IO state machine: the nodes this node knows, the
handshake with a node met by address, gossip, failure detection, and when nodes.conf
must be saved. No sockets, no event loop, no clock: the bus (bus.py) feeds it what
arrives and the time, and carries out the actions it returns (send, connect, close
or drop a link: actions.py); tests drive it directly (tests/unit/test_membership.py).

`CLUSTER MEET ip port` starts a handshake with a node known only by its address; its
real ID arrives with its PONG. PINGs carry gossip about a few other nodes, so meeting
one node of a cluster is enough to learn all of them. A node whose PONG is late by
cluster-node-timeout is PFAIL ("fail?"), FAIL once a majority of the cluster reports
it, and cleared as soon as it answers again. PINGs carry the sender's wall clock and
PONGs echo it with the receiver's, from which each node estimates every peer's clock
offset (clocks.py) and warns when it exceeds clock-skew-warn-ms.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
from collections.abc import Callable, Iterable
from typing import Any, Final

from ..ids import new_node_id
from . import messages as m
from .actions import Abort, Action, Close, Connect, Origin, Reply, Send
from .clocks import PeerClock
from .nodes import (
    HANDSHAKE_BIT,
    LEAVING_BIT,
    NO_FLAGS,
    ClusterNode,
    NodeFlag,
    flag_names,
    parse_flag_names,
    read_config,
    write_config,
)

__all__ = ["ClusterNode", "Membership", "NodeFlag"]

log = logging.getLogger("disq")

GOSSIP_ENTRIES: Final = 3  # nodes described in each PING, PONG and MEET
GOSSIP_READ_MAX: Final = 16  # entries read from one message
FORGET_BLACKLIST_MS: Final = 60_000  # a forgotten node is not learned again for this long
DEFAULT_NODE_TIMEOUT: Final = 15_000  # ms (cluster-node-timeout)
DEFAULT_CLOCK_SKEW_WARN: Final = 100  # ms (clock-skew-warn-ms)
_MAX_TIMESTAMP: Final = 2**62  # (us) a larger PING/PONG timestamp is garbage: ignored

_PFAIL, _FAIL = NodeFlag.PFAIL, NodeFlag.FAIL
_FAILING: Final = NodeFlag.PFAIL | NodeFlag.FAIL
_GOSSIPED: Final = NodeFlag.PFAIL | NodeFlag.FAIL | NodeFlag.LEAVING
_UNREACHABLE: Final = (NodeFlag.HANDSHAKE | NodeFlag.LEAVING | NodeFlag.PFAIL | NodeFlag.FAIL
                | NodeFlag.MYSELF).value


def _is_ip(text: str) -> bool:
    """An IPv4 or IPv6 address, as gossip carries (Disque sends the peer's IP text)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class Membership:
    """The nodes this node knows (`nodes`, itself first) and the protocol that keeps
    them: `receive` (PING, PONG, MEET, FAIL), `tick` (the cron), `meet`, `forget`,
    `reset` and the bus's reports of its links (`link_up`, `link_lost`) each return
    the actions to carry out. `dirty`: nodes.conf is behind (`save`). `changes` counts
    the changes of who is known and their flags (the bus's caches follow it).

    Times: `now` is wall-clock ms; the calls that send or take PINGs and PONGs also
    take `now_us`, the wall clock in us they stamp and read (now * 1000 if omitted)."""

    def __init__(self, myself: ClusterNode, config_path: str,
                 node_timeout: Callable[[], int] = lambda: DEFAULT_NODE_TIMEOUT,
                 rng: random.Random | None = None,
                 clock_skew_warn: Callable[[], int] = lambda: DEFAULT_CLOCK_SKEW_WARN) -> None:
        self.myself = myself
        self.nodes: dict[str, ClusterNode] = {myself.id: myself}
        self.config_path = config_path
        self.node_timeout = node_timeout  # ms, read when needed (CONFIG SET changes it)
        self.clock_skew_warn = clock_skew_warn  # ms (0: no warning), read the same way
        self.random = rng if rng is not None else random.Random()
        self.messages_sent = 0  # counted by the bus, shown by CLUSTER INFO
        self.messages_received = 0
        self.restored = False  # the node's identity came from the config file
        self.blacklist: dict[str, int] = {}  # forgotten node id -> ms until ignored
        self.dirty = False
        self.changes = 0
        self._ticks = 0
        # What other parts keep in nodes.conf after the nodes (CRON's schedules): read
        # on every save.
        self.records: Callable[[], Iterable[tuple[str, bytes]]] = tuple

    # -- the node table and nodes.conf ----------------------------------------------------
    @classmethod
    def load_or_create(cls, config_path: str, port: int) -> Membership:
        """Read the cluster config file, or create it with a new node ID."""
        known = read_config(config_path) or []
        mine = [node for node in known if node.is_myself]
        myself = mine[-1] if mine else ClusterNode(new_node_id(), "", port, NodeFlag.MYSELF)
        myself.port = port
        membership = cls(myself, config_path)
        membership.restored = bool(mine)
        for node in known:
            if not node.is_myself:
                membership.nodes[node.id] = node
        if not mine:
            membership.save()
        return membership

    def save(self, fsync: bool = True) -> None:
        write_config(self.config_path, self.nodes.values(), self.records(), fsync)

    def size(self) -> int:
        """Known nodes not in handshake, myself included (Disque's cluster size)."""
        return sum(1 for n in self.nodes.values() if not n.flag_bits & HANDSHAKE_BIT)

    def reachable(self) -> list[ClusterNode]:
        """Peers a job can go to: not in handshake, PFAIL/FAIL or leaving (Disque's
        clusterUpdateReachableNodes). A peer whose link just dropped still counts until
        it is PFAIL: messages to it are dropped meanwhile and sent again by their
        senders, so a quick restart loses nothing."""
        return [n for n in self.nodes.values() if not n.flag_bits & _UNREACHABLE]

    def reachable_peers(self) -> int:
        return len(self.reachable())

    def leaving_peers(self) -> list[ClusterNode]:
        """Peers that are leaving (CLUSTER LEAVING) and not in handshake or PFAIL/FAIL:
        they take no new job, but hold theirs (and their DEDUP keys) until acked."""
        return [n for n in self.nodes.values()
                if n.flag_bits & _UNREACHABLE == LEAVING_BIT]

    def known_id_map(self) -> dict[str, str]:
        """Every known node ID but those in handshake, myself included, mapped to itself
        (one shared string per ID)."""
        return {n.id: n.id for n in self.nodes.values() if not n.flag_bits & HANDSHAKE_BIT}

    def describe_all(self, shown_ip: str) -> str:
        """CLUSTER NODES; `shown_ip` stands for my address while I do not know it."""
        return "".join(
            n.describe(shown_ip if n.is_myself else None) + "\n" for n in self.nodes.values())

    @property
    def leaving(self) -> bool:
        return bool(self.myself.flag_bits & LEAVING_BIT)

    def set_leaving(self, leaving: bool) -> None:
        """CLUSTER LEAVING: every frame announces it from now on (not saved at once)."""
        if leaving:
            self.myself.flags |= NodeFlag.LEAVING
        else:
            self.myself.flags &= ~NodeFlag.LEAVING

    def set_my_id(self, node_id: str) -> None:
        """A new identity (CLUSTER RESET HARD)."""
        del self.nodes[self.myself.id]
        self.myself.id = node_id
        self.nodes[node_id] = self.myself
        self._changed()

    def _changed(self) -> None:
        """Who is known or their flags changed: nodes.conf is to be saved."""
        self.dirty = True
        self.changes += 1

    # -- links -------------------------------------------------------------------------
    def link_up(self, node: ClusterNode, local_ip: str, now: int,
                now_us: int | None = None) -> list[Action]:
        """The outbound link to `node` is up: its first message is a MEET for a
        CLUSTER MEET handshake, else a PING."""
        if not node.linked:
            return []  # forgotten meanwhile
        node.connected = True
        if not self.myself.ip and local_ip:
            self.myself.ip = local_ip
        return self._ping(node, now, now_us,
                          m.MEET if NodeFlag.MEET in node.flags else m.PING)

    @staticmethod
    def link_lost(node: ClusterNode) -> None:
        """The outbound link to `node` is gone (or its dial failed). An unanswered PING
        still counts: `ping_sent` stays."""
        node.linked = False
        node.connected = False

    def _connect(self, node: ClusterNode, now: int, actions: list[Action]) -> None:
        if node.linked or not node.ip or not node.port:
            return
        node.last_connect = now
        if node.ping_sent == 0 and NodeFlag.HANDSHAKE not in node.flags:
            # As Redis queues a PING on a link still connecting: a node that cannot
            # be reached at all becomes PFAIL after the node timeout too.
            node.ping_sent = now
        node.linked = True
        actions.append(Connect(node))

    def _ping(self, node: ClusterNode, now: int, now_us: int | None,
              mtype: int = m.PING) -> list[Action]:
        if not node.connected:
            return []
        if node.ping_sent == 0:
            node.ping_sent = now
        return [Send(node, [mtype, self.gossip(), now * 1000 if now_us is None else now_us])]

    def gossip(self) -> list[list[Any]]:
        """A few random other nodes, the way PING/PONG spread membership (the wire
        form: flag names sorted)."""
        candidates = [n for n in self.nodes.values()
                      if n is not self.myself and not n.flag_bits & HANDSHAKE_BIT]
        picked = self.random.sample(candidates, min(GOSSIP_ENTRIES, len(candidates)))
        return [[n.id, n.ip, n.port, sorted(flag_names(n.flags & _GOSSIPED)), n.ping_sent,
                 n.pong_received] for n in picked]

    # -- receiving -----------------------------------------------------------------------
    def note_sender(self, sender: ClusterNode, sender_port: int, sender_flags: list[Any]) -> bool:
        """What every frame's header says about its (known) sender: its port and
        whether it leaves. Called per frame, hence int flags. True if that changed
        membership."""
        if sender.port != sender_port:
            sender.port = sender_port
        if "leaving" in sender_flags:
            if not sender.flag_bits & LEAVING_BIT:
                sender.flag_bits |= LEAVING_BIT
                self._changed()
                return True
        elif sender.flag_bits & LEAVING_BIT:
            sender.flag_bits &= ~LEAVING_BIT
            self._changed()
            return True
        return False

    def receive(self, origin: Origin, sender_id: str, sender_port: int, sender_flags: list[Any],
                mtype: int, fields: list[Any], now: int,
                now_us: int | None = None) -> list[Action]:
        """A membership message (PING, PONG, MEET or FAIL) from a sender whose header
        was checked (a valid node ID and port)."""
        if now_us is None:
            now_us = now * 1000
        self.messages_received += 1
        actions: list[Action] = []
        nodes = self.nodes
        via = origin.node
        if via is not None and mtype == m.PONG:
            if NodeFlag.HANDSHAKE in via.flags:
                self._handshake_done(via, sender_id, actions)
            elif sender_id != via.id:
                self._address_taken_over(via, actions)
                return actions
        sender = nodes.get(sender_id)
        if mtype == m.MEET and sender is None and sender_id != self.myself.id:
            if sender_id in self.blacklist:
                return actions
            sender = ClusterNode(sender_id, origin.peer_ip, sender_port, created=now)
            nodes[sender_id] = sender
            self._changed()
            self._connect(sender, now, actions)
        if mtype in (m.PING, m.MEET):
            # A MEET names this node at the address it came to (as Redis Cluster): a
            # node restarted elsewhere with its nodes.conf learns its new address.
            if origin.local_ip and (not self.myself.ip or mtype == m.MEET):
                if self.myself.ip and self.myself.ip != origin.local_ip:
                    log.info("This node's address is now %s (was %s).", origin.local_ip,
                             self.myself.ip)
                    self._changed()
                self.myself.ip = origin.local_ip
            # One PONG a turn on a link answers all its PINGs (a frame of 3-byte
            # PINGs would queue ~1 KB of PONG each).
            if not origin.pong_queued:
                pong = [m.PONG, self.gossip()]
                sent_us = fields[1] if len(fields) > 1 else None
                if type(sent_us) is int and 0 < sent_us < _MAX_TIMESTAMP:
                    pong += (sent_us, now_us)  # (none for a PING without a valid time)
                actions.append(Reply(pong))
        if sender is None or sender is self.myself:
            return actions  # not (yet) a member: ignored, as Redis Cluster does
        self.note_sender(sender, sender_port, sender_flags)
        if mtype == m.PONG and via is sender:
            sender.ping_sent = 0
            sender.pong_received = now
            if sender.flags & _FAILING:
                if _FAIL in sender.flags:
                    log.info("Clear FAIL state for node %s: it is reachable again.", sender.id)
                sender.flags &= ~_FAILING
                sender.fail_reports.clear()
                self._changed()
            if len(fields) >= 3:
                self._clock_sample(sender, fields[1], fields[2], now_us)
        if mtype in (m.PING, m.PONG, m.MEET):
            if fields and isinstance(fields[0], list):
                self._process_gossip(sender, fields[0], now, actions)
        elif mtype == m.FAIL and fields and isinstance(fields[0], str):
            self._mark_failed(fields[0], now, False, actions)
        return actions

    def _clock_sample(self, node: ClusterNode, sent_us: object, peer_us: object,
                      now_us: int) -> None:
        """A PONG's timestamps: my PING's, echoed, and the peer's clock."""
        if not (type(sent_us) is int and type(peer_us) is int
                and 0 < sent_us < _MAX_TIMESTAMP and 0 < peer_us < _MAX_TIMESTAMP):
            return
        clock = node.clock
        if clock is None:
            clock = node.clock = PeerClock()
        if not clock.add(sent_us, peer_us, now_us):
            return
        limit = self.clock_skew_warn()
        offset, uncertainty = clock.estimate_ms(now_us) or (0, 0)
        if limit and abs(offset) > limit:
            if not clock.warned:
                clock.warned = True
                log.warning("Clock of node %s is %+d ms (+/- %d ms) off this node's, over "
                            "clock-skew-warn-ms (%d): keep the nodes' clocks in sync (NTP).",
                            node.id, offset, uncertainty, limit)
        elif clock.warned:
            clock.warned = False
            log.info("Clock of node %s is back within clock-skew-warn-ms: %+d ms (+/- %d ms).",
                     node.id, offset, uncertainty)

    def _handshake_done(self, node: ClusterNode, real_id: object,
                        actions: list[Action]) -> None:
        """The PONG of a node we met by address: learn its ID."""
        nodes = self.nodes
        if not isinstance(real_id, str) or len(real_id) != 40 or real_id == self.myself.id:
            self._forget(node, actions)  # we met ourselves, or garbage
            return
        existing = nodes.get(real_id)
        if existing is not None and existing is not node:  # known already by its name
            if (existing.ip, existing.port) != (node.ip, node.port):
                # it answered at the address met: it lives there now
                self._moved(existing, node.ip, node.port, actions)
            self._forget(node, actions)
            return
        del nodes[node.id]
        node.id = real_id
        node.flags &= ~(NodeFlag.HANDSHAKE | NodeFlag.MEET)
        nodes[real_id] = node
        log.info("Handshake with node %s completed (%s:%d).", real_id, node.ip, node.port)
        self._changed()

    def _moved(self, node: ClusterNode, ip: str, port: int, actions: list[Action]) -> None:
        """A known node is at another address now: its link to the old one is closed,
        the next tick dials the new one (as Redis Cluster's nodeUpdateAddressIfNeeded)."""
        log.info("Node %s is now at %s:%d (was %s:%d).", node.id, ip, port, node.ip or "-",
                 node.port)
        node.ip, node.port = ip, port
        node.flags &= ~NodeFlag.NOADDR
        if node.linked:
            actions.append(Close(node))
        self._changed()

    def _address_taken_over(self, node: ClusterNode, actions: list[Action]) -> None:
        """A PONG from another node ID on a known node's link: the address now belongs
        to another node (e.g. restarted without its config). As Redis Cluster does,
        the known node keeps its ID but loses its address (`noaddr`) and its link, so
        it turns PFAIL then FAIL and can be forgotten; the new ID is met as any node."""
        log.info("Node %s at %s:%d answers with another ID: its address is stale.",
                 node.id, node.ip, node.port)
        node.flags |= NodeFlag.NOADDR
        node.ip, node.port = "", 0
        actions.append(Close(node))
        self._changed()

    def _process_gossip(self, sender: ClusterNode, entries: list[Any], now: int,
                        actions: list[Action]) -> None:
        nodes = self.nodes
        for entry in entries[:GOSSIP_READ_MAX]:
            if not (isinstance(entry, list) and len(entry) >= 4 and isinstance(entry[0], str)
                    and isinstance(entry[1], str) and isinstance(entry[2], int)
                    and isinstance(entry[3], list)):
                continue
            node_id, ip, port = entry[:3]
            if node_id == self.myself.id or len(node_id) != 40 or (ip and not _is_ip(ip)):
                continue  # (an address that is not an IP would end up in nodes.conf)
            node = nodes.get(node_id)
            if node is None:
                if node_id in self.blacklist or not ip or not 0 < port < 55536:
                    continue
                # As Disque: a handshake even when a known node has that address
                # (it may have a new ID after CLUSTER RESET HARD); meet() skips
                # addresses already in handshake. Not my own address, though.
                if not (ip == self.myself.ip and port == self.myself.port):
                    self._meet(ip, port, now, False, actions)
                continue
            if NodeFlag.HANDSHAKE in sender.flags:
                continue
            reported = parse_flag_names(entry[3])
            if reported & _FAILING:
                node.fail_reports[sender.id] = now
                self._check_failure(node, now, actions)
            else:
                node.fail_reports.pop(sender.id, None)
            if not node.ip and ip:
                if NodeFlag.NOADDR in node.flags:
                    # As Redis Cluster: a stale address comes back only for a node
                    # that failed here while the sender reaches it at that address.
                    if not node.flags & _FAILING or reported & (_FAILING | NodeFlag.NOADDR):
                        continue
                    node.flags &= ~NodeFlag.NOADDR
                node.ip, node.port = ip, port

    # -- membership changes ----------------------------------------------------------------
    def meet(self, ip: str, port: int, now: int) -> list[Action]:
        """CLUSTER MEET: a handshake with the node at ip:port, starting with a MEET."""
        actions: list[Action] = []
        self._meet(ip, port, now, True, actions)
        return actions

    def _meet(self, ip: str, port: int, now: int, meet: bool, actions: list[Action]) -> None:
        """A handshake with the node at ip:port (CLUSTER MEET, or gossip), under a
        temporary ID until its PONG gives the real one."""
        for node in self.nodes.values():
            if NodeFlag.HANDSHAKE in node.flags and node.ip == ip and node.port == port:
                return  # already in progress
        flags = NodeFlag.HANDSHAKE | (NodeFlag.MEET if meet else NO_FLAGS)
        temp = ClusterNode(os.urandom(20).hex(), ip, port, flags, created=now)
        self.nodes[temp.id] = temp
        self._connect(temp, now, actions)

    def forget(self, node_id: str, now: int) -> list[Action]:
        """CLUSTER FORGET: gossip does not bring it back for FORGET_BLACKLIST_MS."""
        actions: list[Action] = []
        node = self.nodes.get(node_id)
        if node is not None:
            self.blacklist[node_id] = now + FORGET_BLACKLIST_MS
            self._forget(node, actions)
        return actions

    def reset(self) -> list[Action]:
        """CLUSTER RESET: forget every other node (the blacklist too)."""
        actions: list[Action] = []
        for node in list(self.nodes.values()):
            if node is not self.myself:
                self._forget(node, actions)
        self.blacklist.clear()
        return actions

    def _forget(self, node: ClusterNode, actions: list[Action]) -> None:
        if self.nodes.get(node.id) is node:
            del self.nodes[node.id]
        if node.linked:
            actions.append(Close(node))
        self.link_lost(node)  # (the node is out of the table: nothing waits for that)
        if NodeFlag.HANDSHAKE not in node.flags:
            self._changed()

    # -- failure detection -------------------------------------------------------------
    def _check_failure(self, node: ClusterNode, now: int, actions: list[Action]) -> None:
        """PFAIL here + reports from a majority of the cluster = FAIL (Disque's rule:
        size/2 + 1, this node counted). A report is valid for twice the node timeout."""
        if _PFAIL not in node.flags or _FAIL in node.flags:
            return
        validity = 2 * self.node_timeout()
        reports = {k: t for k, t in node.fail_reports.items() if now - t <= validity}
        node.fail_reports = reports
        if len(reports) + 1 >= self.size() // 2 + 1:
            self._mark_failed(node.id, now, True, actions)

    def _mark_failed(self, node_id: str, now: int, broadcast: bool,
                     actions: list[Action]) -> None:
        """FAIL, by quorum here (then told to every node) or by a FAIL message."""
        node = self.nodes.get(node_id)
        if node is None or node is self.myself or _FAIL in node.flags:
            return
        log.info("Marking node %s as failing (quorum reached).", node_id)
        node.flags = node.flags & ~_PFAIL | _FAIL
        node.fail_time = now
        self._changed()
        if broadcast:
            message = [m.FAIL, node_id]
            actions.extend(Send(n, message) for n in self.nodes.values()
                           if n is not self.myself and n.connected
                           and not n.flag_bits & HANDSHAKE_BIT)

    def tick(self, now: int, now_us: int | None = None) -> list[Action]:
        """The cron (every bus.CRON_MS): give up unanswered handshakes, (re)connect,
        PING, drop links that look stuck, flag PFAIL, and check PFAIL nodes for FAIL."""
        actions: list[Action] = []
        timeout = self.node_timeout()
        self._ticks += 1
        for node_id, until in list(self.blacklist.items()):
            if until < now:
                del self.blacklist[node_id]
        nodes = list(self.nodes.values())
        for node in nodes:
            if node is self.myself:
                continue
            handshake = NodeFlag.HANDSHAKE in node.flags
            if handshake and now - node.created > max(timeout, 1000):
                self._forget(node, actions)  # nobody answered the handshake
                continue
            if not node.linked:
                # a dial every tick, as Disque's clusterCron: a restarted node is
                # PONGed, and any PFAIL on it cleared, at once
                self._connect(node, now, actions)
            elif node.connected and node.ping_sent == 0 and (
                    now - node.pong_received > timeout // 2):
                actions += self._ping(node, now, now_us)
            elif node.ping_sent and now - node.ping_sent > timeout // 2 and (
                    now - node.last_connect > timeout // 2):
                # No PONG for a while on a link up, or a dial still unanswered: the
                # link may be stuck. Drop it and reconnect; ping_sent stays.
                actions.append(Abort(node))
            if handshake:
                continue
            if node.ping_sent and now - node.ping_sent > timeout and not (
                    node.flags & _FAILING):
                log.info("*** NODE %s possibly failing", node.id)
                node.flags |= _PFAIL
                self._changed()
            if _PFAIL in node.flags:
                self._check_failure(node, now, actions)
        if self._ticks % 10 == 0:  # once a second, PING the least recently heard of 5
            live = [n for n in nodes if n is not self.myself and n.connected
                    and n.ping_sent == 0]
            if live:
                oldest = min(self.random.sample(live, min(5, len(live))),
                             key=lambda n: n.pong_received)
                actions += self._ping(oldest, now, now_us)
        return actions
