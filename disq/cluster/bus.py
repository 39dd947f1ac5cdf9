"""The node-to-node bus: the I/O around Membership (membership.py).

Every node listens on its client port + 10000 and keeps one outbound TCP link
(link.py) to each known node; a message goes out on the link to its target, and PONGs
answer on the link the PING came in on (as Redis Cluster does). ClusterBus accepts and
dials the links, hands the membership messages of each frame (PING, PONG, MEET, FAIL)
and a cron tick every CRON_MS to the Membership state machine, carries out the
actions it returns, and saves nodes.conf when it changed. The other messages go
straight to the handlers the replication layer registered (BusPort, port.py).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from ..exposure import HOW_TO_OPEN_THE_BUS, bus_hosts, far_peers_refusal, is_loopback
from ..ids import is_valid_node_id
from . import messages as m
from .actions import Abort, Action, Close, Connect, Reply, Send
from .clocks import to_ms
from .link import Link, Outbox
from .membership import ClusterNode, Membership
from .nodes import FAILING_BITS, HANDSHAKE_BIT, LEAVING_BIT, NodeFlag
from .port import Handler

__all__ = ["BUS_PORT_OFFSET", "CRON_MS", "ClusterBus", "Link", "now_ms"]

log = logging.getLogger("disq")

BUS_PORT_OFFSET: Final = 10000
CRON_MS: Final = 100
TLS_HANDSHAKE_TIMEOUT: Final = 10.0  # s (tls-cluster)
# A message sent now to a node so flagged would be sent in vain (BusPort.can_send).
_NOT_SENDABLE: Final = (NodeFlag.HANDSHAKE | NodeFlag.PFAIL | NodeFlag.FAIL | NodeFlag.NOADDR).value


def now_ms() -> int:
    return int(time.time() * 1000)


_time_ns = time.time_ns


class ClusterBus:
    """The I/O shell of Membership (membership.py): it listens, dials and keeps the
    links, feeds the membership messages of each frame and the cron to the state
    machine and carries out the actions it returns, saves nodes.conf when it is
    dirty. Implements BusPort (disq/cluster/port.py) for the replication layer."""

    def __init__(self, membership: Membership, bind: list[str], port: int,
                 node_timeout: Callable[[], int], loop: asyncio.AbstractEventLoop,
                 secret: str = "",
                 tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
                 clock_skew_warn: Callable[[], int] | None = None,
                 closed: bool = False) -> None:
        self.membership = membership
        membership.node_timeout = node_timeout  # ms, live (CONFIG SET)
        if clock_skew_warn is not None:
            membership.clock_skew_warn = clock_skew_warn  # ms, live too
        self.secret = secret  # cluster-secret: links must prove it (see Link)
        # tls-cluster: (accepting, connecting) contexts; the bus speaks TLS only.
        self.tls = tls
        # No secret, no TLS, no cluster-open-bus: the bus listens on loopback only and
        # dials loopback peers only (exposure.py).
        self.closed = closed
        self._refused_ips: set[str] = set()  # far peers a closed bus did not dial (logged)
        self.myself = membership.myself
        self.bind = bind
        self.port = port + BUS_PORT_OFFSET
        self.loop = loop
        self.handlers: dict[int, Handler] = {}
        self.inbound: set[Link] = set()
        self.servers: list[asyncio.AbstractServer] = []
        self.bytes_sent = 0
        self.bytes_received = 0
        # Added to the wall clock in the PING/PONG timestamps only (DEBUG
        # BUS-CLOCK-SHIFT): how a test skews a node's clock as its peers see it.
        self.clock_shift_us = 0
        self._cron: asyncio.TimerHandle | None = None
        self._save_scheduled = False
        self._changes_seen = membership.changes
        self._id_map: dict[str, str] | None = None
        self._reachable: list[ClusterNode] | None = None
        self._leaving: list[ClusterNode] | None = None
        # Known nodes not in handshake, myself included (Disque's cluster size): a
        # plain int, asked on every ADDJOB.
        self.cluster_size = membership.size()
        # Frames received from nodes flagged failing here (PFAIL / FAIL): they talk
        # again, which this node's membership tells only once one answers its PING
        # (ORDERKEY's owners take it as a topology change under way)
        self.failing_heard = 0
        # frame_prefix's cache, and what it was made of
        self._prefix = b""
        self._prefix_id = ""
        self._prefix_port = self._prefix_leaving = -1

    # -- life cycle ------------------------------------------------------------------
    async def start(self) -> None:
        if self.closed:
            far = [f"{node.ip}:{node.port}" for node in self.membership.nodes.values()
                   if node is not self.myself and node.ip and not is_loopback(node.ip)]
            if far:
                raise SystemExit(far_peers_refusal(far))
        hosts = bus_hosts(self.bind, self.closed)
        explicit = hosts != ["127.0.0.1", "::1"]
        for host in hosts:
            try:
                server = await self.loop.create_server(
                    lambda: Link(self, None), host, self.port, reuse_address=True,
                    family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                    **self._tls_options(0, ""))
            except OSError as exc:
                # The default bind skips an address the host lacks (no IPv6), as the
                # client listener does; a port in use is fatal, as in Disque.
                unavailable = exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
                if not explicit and unavailable:
                    log.warning("Could not listen on the cluster bus %s:%d (%s), skipping",
                                host, self.port, exc.strerror)
                    continue
                raise SystemExit(f"Could not listen on the cluster bus {host}:{self.port}: "
                                 f"{exc.strerror}") from None
            self.servers.append(server)
        if not self.servers:
            raise SystemExit(f"Could not listen on the cluster bus port {self.port}")
        if hosts != self.bind:
            log.warning("The cluster bus listens on %s port %d only: without cluster-secret "
                        "it is closed to other hosts. To form a cluster across hosts, %s.",
                        ", ".join(hosts), self.port, HOW_TO_OPEN_THE_BUS)
        self._cron = self.loop.call_later(CRON_MS / 1000, self._run_cron)

    def _tls_options(self, side: int, peer_ip: str) -> dict[str, Any]:
        """create_server (side 0) / create_connection (side 1) arguments for TLS."""
        if self.tls is None:
            return {}
        options = {"ssl": self.tls[side], "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT}
        if side:
            options["server_hostname"] = peer_ip  # (not checked: peers are known by IP)
        return options

    def stop(self) -> None:
        if self._cron is not None:
            self._cron.cancel()
        for server in self.servers:
            server.close()
        for node in self.membership.nodes.values():
            if node.link is not None:
                node.link.close()
        for link in list(self.inbound):
            link.close()

    # -- BusPort ---------------------------------------------------------------------
    def on(self, mtype: int, handler: Handler) -> None:
        self.handlers[mtype] = handler

    def send(self, node_id: str, mtype: int, *fields: object) -> bool:
        node = self.membership.nodes.get(node_id)
        if node is None or node is self.myself or not node.connected:
            return False
        node.link.send([mtype, *fields])
        self.membership.messages_sent += 1
        return True

    def can_send(self, node_id: str) -> bool:
        node = self.membership.nodes.get(node_id)
        return (node is not None and node is not self.myself and node.connected
                and node.link is not None and node.link.authenticated
                and not node.flag_bits & _NOT_SENDABLE)

    def send_batched(self, node_ids: Iterable[str], mtype: int, items: list[Any],
                     head: tuple[Any, ...] = ()) -> int:
        nodes = self.membership.nodes
        myself = self.myself
        key = (mtype, head) if head else mtype
        # Items that go to several peers are packed once (m.PACKED_ONCE), and so is
        # the head of the messages they start (for the links that have none this turn).
        once = mtype in m.PACKED_ONCE
        packed = m.pack_items(items) if once else b""
        packed_head: bytes | None = None
        sent = 0
        for node_id in node_ids:
            node = nodes.get(node_id)
            if node is None or node is myself or not node.connected:
                continue
            outbox: Outbox = node.link.outbox
            if not outbox.up:
                continue
            batch = outbox.batch(key)
            if batch is None:
                if once:
                    if packed_head is None:
                        packed_head = m.pack_head(mtype, head)
                    batch = m.PackedMessage(packed_head, 1 + len(head))
                else:
                    batch = [mtype, *head]
                outbox.new_batch(key, batch, mtype == m.REPLJOB)
            if isinstance(batch, m.PackedMessage):
                batch.add(packed, len(items))
                outbox.packed_bytes += len(packed)
            else:
                batch += items
            sent += 1
        self.membership.messages_sent += sent
        return sent

    def copy_mark(self, node_id: str) -> object:
        node = self.membership.nodes.get(node_id)
        return None if node is None or node.link is None else node.link.mark()

    def copy_left(self, mark: object) -> bool | None:
        return mark[0].sent_up_to(mark[1]) if type(mark) is tuple else None

    def unsent_bytes(self, node_id: str) -> int:
        node = self.membership.nodes.get(node_id)
        return 0 if node is None or node.link is None else node.link.unsent()

    def broadcast(self, mtype: int, *fields: object,
                  node_ids: Iterable[str] | None = None, urgent: bool = False) -> int:
        nodes = self.membership.nodes
        targets = map(nodes.get, node_ids) if node_ids is not None else nodes.values()
        message = [mtype, *fields]
        sent = 0
        myself = self.myself
        for node in targets:
            if node is None or node is myself or not node.connected or (
                    node.flag_bits & HANDSHAKE_BIT):
                continue
            node.link.send(message)
            if urgent:
                node.link.flush()
            sent += 1
        self.membership.messages_sent += sent
        return sent

    def reachable_peers(self) -> list[ClusterNode]:
        """Cached until membership or a link changes (asked for every job)."""
        if self._reachable is None:
            self._reachable = self.membership.reachable()
        return self._reachable

    def reaching_peers(self) -> list[str]:
        """Asked on DEDUP's asking path only (not per job)."""
        return [n.id for n in self.reachable_peers()
                if not n.unreached and not self.can_send(n.id)]

    def leaving_peers(self) -> list[str]:
        """Asked on DEDUP's asking path only; cached as `reachable_peers` (usually
        empty)."""
        if self._leaving is None:
            self._leaving = self.membership.leaving_peers()
        return [n.id for n in self._leaving if self.can_send(n.id)]

    def known_ids(self) -> list[str]:
        return [n.id for n in self.membership.nodes.values()
                if n is not self.myself and not n.flag_bits & HANDSHAKE_BIT]

    def known_id_map(self) -> dict[str, str]:
        """Rebuilt when membership changes, so a lookup per received job is cheap."""
        if self._id_map is None:
            self._id_map = self.membership.known_id_map()
        return self._id_map

    def clock_offset(self, node_id: str) -> int | None:
        estimate = self._clock_estimate(node_id)
        return None if estimate is None else estimate[0]

    def clock_uncertainty(self, node_id: str) -> int | None:
        estimate = self._clock_estimate(node_id)
        return None if estimate is None else estimate[1]

    def _clock_estimate(self, node_id: str) -> tuple[int, int] | None:
        node = self.membership.nodes.get(node_id)
        if node is None or node.clock is None:
            return None
        return node.clock.estimate_ms(self.clock_us())

    def peer_clocks(self) -> list[tuple[ClusterNode, tuple[int, int, int] | None]]:
        """Every known peer (not in handshake) and its clock estimate, if any:
        (offset ms, uncertainty ms, round trip us of the sample), for INFO and
        /metrics."""
        now_us = self.clock_us()
        peers: list[tuple[ClusterNode, tuple[int, int, int] | None]] = []
        for node in self.membership.nodes.values():
            if node is self.myself or node.flag_bits & HANDSHAKE_BIT:
                continue
            estimate = None if node.clock is None else node.clock.estimate(now_us)
            if estimate is None:
                peers.append((node, None))
            else:
                offset_us, error_us, rtt_us = estimate
                peers.append((node, (*to_ms(offset_us, error_us), rtt_us)))
        return peers

    def clock_us(self) -> int:
        """The wall clock in us, as this node's PINGs and PONGs carry it."""
        return _time_ns() // 1000 + self.clock_shift_us

    def _topology_changed(self) -> None:
        """Forget what is derived from membership and links."""
        self._id_map = self._reachable = self._leaving = None
        self.cluster_size = self.membership.size()

    def my_flags(self) -> list[str]:
        """The flags every frame announces about its sender."""
        return ["leaving"] if self.myself.flag_bits & LEAVING_BIT else []

    def frame_prefix(self) -> bytes:
        """What every frame this node sends starts with (messages.frame_prefix),
        packed again only when this node's ID, port or flags changed."""
        myself = self.myself
        leaving = myself.flag_bits & LEAVING_BIT
        if (myself.id != self._prefix_id or myself.port != self._prefix_port
                or leaving != self._prefix_leaving):
            self._prefix = m.frame_prefix(myself.id, myself.port, self.my_flags())
            self._prefix_id, self._prefix_port = myself.id, myself.port
            self._prefix_leaving = leaving
        return self._prefix

    # -- carrying out what membership decides ------------------------------------------
    def _carry_out(self, actions: list[Action], origin: Link | None = None) -> None:
        """The actions of a Membership call, then what its changes ask for: the caches
        to drop, nodes.conf to save (at the end of this loop turn, as Disque saves it
        in beforeSleep: a kill -9 just after a node is learned must not lose it)."""
        membership = self.membership
        try:
            for action in actions:
                match action:
                    case Send(node, message):
                        if node.connected and node.link is not None:
                            node.link.send(message)
                            membership.messages_sent += 1
                    case Reply(message):
                        if origin is not None and origin.transport is not None:
                            origin.pong_queued = True
                            origin.send(message)
                            membership.messages_sent += 1
                    case Connect(node):
                        self._dial(node)
                    case Close(node):
                        if node.link is not None:
                            node.link.close()
                    case Abort(node):
                        if node.link is not None:
                            node.link.abort()
        finally:
            if membership.changes != self._changes_seen:
                self._changes_seen = membership.changes
                self._topology_changed()
            if membership.dirty and not self._save_scheduled:
                self._save_scheduled = True
                self.loop.call_soon(self._save_scheduled_now)

    def _save_scheduled_now(self) -> None:
        self._save_scheduled = False
        self._save_if_dirty()

    def _save_if_dirty(self) -> None:
        membership = self.membership
        if membership.dirty:
            membership.dirty = False
            try:
                membership.save()
            except OSError as exc:
                log.warning("Could not save the cluster config: %s", exc)

    def meet(self, ip: str, port: int) -> None:
        """CLUSTER MEET ip port."""
        self._carry_out(self.membership.meet(ip, port, now_ms()))

    def forget(self, node_id: str) -> None:
        """CLUSTER FORGET id."""
        self._carry_out(self.membership.forget(node_id, now_ms()))

    def reset(self) -> None:
        """CLUSTER RESET: forget every other node."""
        self._carry_out(self.membership.reset())

    def set_my_id(self, node_id: str) -> None:
        """A new identity (CLUSTER RESET HARD). With cluster-secret, a link proved the
        old one, and its peer takes frames in that name only: every link starts again."""
        self.membership.set_my_id(node_id)
        self._carry_out([])
        if self.secret:
            for link in [*self.inbound, *(n.link for n in self.membership.nodes.values())]:
                if link is not None:
                    link.close()

    def _run_cron(self) -> None:
        try:
            self._carry_out(self.membership.tick(now_ms(), self.clock_us()))
            self._save_if_dirty()  # a fallback: changes are saved as they happen
        except Exception as exc:
            log.error("Error in the cluster cron: %r", exc, exc_info=exc)
        self._cron = self.loop.call_later(CRON_MS / 1000, self._run_cron)

    # -- links -----------------------------------------------------------------------
    def _dial(self, node: ClusterNode) -> None:
        """Open the outbound link to a node (in the background)."""
        if self.closed and not is_loopback(node.ip):
            if node.ip not in self._refused_ips:  # (tried again every cron tick)
                self._refused_ips.add(node.ip)
                log.warning("Not connecting to %s:%d: the cluster bus is closed "
                            "(loopback only) without cluster-secret", node.ip, node.port)
            node.unreached = True
            self.membership.link_lost(node)
            return
        link = Link(self, node)
        node.link = link

        async def dial() -> None:
            sock = None
            try:
                infos = await self.loop.getaddrinfo(node.ip, node.port + BUS_PORT_OFFSET,
                                                    type=socket.SOCK_STREAM)
                family, _, proto, _, address = infos[0]
                sock = socket.socket(family, socket.SOCK_STREAM, proto)
                # As Redis's outbound sockets: SO_REUSEADDR, so that the ephemeral port
                # this link takes never stops a node on this host from binding its bus
                # port (Linux lets a listener share a port with a connected socket only
                # when both set it; many nodes start at once in test suites).
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setblocking(False)
                await self.loop.sock_connect(sock, address)
                await self.loop.create_connection(lambda: link, sock=sock,
                                                  **self._tls_options(1, node.ip))
                sock = None  # the transport's now
            except (OSError, OverflowError, IndexError):  # Overflow: a port > 65535
                pass
            finally:  # failed, or given up (cancelled by Link.abort)
                link.dial = None
                if sock is not None:
                    sock.close()
                if node.link is link and link.transport is None:
                    node.link = None
                    node.unreached = True  # (a link that connected went by link_down)
                    self.membership.link_lost(node)

        link.dial = self.loop.create_task(dial())

    def link_up(self, link: Link) -> None:
        node = link.node
        assert node is not None
        self._topology_changed()
        self._carry_out(self.membership.link_up(node, link.local_ip, now_ms(),
                                                self.clock_us()))

    def link_down(self, link: Link) -> None:
        self.inbound.discard(link)
        node = link.node
        if node is not None and node.link is link:
            self._topology_changed()
            node.link = None
            # A link that carried messages and dropped: the peer was reached, it is
            # dialled again (and waited for until that fails). One closed before it
            # could (cluster-secret), or given up (stuck): a failed try.
            node.unreached = link.given_up or not link.authenticated
            self.membership.link_lost(node)

    # -- receiving ---------------------------------------------------------------------
    def receive_frame(self, link: Link, sender_id: str, sender_port: int,
                      sender_flags: list[Any], batch: list[list[Any]]) -> None:
        """Handle the messages of one frame. The sender is checked and looked up once;
        membership messages (PING, PONG, MEET, FAIL) go to Membership, the others
        straight to their handler."""
        if not is_valid_node_id(sender_id) or not 0 < sender_port <= 55535:
            # Not a Disque node (its header always holds a 40-char name): such a
            # sender must never reach the node table, nor nodes.conf.
            log.warning("Closing bus link from %s: bad sender %r port %r", link.peer_ip,
                        sender_id[:64], sender_port)
            link.close()
            return
        membership = self.membership
        handlers = self.handlers
        sender: ClusterNode | None = None
        for message in batch:
            if link.transport is None or link.transport.is_closing():
                return  # closed by a previous message
            mtype = message[0]
            try:
                if mtype <= m.FAIL:
                    self._carry_out(membership.receive(
                        link, sender_id, sender_port, sender_flags, mtype, message[1:],
                        now_ms(), self.clock_us()), link)
                    sender = None  # membership may have changed: look it up again
                    continue
                membership.messages_received += 1
                if sender is None:
                    sender = membership.nodes.get(sender_id)
                    if sender is None or sender is self.myself:
                        sender = None
                        continue  # not (yet) a member: ignored, as Redis Cluster does
                    if membership.note_sender(sender, sender_port, sender_flags):
                        self._carry_out([])
                    if sender.flag_bits & FAILING_BITS:  # it talks: a heal, before the
                        self.failing_heard += 1  # PONG that clears its flag here
                handler = handlers.get(mtype)
                if handler is not None:
                    handler(sender, message[1:])
            except Exception as exc:  # a bad message must not take the node down
                log.error("Error handling a bus message from %s: %r", link.peer_ip, exc,
                          exc_info=exc)
