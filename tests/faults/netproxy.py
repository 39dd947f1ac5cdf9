"""A fault-injecting TCP proxy in front of every node, so links can be cut on loopback
without root.

Each node listens on its own loopback address (127.0.0.2, 127.0.0.3, ...; Linux routes
all of 127.0.0.0/8 to `lo`), and a proxy listens on 127.0.0.1 at the node's client port
and bus port (client port + 10000). Nodes are introduced with `CLUSTER MEET 127.0.0.1
<port>`, so every address they learn and gossip is a proxy's: each bus link goes
through the proxy of the node it reaches. Outbound bus connections leave from
127.0.0.1, so the proxy cannot tell the connecting node by its address; it reads the
first frame instead, whose header names the sender's node ID (disq/cluster/messages.py),
and then applies the rule for the (sender, destination) pair:

- `ok`: bytes flow both ways;
- `drop`: connections are reset and new ones closed after their first frame, as when a
  firewall rejects (the sender sees its link fail and reconnects, in vain);
- `stuck`: connections stay open but nothing is read or forwarded either way, a peer
  that accepts and never reads (a blackhole: TCP buffers fill, then the sender's
  writes queue up);
- `slow`: every chunk waits SLOW_S before it is forwarded, either way (a slow peer or
  a long path).

Healing sets every pair back to `ok`; stuck connections then deliver what they held.
The client port is forwarded untouched. Everything runs on one asyncio loop in a
daemon thread; the test thread calls the public methods.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
import threading
from collections.abc import Iterable

import msgpack

OK, DROP, STUCK, SLOW = "ok", "drop", "stuck", "slow"
SLOW_S = 0.2
_LEN = struct.Struct(">I")
CHUNK = 65536


class _Conn:
    """One proxied bus connection, from `src` (a node ID) to the node proxied at
    `port` (its ID may be learned after the connection is made)."""

    def __init__(self, src: str, port: int, writers: list[asyncio.StreamWriter]) -> None:
        self.src = src
        self.port = port
        self.writers = writers
        self.flowing = asyncio.Event()
        self.delay = 0.0  # s before each chunk is forwarded (`slow`)

    def abort(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


class Network:
    """Proxies for a set of nodes and the table of which links are cut."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="netproxy",
                                       daemon=True)
        self.thread.start()
        self.rules: dict[tuple[str, str], str] = {}  # (src id, dst id) -> mode
        self.conns: set[_Conn] = set()
        self.servers: list[asyncio.AbstractServer] = []
        self.node_ids: dict[int, str] = {}  # proxied client port -> node ID
        self.resets = 0  # connections reset or refused by a `drop` rule
        self.connections = 0  # bus connections proxied
        self.opened: collections.Counter[tuple[str, int]] = collections.Counter()

    def _run(self, coro: object, timeout: float = 10.0) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    # -- set-up ----------------------------------------------------------------------
    def add(self, port: int, host: str) -> None:
        """Proxy 127.0.0.1:port and :port+10000 to host:port and host:port+10000."""
        self._run(self._add(port, host))

    async def _add(self, port: int, host: str) -> None:
        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.CancelledError):  # cancelled by close()
                await self._splice(reader, writer, host, port, None)

        async def bus(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._splice(reader, writer, host, port + 10000, port)

        for listen, handler in ((port, client), (port + 10000, bus)):
            self.servers.append(await asyncio.start_server(handler, "127.0.0.1", listen,
                                                           reuse_address=True))

    def name(self, port: int, node_id: str) -> None:
        """The node behind the proxy at `port` has this ID (rules are by node ID)."""
        self.node_ids[port] = node_id

    def connections_from(self, src: str, port: int) -> int:
        """Bus connections node `src` opened to the node proxied at `port`."""
        return self.opened[(src, port)]

    def close(self) -> None:
        async def shut() -> None:
            for server in self.servers:
                server.close()
            for conn in list(self.conns):
                conn.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self._run(shut())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)

    # -- faults ----------------------------------------------------------------------
    def cut(self, side_a: Iterable[str], side_b: Iterable[str], mode: str = DROP) -> None:
        """Cut every link between the two groups of node IDs, both ways."""
        side_a, side_b = list(side_a), list(side_b)
        rules = {}
        for a in side_a:
            for b in side_b:
                rules[(a, b)] = rules[(b, a)] = mode
        self.loop.call_soon_threadsafe(self._apply, rules)

    def isolate(self, node_id: str, others: Iterable[str], mode: str = DROP) -> None:
        self.cut([node_id], [o for o in others if o != node_id], mode)

    def heal(self) -> None:
        self.loop.call_soon_threadsafe(self._heal)

    def _apply(self, rules: dict[tuple[str, str], str]) -> None:
        self.rules.update(rules)
        for conn in list(self.conns):
            mode = self.rules.get((conn.src, self.node_ids.get(conn.port, "")), OK)
            conn.delay = SLOW_S if mode == SLOW else 0.0
            if mode == DROP:
                self.resets += 1
                conn.abort()
            elif mode == STUCK:
                conn.flowing.clear()

    def _heal(self) -> None:
        self.rules.clear()
        for conn in self.conns:
            conn.delay = 0.0
            conn.flowing.set()

    # -- forwarding --------------------------------------------------------------------
    async def _splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      host: str, port: int, proxied: int | None) -> None:
        first = b""
        src = dst = ""
        proxied_port = proxied or 0
        if proxied is not None:  # a bus connection: who connects?
            try:
                first, src = await self._first_frame(reader)
            except (OSError, ValueError, asyncio.IncompleteReadError):
                writer.transport.abort()
                return
            dst = self.node_ids.get(proxied, "")
            if self.rules.get((src, dst)) == DROP:
                self.resets += 1
                writer.transport.abort()
                return
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.transport.abort()
            return
        conn = _Conn(src, proxied_port, [writer, up_writer])
        mode = self.rules.get((src, dst), OK)
        if mode != STUCK:
            conn.flowing.set()
        if mode == SLOW:
            conn.delay = SLOW_S
        self.conns.add(conn)
        if proxied is not None:
            self.connections += 1
            self.opened[(src, proxied_port)] += 1
        try:
            if first:
                await conn.flowing.wait()
                up_writer.write(first)
            await asyncio.gather(self._pump(reader, up_writer, conn),
                                 self._pump(up_reader, writer, conn))
        finally:
            self.conns.discard(conn)
            conn.abort()

    @staticmethod
    async def _first_frame(reader: asyncio.StreamReader) -> tuple[bytes, str]:
        """Read the connecting node's first frame: its bytes and its sender ID."""
        head = await asyncio.wait_for(reader.readexactly(4), 30)
        (length,) = _LEN.unpack(head)
        if length > 128 * 1024 * 1024:  # above the bus's MAX_FRAME (101 MB)
            raise ValueError("not a bus frame")
        payload = await asyncio.wait_for(reader.readexactly(length), 30)
        frame = msgpack.unpackb(payload, raw=False)
        if not isinstance(frame, list) or len(frame) < 2 or not isinstance(frame[1], str):
            raise ValueError("not a bus frame")
        return head + payload, frame[1]

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    conn: _Conn) -> None:
        try:
            while True:
                await conn.flowing.wait()  # stuck: nothing is read, buffers fill up
                data = await reader.read(CHUNK)
                if not data:
                    break
                await conn.flowing.wait()
                if conn.delay:
                    await asyncio.sleep(conn.delay)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            conn.abort()
