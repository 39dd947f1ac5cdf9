"""A node under load it cannot take in full keeps answering: a flood of clients past
maxclients, a storm of GETJOBs blocked on empty queues, and memory held at maxmemory.
The bounds below are deadlines for answers (liveness), not speed figures."""

from __future__ import annotations

import asyncio
import selectors
import socket
import time
from collections.abc import Callable

import pytest
from support import DisqProcess, form_cluster, wait_for

ANSWER_S = 5.0  # every command must be answered within this, however loaded the node
MAXCLIENTS_ERR = b"-ERR max number of clients reached\r\n"


def resp(*args: object) -> bytes:
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


async def ask(node: DisqProcess, *args: object, timeout: float = ANSWER_S) -> bytes:
    """One command on a new connection; the first reply line(s) as bytes."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(node.host, node.port),
                                            timeout)
    try:
        writer.write(resp(*args))
        return await asyncio.wait_for(reader.read(65536), timeout)
    finally:
        writer.close()


def ping_ok(node: DisqProcess) -> bool:
    return asyncio.run(ask(node, "PING")) == b"+PONG\r\n"


def info_field(node: DisqProcess, name: str) -> int:
    client = node.client(socket_timeout=ANSWER_S)
    try:
        return int(client.info()[name])
    finally:
        client.close()


@pytest.mark.timeout(60)
def test_client_flood(start_node: Callable[..., DisqProcess]) -> None:
    """2400 idle connections against maxclients 2200: the 200 beyond are told and
    closed; then 200 active clients get every answer while 2000 idle ones stay."""
    node = start_node("--maxclients", "2200")
    idle = [socket.create_connection((node.host, node.port), timeout=10)
            for _ in range(2400)]
    try:
        rejected = _rejected(idle, 200)
        assert len(rejected) == 200
        assert asyncio.run(ask(node, "PING")) == MAXCLIENTS_ERR  # still full
        # 2000 idle connections stay; once the node has seen the others go (its count
        # below includes the connection asking), 200 active clients join them.
        for sock in rejected + [s for s in idle if s not in rejected][:200]:
            sock.close()
        idle = [s for s in idle if s.fileno() != -1]
        wait_for(lambda: _connected_clients(node) == 2001, 10, 0.1, "2000 clients left")

        async def active(n: int) -> None:
            queue = f"flood{n}"
            reader, writer = await asyncio.open_connection(node.host, node.port)

            async def call(*args: object) -> bytes:
                writer.write(resp(*args))
                return await asyncio.wait_for(reader.read(65536), ANSWER_S)
            try:
                for i in range(10):
                    assert (await call("ADDJOB", queue, f"b{i}", 0)).startswith(b"+D-")
                    got = await call("GETJOB", "NOHANG", "FROM", queue)
                    assert got.startswith(b"*1\r\n"), got
                    assert await call("ACKJOB", got.split(b"\r\n")[5]) == b":1\r\n"
            finally:
                writer.close()

        async def clients() -> None:
            await asyncio.gather(*(active(n) for n in range(200)))

        asyncio.run(clients())
        wait_for(lambda: ping_ok(node), 10, 0.1, "a free client slot")
    finally:
        for sock in idle:
            sock.close()


def _connected_clients(node: DisqProcess) -> int:
    reply = asyncio.run(ask(node, "INFO", "clients"))
    if not reply.startswith(b"$"):
        return -1  # no slot yet
    return int(reply.split(b"connected_clients:")[1].split(b"\r\n")[0])


def _rejected(socks: list[socket.socket], expected: int) -> list[socket.socket]:
    """The sockets the node answered with the maxclients error (and closed)."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    rejected = []
    deadline = time.monotonic() + 15
    try:
        while len(rejected) < expected and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                data = b""
                while not data.endswith(b"\r\n"):
                    chunk = sock.recv(256)
                    if not chunk:
                        break
                    data += chunk
                assert data == MAXCLIENTS_ERR
                selector.unregister(sock)
                rejected.append(sock)
        # none more than expected: the others are accepted and idle
        assert not selector.select(timeout=0.5)
    finally:
        selector.close()
        for sock in socks:
            sock.setblocking(True)
    return rejected


@pytest.mark.timeout(60)
def test_getjob_storm(start_node: Callable[..., DisqProcess]) -> None:
    """1000 GETJOBs blocked on empty queues: the node answers meanwhile, one ADDJOB
    serves exactly one waiter, the timers release all the others with a null reply."""
    node = start_node()

    async def storm() -> None:
        conns = [await asyncio.open_connection(node.host, node.port) for _ in range(1000)]
        try:
            for n, (_, writer) in enumerate(conns):  # half share a queue, half alone
                queue = "shared" if n % 2 else f"empty{n}"
                writer.write(resp("GETJOB", "TIMEOUT", 3000, "FROM", queue))
            await asyncio.gather(*(w.drain() for _, w in conns))
            deadline = time.monotonic() + 10
            while info_field(node, "blocked_clients") < 1000:
                assert time.monotonic() < deadline, "the GETJOBs did not all block"
                await asyncio.sleep(0.05)
            assert await ask(node, "PING") == b"+PONG\r\n"
            assert (await ask(node, "ADDJOB", "shared", "one", 0)).startswith(b"+D-")
            replies = await asyncio.gather(*(asyncio.wait_for(r.read(65536), 3 + ANSWER_S)
                                             for r, _ in conns))
        finally:
            for _, writer in conns:
                writer.close()
        served = [r for r in replies if b"one" in r]
        assert len(served) == 1
        assert all(r in (b"*-1\r\n",) for r in replies if b"one" not in r)

    asyncio.run(storm())
    assert ping_ok(node)
    wait_for(lambda: info_field(node, "blocked_clients") == 0, 10, 0.1, "no blocked client")


@pytest.mark.timeout(60)
def test_memory_pressure(start_node: Callable[..., DisqProcess]) -> None:
    """maxmemory 4mb: producers hammer ADDJOB into -OOM while the node answers PING,
    INFO and consumers; once the queue is drained ADDJOB is accepted again."""
    node = start_node("--maxmemory", "4mb")
    body = b"m" * 10_000

    async def pressure() -> tuple[int, int]:
        added = refused = 0
        for _ in range(1000):
            reply = await ask(node, "ADDJOB", "mem", body, 0)
            if reply.startswith(b"-OOM"):
                refused += 1
                if refused >= 50:
                    break
            else:
                assert reply.startswith(b"+D-"), reply
                added += 1
            if refused:  # under pressure, the node answers everything else
                assert await ask(node, "PING") == b"+PONG\r\n"
        return added, refused

    added, refused = asyncio.run(pressure())
    assert added > 0 and refused >= 50
    assert info_field(node, "used_memory") > 0
    client = node.client(socket_timeout=ANSWER_S)
    try:
        drained = 0
        while jobs := client.execute_command("GETJOB", "NOHANG", "COUNT", 100, "FROM", "mem"):
            client.execute_command("ACKJOB", *[job[1] for job in jobs])
            drained += len(jobs)
        assert drained == added
        assert client.execute_command("ADDJOB", "mem", body, 0).startswith(b"D-")
    finally:
        client.close()


@pytest.mark.timeout(60)
def test_memory_pressure_in_a_cluster(start_node: Callable[..., DisqProcess]) -> None:
    """A node past 75% of its maxmemory keeps answering, refuses new copies and
    places its own new jobs on the others (no -OOM while they have room); the others
    replicate around it."""
    a, c = start_node(), start_node()
    b = start_node("--maxmemory", "4mb")
    form_cluster([a, b, c])
    body = b"m" * 10_000
    rb, ra = b.client(socket_timeout=ANSWER_S), a.client(socket_timeout=ANSWER_S)
    try:
        kept = 0
        for _ in range(1000):
            job = rb.execute_command("ADDJOB", "full", body, 0, "REPLICATE", 1)
            if not rb.execute_command("SHOW", job):
                break  # placed on a peer: b is short of memory
            kept += 1
        else:
            raise AssertionError("b kept every job under maxmemory 4mb")
        for _ in range(100):  # from now on every new job goes to a peer, none refused
            job = rb.execute_command("ADDJOB", "full", body, 0, "REPLICATE", 1)
            assert not rb.execute_command("SHOW", job)
        assert rb.ping()
        job = ra.execute_command("ADDJOB", "q", "around", 2000, "REPLICATE", 2)
        assert not b.client().execute_command("SHOW", job)
        assert c.client().execute_command("SHOW", job)
        assert rb.execute_command("QLEN", "full") == kept > 0
    finally:
        rb.close()
        ra.close()
