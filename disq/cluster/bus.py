"""The node-to-node bus: links, handshakes, gossip and failure detection.

Every node listens on its client port + 10000 and keeps one outbound TCP link to each
known node; a message goes out on the link to its target, and PONGs answer on the
link the PING came in on (as Redis Cluster does). Messages for one link are coalesced
and leave in one write at the end of the loop turn, so pipelined replicated ADDJOBs
cost one syscall per peer per turn, not one per job.

Membership: `CLUSTER MEET ip port` starts a handshake with a node known only by its
address; its real ID arrives with its PONG. PINGs carry gossip about a few other
nodes, so meeting one node of a cluster is enough to learn all of them. A node whose
PONG is late by cluster-node-timeout is PFAIL ("fail?"), FAIL once a majority of the
cluster reports it, and cleared as soon as it answers again.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import random
import socket
import ssl
import time
from collections.abc import Callable, Iterable

from ..ids import is_valid_node_id
from . import messages as m
from .membership import ClusterNode, Membership
from .port import Handler

log = logging.getLogger("disq")

BUS_PORT_OFFSET = 10000
CRON_MS = 100
GOSSIP_ENTRIES = 3
FORGET_BLACKLIST_MS = 60_000
TLS_HANDSHAKE_TIMEOUT = 10.0  # s (tls-cluster)
# Output queued for a peer that does not read it, beyond which the link is dropped
# (and reconnected): a stuck peer costs bounded memory. The largest frame a peer
# accepts is well under it, so a healthy link never gets there.
LINK_SENDBUF_LIMIT = 4 * m.MAX_FRAME
AUTH_TIMEOUT_S = 5.0  # a link that has not proven the cluster secret by then is closed
# Which side proves: a proof is bound to the prover's role, so a nonce reflected back
# on another link (to make this node prove it) is useless to an impostor.
_CONNECTOR, _ACCEPTOR = b"disq-bus-connector", b"disq-bus-acceptor"
_NOT_SENDABLE = frozenset({"handshake", "fail?", "fail", "noaddr"})


def _is_ip(text: str) -> bool:
    """An IPv4 or IPv6 address, as gossip carries (Disque sends the peer's IP text)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def now_ms() -> int:
    return int(time.time() * 1000)


class Link(asyncio.Protocol):
    """One bus connection. Outbound links belong to the node they reach; inbound ones
    only receive (and carry PONGs back)."""

    def __init__(self, bus: ClusterBus, node: ClusterNode | None) -> None:
        self.bus = bus
        self.node = node  # the target of an outbound link, None when inbound
        self.transport: asyncio.Transport | None = None
        # cluster-secret: until the peer proved it, only handshake frames (see _authenticate).
        self.authenticated = not bus.secret
        self.reader = m.FrameReader(m.MAX_FRAME if self.authenticated
                                    else m.MAX_HANDSHAKE_FRAME)
        self.out: list[list] = []
        # Messages of this turn that more items may join (ClusterBus.send_batched),
        # by type (and head): [message, its index in `out`].
        self.batches: dict[object, list] = {}
        # `out`'s length after its last message that is not a batch: a batch before
        # it takes no more items, which would overtake that message. Batches may pass
        # each other (copies, confirmations, queries of different jobs and keys).
        self.fence = 0
        self.flush_scheduled = False
        self.pong_queued = False  # a PONG waits in `out`: the PINGs of this turn have it
        self.peer_ip = ""
        self.local_ip = ""
        # cluster-secret: nothing is sent or handled until the peer proved it knows it.
        self.nonce = b""
        self.proved = False  # this side answered the peer's AUTH (once only)
        self._auth_timer: asyncio.TimerHandle | None = None
        self.dial: asyncio.Task | None = None  # an outbound link still connecting

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.peer_ip = peer[0] if isinstance(peer, tuple) else ""
        self.local_ip = sock[0] if isinstance(sock, tuple) else ""
        raw = transport.get_extra_info("socket")
        if raw is not None:
            try:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if not self.authenticated:
            self.nonce = os.urandom(16)
            self._write([[m.AUTH, self.nonce]])
            self._auth_timer = self.bus.loop.call_later(AUTH_TIMEOUT_S, self._auth_timed_out)
        if self.node is not None:
            self.bus.link_up(self)
        else:
            self.bus.inbound.add(self)

    def data_received(self, data: bytes) -> None:
        self.bus.bytes_received += len(data)
        frames = self.reader.feed(data)  # decoded one by one: auth changes the limit
        try:
            for _, sender_id, sender_port, sender_flags, batch in frames:
                if self.transport is None or self.transport.is_closing():
                    return  # closed by a previous frame (e.g. a bad sender)
                if not self.authenticated:
                    batch = self._authenticate(batch)
                    if not batch:
                        continue
                self.bus.receive_frame(self, sender_id, sender_port, sender_flags, batch)
        except m.FrameError as exc:
            if self.authenticated:
                log.warning("Closing bus link from %s: %s", self.peer_ip, exc)
            else:
                log.warning("Closing bus link %s %s: %s before proving the cluster secret.",
                            "from" if self.node is None else "to", self.peer_ip, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.bus.link_down(self)

    # -- cluster-secret ----------------------------------------------------------------
    def _authenticate(self, batch: list[list]) -> list[list]:
        """Handle the messages of a link not authenticated yet: answer the peer's
        nonce with a proof, check the peer's proof of ours. Anything else before that
        closes the link. Returns the messages after a valid proof (to handle)."""
        secret = self.bus.secret.encode()
        inbound = self.node is None
        for i, message in enumerate(batch):
            mtype, fields = message[0], message[1:]
            if mtype == m.AUTH and fields and type(fields[0]) is bytes and not self.proved:
                self.proved = True  # one proof per link: nothing to repeat it for
                role = _ACCEPTOR if inbound else _CONNECTOR
                proof = hmac.new(secret, role + fields[0], hashlib.sha256).digest()
                self._write([[m.AUTH_PROOF, proof]])
                continue
            if mtype == m.AUTH_PROOF and fields and type(fields[0]) is bytes:
                role = _CONNECTOR if inbound else _ACCEPTOR
                wanted = hmac.new(secret, role + self.nonce, hashlib.sha256).digest()
                if hmac.compare_digest(fields[0], wanted):
                    self.authenticated = True
                    self.reader.max_frame = m.MAX_FRAME
                    if self._auth_timer is not None:
                        self._auth_timer.cancel()
                        self._auth_timer = None
                    if self.out and not self.flush_scheduled:  # held until now
                        self.flush_scheduled = True
                        self.bus.loop.call_soon(self.flush)
                    return batch[i + 1:]
            log.warning("Closing bus link %s %s: it did not prove the cluster secret.",
                        "from" if inbound else "to", self.peer_ip)
            self.close()
            return []
        return []

    def _auth_timed_out(self) -> None:
        self._auth_timer = None
        if not self.authenticated:
            log.warning("Closing bus link %s %s: no proof of the cluster secret in time.",
                        "from" if self.node is None else "to", self.peer_ip)
            self.close()

    def _write(self, messages: list[list]) -> None:
        """Send a frame at once, outside the per-turn queue (authentication)."""
        if self.transport is not None:
            bus = self.bus
            data = m.encode_frame(bus.myself.id, bus.myself.port, bus.my_flags(), messages)
            bus.bytes_sent += len(data)
            self.transport.write(data)

    def send(self, message: list) -> None:
        """Queue `[type, *fields]`; the link's queue leaves as one frame this turn."""
        if self.transport is None:
            return
        self.out.append(message)
        self.fence = len(self.out)
        self._flush_soon()

    def batch(self, key: object, mtype: int, head: tuple) -> list | None:
        """This turn's message `[mtype, *head, items...]` for `key` that items may
        still join (see `fence`), queued now if there is none; None if the link is
        down."""
        entry = self.batches.get(key)
        if entry is not None and entry[1] >= self.fence:
            return entry[0]
        if self.transport is None:
            return None
        message = [mtype, *head]
        self.batches[key] = [message, len(self.out)]
        self.out.append(message)
        self._flush_soon()
        return message

    def _flush_soon(self) -> None:
        """The queue leaves at the end of this loop turn, as one frame."""
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.bus.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if not self.authenticated:
            return  # held until the peer proved the cluster secret
        self.pong_queued = False
        if self.out and self.transport is not None:
            bus = self.bus
            data = m.encode_frame(bus.myself.id, bus.myself.port, bus.my_flags(), self.out)
            bus.bytes_sent += len(data)
            self.transport.write(data)
            if self.transport.get_write_buffer_size() > LINK_SENDBUF_LIMIT:
                log.warning("Dropping the bus link to %s: %d bytes wait for it to read.",
                            self.peer_ip, self.transport.get_write_buffer_size())
                self.abort()
        self.out = []
        self.fence = 0
        if self.batches:
            self.batches = {}

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        elif self.dial is not None:
            self.dial.cancel()

    def abort(self) -> None:
        """Drop the connection and what it still had to send, as Disque frees a link:
        close() would wait for a peer that does not read to take it, forever, keeping
        the link (so no reconnection) and queueing every later message for it. A link
        still connecting gives its dial up (SYNs nobody answers, as behind a firewall
        dropping packets, would keep it for the kernel's two minutes of retries)."""
        if self.transport is not None:
            self.transport.abort()
        elif self.dial is not None:
            self.dial.cancel()


class ClusterBus:
    """Implements BusPort (disq/cluster/port.py) for the replication layer."""

    def __init__(self, membership: Membership, bind: list[str], port: int,
                 node_timeout: Callable[[], int], loop: asyncio.AbstractEventLoop,
                 secret: str = "",
                 tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None) -> None:
        self.membership = membership
        self.secret = secret  # cluster-secret: links must prove it (see Link)
        # tls-cluster: (accepting, connecting) contexts; the bus speaks TLS only.
        self.tls = tls
        self.myself = membership.myself
        self.bind = bind
        self.port = port + BUS_PORT_OFFSET
        self.node_timeout = node_timeout
        self.loop = loop
        self.handlers: dict[int, Handler] = {}
        self.inbound: set[Link] = set()
        self.servers: list[asyncio.AbstractServer] = []
        self.blacklist: dict[str, int] = {}  # forgotten node id -> ms until ignored
        self.bytes_sent = 0
        self.bytes_received = 0
        self.on_membership_change: Callable[[], None] = lambda: None
        self._cron: asyncio.TimerHandle | None = None
        self._ticks = 0
        self._dirty = False
        self._id_map: dict[str, str] | None = None
        self._reachable: list[ClusterNode] | None = None
        self._size: int | None = None

    # -- life cycle ------------------------------------------------------------------
    async def start(self) -> None:
        explicit = self.bind != ["127.0.0.1", "::1"]
        for host in self.bind:
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
        self._cron = self.loop.call_later(CRON_MS / 1000, self._run_cron)

    def _tls_options(self, side: int, peer_ip: str) -> dict:
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
                and not node.flags & _NOT_SENDABLE)

    def send_batched(self, node_ids: Iterable[str], mtype: int, items: list,
                     head: tuple = ()) -> int:
        nodes = self.membership.nodes
        myself = self.myself
        key = (mtype, head) if head else mtype
        sent = 0
        for node_id in node_ids:
            node = nodes.get(node_id)
            if node is None or node is myself or not node.connected:
                continue
            batch = node.link.batch(key, mtype, head)
            if batch is None:
                continue
            batch += items
            sent += 1
        self.membership.messages_sent += sent
        return sent

    def broadcast(self, mtype: int, *fields: object,
                  node_ids: Iterable[str] | None = None, urgent: bool = False) -> int:
        nodes = self.membership.nodes
        targets = map(nodes.get, node_ids) if node_ids is not None else nodes.values()
        message = [mtype, *fields]
        sent = 0
        myself = self.myself
        for node in targets:
            if node is None or node is myself or not node.connected or (
                    "handshake" in node.flags):
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

    def known_ids(self) -> list[str]:
        return [n.id for n in self.membership.nodes.values()
                if n is not self.myself and "handshake" not in n.flags]

    def known_id_map(self) -> dict[str, str]:
        """Every known node ID, myself included, mapped to its one shared string;
        rebuilt when membership changes, so a lookup per received job is cheap."""
        if self._id_map is None:
            self._id_map = {n.id: n.id for n in self.membership.nodes.values()
                            if "handshake" not in n.flags}
        return self._id_map

    def size(self) -> int:
        if self._size is None:
            self._size = self.membership.size()
        return self._size

    def _topology_changed(self) -> None:
        """Forget what is derived from membership and links."""
        self._id_map = self._reachable = self._size = None

    def my_flags(self) -> list[str]:
        """The flags every frame announces about its sender."""
        return ["leaving"] if "leaving" in self.myself.flags else []

    # -- links -----------------------------------------------------------------------
    def connect(self, node: ClusterNode) -> None:
        """Open the outbound link to a node (in the background)."""
        if node.link is not None or not node.ip or not node.port:
            return
        node.last_connect = now_ms()
        if node.ping_sent == 0 and "handshake" not in node.flags:
            # As Redis queues a PING on a link still connecting: a node that cannot
            # be reached at all becomes PFAIL after the node timeout too.
            node.ping_sent = node.last_connect
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

        link.dial = self.loop.create_task(dial())

    def link_up(self, link: Link) -> None:
        node = link.node
        assert node is not None
        node.connected = True
        self._topology_changed()
        if not self.myself.ip and link.local_ip:
            self.myself.ip = link.local_ip
        # The first message on a new link: MEET for a handshake, else a PING.
        self.ping(node, m.MEET if "meet" in node.flags else m.PING)

    def link_down(self, link: Link) -> None:
        self.inbound.discard(link)
        node = link.node
        if node is not None and node.link is link:
            self._topology_changed()
            node.link = None
            node.connected = False  # ping_sent stays: an unanswered PING still counts

    def ping(self, node: ClusterNode, mtype: int = m.PING) -> None:
        if node.link is None or not node.connected:
            return
        if node.ping_sent == 0:
            node.ping_sent = now_ms()
        node.link.send([mtype, self._gossip()])
        self.membership.messages_sent += 1

    def _gossip(self) -> list[list]:
        """A few random other nodes, the way PING/PONG spread membership."""
        candidates = [n for n in self.membership.nodes.values()
                      if n is not self.myself and "handshake" not in n.flags]
        picked = random.sample(candidates, min(GOSSIP_ENTRIES, len(candidates)))
        return [[n.id, n.ip, n.port, sorted(n.flags & {"fail?", "fail", "leaving"}),
                 n.ping_sent, n.pong_received] for n in picked]

    # -- receiving ---------------------------------------------------------------------
    def receive_frame(self, link: Link, sender_id: str, sender_port: int,
                      sender_flags: list, batch: list[list]) -> None:
        """Handle the messages of one frame. The sender is checked and looked up once;
        membership messages (PING, PONG, MEET, FAIL) take the full path, the others go
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
                    self.receive(link, sender_id, sender_port, sender_flags, mtype,
                                 message[1:])
                    sender = None  # membership may have changed: look it up again
                    continue
                membership.messages_received += 1
                if sender is None:
                    sender = membership.nodes.get(sender_id)
                    if sender is None or sender is self.myself:
                        sender = None
                        continue  # not (yet) a member: ignored, as Redis Cluster does
                    self._note_sender(sender, sender_port, sender_flags)
                handler = handlers.get(mtype)
                if handler is not None:
                    handler(sender, message[1:])
            except Exception as exc:  # a bad message must not take the node down
                log.error("Error handling a bus message from %s: %r", link.peer_ip, exc,
                          exc_info=exc)

    def _note_sender(self, sender: ClusterNode, sender_port: int, sender_flags: list) -> None:
        """What every frame says about its sender: its port and whether it leaves."""
        if sender.port != sender_port:
            sender.port = sender_port
        if "leaving" in sender_flags:
            if "leaving" not in sender.flags:
                sender.flags.add("leaving")
                self._membership_changed()
        elif "leaving" in sender.flags:
            sender.flags.discard("leaving")
            self._membership_changed()

    def receive(self, link: Link, sender_id: str, sender_port: int, sender_flags: list,
                mtype: int, fields: list) -> None:
        """A membership message: PING, PONG, MEET or FAIL."""
        self.membership.messages_received += 1
        nodes = self.membership.nodes
        if link.node is not None and mtype == m.PONG:
            if "handshake" in link.node.flags:
                self._handshake_done(link.node, sender_id)
            elif sender_id != link.node.id:
                self._address_taken_over(link)
                return
        sender = nodes.get(sender_id)
        if mtype == m.MEET and sender is None and sender_id != self.myself.id:
            if sender_id in self.blacklist:
                return
            sender = ClusterNode(sender_id, link.peer_ip, sender_port)
            nodes[sender_id] = sender
            self._membership_changed()
            self.connect(sender)
        if mtype in (m.PING, m.MEET):
            if not self.myself.ip and link.local_ip:
                self.myself.ip = link.local_ip
            # PONG on the link the PING came in on; one a turn is the answer to all
            # (a frame of 3-byte PINGs would queue ~1 KB of PONG each).
            if link.transport is not None and not link.pong_queued:
                link.pong_queued = True
                link.send([m.PONG, self._gossip()])
                self.membership.messages_sent += 1
        if sender is None or sender is self.myself:
            return  # not (yet) a member: ignored, as Redis Cluster does
        self._note_sender(sender, sender_port, sender_flags)
        if mtype == m.PONG and link.node is sender:
            sender.ping_sent = 0
            sender.pong_received = now_ms()
            if sender.flags & {"fail?", "fail"}:
                if "fail" in sender.flags:
                    log.info("Clear FAIL state for node %s: it is reachable again.", sender.id)
                sender.flags -= {"fail?", "fail"}
                sender.fail_reports.clear()
                self._membership_changed()
        if mtype in (m.PING, m.PONG, m.MEET):
            if fields and isinstance(fields[0], list):
                self._process_gossip(sender, fields[0])
            return
        if mtype == m.FAIL and fields and isinstance(fields[0], str):
            self._mark_failed(fields[0], broadcast=False)

    def _handshake_done(self, node: ClusterNode, real_id: str) -> None:
        """The PONG of a node we met by address: learn its ID."""
        nodes = self.membership.nodes
        if not isinstance(real_id, str) or len(real_id) != 40 or real_id == self.myself.id:
            self._forget(node)  # we met ourselves, or garbage
            return
        if real_id in nodes and nodes[real_id] is not node:
            existing = nodes[real_id]  # known already under its real name
            if not existing.ip:
                existing.ip, existing.port = node.ip, node.port
            self._forget(node)
            return
        del nodes[node.id]
        node.id = real_id
        node.flags -= {"handshake", "meet"}
        nodes[real_id] = node
        self._topology_changed()
        log.info("Handshake with node %s completed (%s:%d).", real_id, node.ip, node.port)
        self._membership_changed()

    def _address_taken_over(self, link: Link) -> None:
        """A PONG from another node ID on a known node's link: the address now belongs
        to another node (e.g. restarted without its config). As Redis Cluster does,
        the known node keeps its ID but loses its address (`noaddr`) and its link, so
        it turns PFAIL then FAIL and can be forgotten; the new ID is met as any node."""
        node = link.node
        assert node is not None
        log.info("Node %s at %s:%d answers with another ID: its address is stale.",
                 node.id, node.ip, node.port)
        node.flags.add("noaddr")
        node.ip, node.port = "", 0
        link.close()
        self._membership_changed()

    def _process_gossip(self, sender: ClusterNode, entries: list) -> None:
        nodes = self.membership.nodes
        now = now_ms()
        for entry in entries[:16]:
            if not (isinstance(entry, list) and len(entry) >= 4 and isinstance(entry[0], str)
                    and isinstance(entry[1], str) and isinstance(entry[2], int)
                    and isinstance(entry[3], list)):
                continue
            node_id, ip, port, flags = entry[:4]
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
                    self.meet(ip, port, meet=False)
                continue
            if "handshake" in sender.flags:
                continue
            if "fail?" in flags or "fail" in flags:
                node.fail_reports[sender.id] = now
                self._check_failure(node)
            else:
                node.fail_reports.pop(sender.id, None)
            if not node.ip and ip:
                if "noaddr" in node.flags:
                    # As Redis Cluster: a stale address comes back only for a node
                    # that failed here while the sender reaches it at that address.
                    if not node.flags & {"fail?", "fail"} or (
                            {"noaddr", "fail?", "fail"}.intersection(flags)):
                        continue
                    node.flags.discard("noaddr")
                node.ip, node.port = ip, port

    # -- membership changes -------------------------------------------------------------
    def meet(self, ip: str, port: int, meet: bool = True) -> None:
        """Start a handshake with the node at ip:port (CLUSTER MEET, or gossip)."""
        for node in self.membership.nodes.values():
            if "handshake" in node.flags and node.ip == ip and node.port == port:
                return  # already in progress
        temp = ClusterNode(os.urandom(20).hex(), ip, port,
                           {"handshake", "meet"} if meet else {"handshake"})
        self.membership.nodes[temp.id] = temp
        self.connect(temp)

    def forget(self, node_id: str) -> None:
        node = self.membership.nodes.get(node_id)
        if node is not None:
            self.blacklist[node_id] = now_ms() + FORGET_BLACKLIST_MS
            self._forget(node)

    def _forget(self, node: ClusterNode) -> None:
        nodes = self.membership.nodes
        if nodes.get(node.id) is node:
            del nodes[node.id]
        if node.link is not None:
            node.link.close()
            node.link = None
        node.connected = False
        if "handshake" not in node.flags:
            self._membership_changed()

    def set_my_id(self, node_id: str) -> None:
        """A new identity (CLUSTER RESET HARD): what is derived from the old one goes."""
        self.membership.set_my_id(node_id)
        self._membership_changed()

    def reset(self) -> None:
        for node in list(self.membership.nodes.values()):
            if node is not self.myself:
                self._forget(node)
        self.blacklist.clear()

    def _membership_changed(self) -> None:
        self._topology_changed()
        if not self._dirty:
            # Saved at the end of this loop turn, as Disque saves nodes.conf in
            # beforeSleep: a kill -9 just after a node is learned must not lose it.
            self._dirty = True
            self.loop.call_soon(self._save_if_dirty)
        self.on_membership_change()

    def _save_if_dirty(self) -> None:
        if self._dirty:
            self._dirty = False
            try:
                self.membership.save()
            except OSError as exc:
                log.warning("Could not save the cluster config: %s", exc)

    # -- failure detection -----------------------------------------------------------
    def _check_failure(self, node: ClusterNode) -> None:
        """PFAIL here + reports from a majority of the cluster = FAIL (Disque's rule:
        size/2 + 1, this node counted)."""
        if "fail?" not in node.flags or "fail" in node.flags:
            return
        validity = 2 * self.node_timeout()
        now = now_ms()
        reports = {k: t for k, t in node.fail_reports.items() if now - t <= validity}
        node.fail_reports = reports
        needed = self.membership.size() // 2 + 1
        if len(reports) + 1 >= needed:
            self._mark_failed(node.id, broadcast=True)

    def _mark_failed(self, node_id: str, broadcast: bool) -> None:
        node = self.membership.nodes.get(node_id)
        if node is None or node is self.myself or "fail" in node.flags:
            return
        log.info("Marking node %s as failing (quorum reached).", node_id)
        node.flags.discard("fail?")
        node.flags.add("fail")
        node.fail_time = now_ms()
        self._membership_changed()
        if broadcast:
            self.broadcast(m.FAIL, node_id)

    def _run_cron(self) -> None:
        try:
            self._cron_tick()
        except Exception as exc:
            log.error("Error in the cluster cron: %r", exc, exc_info=exc)
        self._cron = self.loop.call_later(CRON_MS / 1000, self._run_cron)

    def _cron_tick(self) -> None:
        now = now_ms()
        timeout = self.node_timeout()
        self._ticks += 1
        for node_id, until in list(self.blacklist.items()):
            if until < now:
                del self.blacklist[node_id]
        nodes = list(self.membership.nodes.values())
        for node in nodes:
            if node is self.myself:
                continue
            if "handshake" in node.flags:
                if now - node.created > max(timeout, 1000):
                    self._forget(node)  # nobody answered the handshake
                    continue
            if node.link is None:
                if now - node.last_connect > min(1000, timeout // 2 or 1):
                    self.connect(node)
            elif node.connected and node.ping_sent == 0 and (
                    now - node.pong_received > timeout // 2):
                self.ping(node)
            elif node.ping_sent and now - node.ping_sent > timeout // 2 and (
                    now - node.last_connect > timeout // 2):
                # No PONG for a while on a link up, or a dial still unanswered: the
                # link may be stuck. Drop it and reconnect; ping_sent stays.
                node.link.abort()
            if "handshake" in node.flags:
                continue
            if node.ping_sent and now - node.ping_sent > timeout and not (
                    node.flags & {"fail?", "fail"}):
                log.info("*** NODE %s possibly failing", node.id)
                node.flags.add("fail?")
                self._membership_changed()
            if "fail?" in node.flags:
                self._check_failure(node)
        if self._ticks % 10 == 0:  # once a second, PING the least recently heard of 5
            live = [n for n in nodes if n is not self.myself and n.connected
                    and n.ping_sent == 0]
            if live:
                oldest = min(random.sample(live, min(5, len(live))),
                             key=lambda n: n.pong_received)
                self.ping(oldest)
        self._save_if_dirty()  # a fallback: changes are saved as they happen
