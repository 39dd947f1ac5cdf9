"""The server's clients as a whole: admission (maxclients, maxclients-per-ip, for RESP
and the HTTP port's connections), client-rate-limit, MONITOR, CLIENT PAUSE, idle
clients (timeout) and client-output-buffer-limit. A part of `Server` (`server.clients`).

`connected` holds the RESP connections; the HTTP port's are counted in
`http_connections` (its routes call the services directly: no client of their own)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from ..config import Config
from .limits import ConnectionsPerIp, IpLimited
from .process import adjust_open_files_limit
from .reactions import reacts_to

if TYPE_CHECKING:
    from .connection import Client
    from .hotstate import HotState

log = logging.getLogger("disq")


class ClientRegistry:
    """The server's clients, their admission and limits (`server.clients`)."""

    __slots__ = ("config", "hot", "loop", "connected", "_next_client_id",
                 "connections_received", "rejected_connections", "per_ip",
                 "http_connections", "rejected_commands_per_ip",
                 "rejected_commands_rate", "backlogged", "paused", "_unpause_timer")

    def __init__(self, config: Config, hot: HotState) -> None:
        self.config = config
        self.hot = hot
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs
        self.connected: dict[int, Client] = {}
        self._next_client_id = 0
        self.connections_received = 0
        self.rejected_connections = 0
        # maxclients-per-ip's count: RESP and HTTP connections
        self.per_ip: ConnectionsPerIp[IpLimited] = ConnectionsPerIp(config.maxclients_per_ip)
        self.http_connections = 0  # open connections to the HTTP port (http/connections.py)
        self.rejected_commands_per_ip = 0  # commands refused by each limit (INFO stats)
        self.rejected_commands_rate = 0
        # Clients whose replies pile up unread (over the transport's high-water mark)
        # -> when they passed the soft output buffer limit (0.0: they have not).
        self.backlogged: dict[Client, float] = {}
        # CLIENT PAUSE (hot.clients_paused_until): the clients holding requests
        # meanwhile, resumed when it passes.
        self.paused: set[Client] = set()
        self._unpause_timer: asyncio.TimerHandle | None = None

    # -- clients -----------------------------------------------------------------------
    def connection_count(self) -> int:
        """Open connections, as maxclients counts them: RESP's and the HTTP port's."""
        return len(self.connected) + self.http_connections

    def client_connected(self, client: Client) -> None:
        self.connections_received += 1
        if self.connection_count() >= self.config.maxclients:
            self.rejected_connections += 1
            client.transport.write(b"-ERR max number of clients reached\r\n")  # type: ignore
            client.close()
            return
        self._next_client_id += 1
        client.id = self._next_client_id
        self.connected[client.id] = client
        if client.ip and not self.per_ip.add(client.ip, client):
            log.log(15, "Client %s over maxclients-per-ip (%d): its commands get -BUSY",
                    client.addr, self.config.maxclients_per_ip)
            client.set_over_ip_limit(True)
        if self.config.client_rate_limit:
            client.set_rate_limit(self.config.client_rate_limit)
        sock = client.transport.get_extra_info("socket")  # type: ignore[union-attr]
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.config.tcp_keepalive:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass

    def client_disconnected(self, client: Client) -> None:
        self.connected.pop(client.id, None)
        self.backlogged.pop(client, None)
        if client.ip:
            self._left_ip(client.ip, client)

    def _left_ip(self, ip: str, conn: IpLimited) -> None:
        for other in self.per_ip.remove(ip, conn):
            other.set_over_ip_limit(False)

    # -- the HTTP port's connections (http/connections.py) -------------------------------
    def http_admission(self, conn: IpLimited, ip: str) -> tuple[str, str] | None:
        """A new connection to the HTTP port: None if it is taken, else the (code,
        message) of its 503. It may take half of maxclients at most (RESP keeps the
        rest), and counts in maxclients-per-ip as a RESP connection does (`ip` "":
        not counted per IP, as the metrics port's connections are: http/metricsport.py)."""
        from .http.connections import http_limit  # (aiohttp: only with an HTTP or metrics port)

        self.connections_received += 1
        cfg = self.config
        per_ip = cfg.maxclients_per_ip
        share = http_limit(cfg.maxclients)
        if self.http_connections >= share:
            refusal = ("MAXCLIENTS", f"the HTTP port holds its share of maxclients ({share} "
                                     f"connections of {cfg.maxclients}): try again later")
        elif self.connection_count() >= cfg.maxclients:
            refusal = ("MAXCLIENTS", "max number of clients reached")
        elif ip and per_ip and self.per_ip.count(ip) >= per_ip:
            refusal = ("BUSY", f"too many connections from {ip} (maxclients-per-ip is "
                               f"{per_ip})")
        else:
            self.http_connections += 1
            if ip:
                self.per_ip.add(ip, conn)
            return None
        self.rejected_connections += 1
        return refusal

    def http_connection_closed(self, conn: IpLimited, ip: str) -> None:
        self.http_connections -= 1
        if ip:
            self._left_ip(ip, conn)

    # -- client limits: CONFIG SET ---------------------------------------------------------
    @reacts_to("maxclients")
    def _maxclients_changed(self, maxclients: int) -> None:
        if self.loop is not None:
            adjust_open_files_limit(self.config)  # may lower it again, as Redis does

    @reacts_to("maxclients-per-ip")
    def per_ip_limit_changed(self, limit: int) -> None:
        """maxclients-per-ip changed: at once for the connections already there."""
        within, over = self.per_ip.set_limit(limit)
        for client in within:
            client.set_over_ip_limit(False)
        for client in over:
            client.set_over_ip_limit(True)

    @reacts_to("client-rate-limit")
    def rate_limit_changed(self, rate: int) -> None:
        """client-rate-limit changed: every connection's bucket follows."""
        for client in self.connected.values():
            client.set_rate_limit(rate)

    # -- client-output-buffer-limit ------------------------------------------------------
    def output_backlogged(self, client: Client) -> None:
        """The client stopped reading its replies (its transport paused writing): from
        now on the cron checks it against the output buffer limits."""
        self.backlogged.setdefault(client, 0.0)
        if self.loop is not None:  # the hard limit at once (out of transport.write)
            self.loop.call_soon(self.check_output_limits, time.time(), (client,))

    def output_drained(self, client: Client) -> None:
        self.backlogged.pop(client, None)

    def check_output_limits(self, now: float, clients: Any = None) -> None:
        """Redis's checkClientOutputBufferLimits for normal clients: close one whose
        unread replies reach the hard limit, or stay over the soft limit for more than
        its seconds. The replies left are dropped (transport.abort)."""
        hard, soft, seconds = self.config.client_output_buffer_limit["normal"]
        if not (hard or soft):
            return
        for client in list(self.backlogged if clients is None else clients):
            transport = client.transport
            if transport is None or client not in self.backlogged:
                self.backlogged.pop(client, None)
                continue
            used = transport.get_write_buffer_size()
            if not (hard and used >= hard):
                if not (soft and used >= soft):
                    self.backlogged[client] = 0.0
                    continue
                since = self.backlogged[client]
                if not since:
                    self.backlogged[client] = now
                    continue
                if now - since <= seconds:
                    continue
            log.warning("Client %s scheduled to be closed ASAP for overcoming of output "
                        "buffer limits (%d bytes of replies unread).", client.info_line(),
                        used)
            self.backlogged.pop(client, None)
            client.closing = True
            transport.abort()

    def feed_monitors(self, client: Client, args: list[bytes]) -> None:
        """MONITOR: every command, as `+<sec>.<usec> [<addr>] "cmd" "arg" ...`."""
        if args[0].lower() in (b"auth", b"hello", b"acl"):
            args = args[:1]  # never show passwords (ACL SETUSER's >pw included)
        now = time.time()
        line = b"+%.6f [%s] %s\r\n" % (now, client.addr.encode(),
                                       b" ".join(map(quote_arg, args)))
        for monitor in list(self.hot.monitors):
            if monitor is not client:
                monitor.send(line)

    def biggest_input_buffer(self) -> int:
        return max((c.parser.buffered() for c in self.connected.values()), default=0)

    # -- CLIENT PAUSE ----------------------------------------------------------------------
    def pause_clients(self, ms: int) -> None:
        until = time.monotonic() + ms / 1000
        if until > self.hot.clients_paused_until:
            self.hot.clients_paused_until = until
            if self._unpause_timer is None:
                self._unpause_timer = self.loop.call_later(  # type: ignore[union-attr]
                    ms / 1000, self._unpause_clients)

    def _unpause_clients(self) -> None:
        self._unpause_timer = None
        left = self.hot.clients_paused_until - time.monotonic()
        if left > 0:  # extended by a later CLIENT PAUSE, or the loop's clock is coarser
            self._unpause_timer = self.loop.call_later(  # type: ignore[union-attr]
                left, self._unpause_clients)
            return
        self.hot.clients_paused_until = 0.0
        paused, self.paused = self.paused, set()
        for client in paused:
            client.resume_after_pause()

    def reset_counters(self) -> None:
        """CONFIG RESETSTAT: the connections and refusals counted."""
        self.connections_received = self.rejected_connections = 0
        self.rejected_commands_per_ip = self.rejected_commands_rate = 0

    def close_idle(self, now: float) -> None:
        limit = self.config.timeout
        for client in list(self.connected.values()):
            if not client.blocked and now - client.last_interaction > limit:
                log.log(15, "Closing idle client")
                client.close()


def quote_arg(arg: bytes) -> bytes:
    """An argument as Redis's sdscatrepr shows it: in double quotes, escaped."""
    out = bytearray(b'"')
    for c in arg:
        if c in (0x22, 0x5C):
            out += b"\\" + bytes([c])
        elif c == 10:
            out += b"\\n"
        elif c == 13:
            out += b"\\r"
        elif c == 9:
            out += b"\\t"
        elif 32 <= c < 127:
            out.append(c)
        else:
            out += b"\\x%02x" % c
    out += b'"'
    return bytes(out)
