"""What a node keeps of the requests it refuses: nothing. Long loops of every kind of
error reply, each request carrying a large argument, must leave the node's RSS flat
(a node that kept the refused arguments grew by hundreds of MB here)."""

from __future__ import annotations

import socket

import hiredis
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from support import DisqProcess, call, used_memory, wait_for

BIG = b"x" * 100_000
# One request for each error path, each with a 100 KB argument that must not be kept.
REFUSED: list[tuple[bytes, ...]] = [
    (b"ADDJOB", b"q", BIG, b"0", b"REPLICATE", b"3"),  # -NOREPL: a single node
    (b"ADDJOB", b"q", BIG, b"soon"),  # timeout is not an integer
    (b"ADDJOB", b"q", BIG, b"0", b"BOGUS"),  # syntax error
    (b"ADDJOB", b"q", BIG, b"0", b"TTL", b"-1"),
    (b"ADDJOB", b"q", BIG, b"0", b"RETRY", b"-1"),
    (b"ADDJOB", b"q", BIG, b"0", b"DEDUP", BIG),  # key too long
    (b"ACKJOB", BIG),  # -BADID
    (b"FASTACK", BIG),
    (b"NACK", BIG),
    (b"SHOW", BIG),
    (b"ENQUEUE", BIG),
    (b"WORKING", b"D-" + BIG),
    (b"GETJOB", b"TIMEOUT", BIG, b"FROM", b"q"),
    (b"GETJOB", b"COUNT", b"0", b"FROM", BIG),
    (b"QSCAN", b"COUNT", BIG),
    (b"JSCAN", b"STATE", BIG),
    (b"CLUSTER", BIG),
    (b"CONFIG", b"SET", BIG, BIG),
    (b"NOSUCHCOMMAND", BIG),
    (b"PING", BIG, BIG),  # wrong number of arguments
]


def encode(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def send_all(sock: socket.socket, requests: list[tuple[bytes, ...]], rounds: int) -> list:
    """Send `rounds` passes of `requests`, one pass pipelined at a time; every reply."""
    reader = hiredis.Reader()
    payload = b"".join(encode(*request) for request in requests)
    replies: list = []
    for _ in range(rounds):
        sock.sendall(payload)
        got = 0
        while got < len(requests):
            reply = reader.gets()
            if reply is False:
                data = sock.recv(1 << 16)
                assert data, "the node closed the connection"
                reader.feed(data)
                continue
            replies.append(reply)
            got += 1
    return replies


def test_error_replies_keep_nothing_of_the_request(node: DisqProcess) -> None:
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        warm = send_all(sock, REFUSED, 20)
        assert all(isinstance(reply, hiredis.ReplyError) for reply in warm), [
            (request[0], reply) for request, reply in zip(REFUSED, warm, strict=False)
            if not isinstance(reply, hiredis.ReplyError)]
        before = node.rss()
        send_all(sock, REFUSED, 200)  # 400 MB of refused arguments
    after = node.rss()
    grown = (after - before) / 1e6
    assert grown < 40, f"RSS grew by {grown:.0f} MB over 4,000 refused requests"
    assert node.client().ping()


def test_a_huge_refused_argument_is_not_kept(node: DisqProcess) -> None:
    """-BADID for a 20 MB ID, ten times: the memory goes back once refused."""
    huge = b"D-" + b"y" * 20_000_000
    with socket.create_connection(("127.0.0.1", node.port), timeout=30) as sock:
        send_all(sock, [(b"ACKJOB", huge)], 2)
        before = node.rss()
        replies = send_all(sock, [(b"ACKJOB", huge)], 10)
    assert all(isinstance(reply, hiredis.ReplyError) for reply in replies)
    grown = (node.rss() - before) / 1e6
    assert grown < 60, f"RSS grew by {grown:.0f} MB after ten refused 20 MB IDs"


# -- a full node (maxmemory) -----------------------------------------------------------
ROOM = 20 * 1024 * 1024  # job memory below the 95% mark


def fill_to_the_mark(node: DisqProcess) -> tuple[int, int]:
    """Set maxmemory so that ROOM bytes of jobs fit under its 95% mark; returns the
    memory a job takes beyond its body, and a big body size that leaves 300-600 KB
    under the mark once the node holds as many such jobs as fit."""
    maxmemory = int((used_memory(node) + ROOM) / 0.95) + 1
    assert call(node, "CONFIG", "SET", "maxmemory", maxmemory) == b"OK"
    before = used_memory(node)
    probe = call(node, "ADDJOB", "probe", b"p" * 1000, 0)
    footprint = used_memory(node) - before - 1000
    call(node, "DELJOB", probe)
    mark = maxmemory // 100 * 95 - used_memory(node)
    big = 1_000_000
    while not 300_000 <= mark % (big + footprint) <= 600_000:
        big += 7_000
    return footprint, big


def test_a_full_node_refuses_big_jobs_and_takes_small_ones(node: DisqProcess) -> None:
    """Flooded with ~1 MB jobs, a node refuses the big job that would take it past
    95% of maxmemory (-OOM) and keeps taking the small ones that still fit."""
    footprint, big = fill_to_the_mark(node)
    client = node.client()
    taken = 0
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for _ in range(100):
            client.execute_command("ADDJOB", "flood", b"b" * big, 0)
            taken += 1
    assert taken == ROOM // (big + footprint) or taken == ROOM // (big + footprint) - 1
    canaries = 0
    for _ in range(100):  # 100 x ~500 bytes: they fit in what the big jobs left
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.execute_command("ADDJOB", "flood", b"b" * big, 0)
        assert client.execute_command("ADDJOB", "canary", b"c" * 100, 0).startswith(b"D-")
        canaries += 1
    assert canaries == 100
    # ... until they no longer fit either; nothing queued was dropped
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for _ in range(2000):
            client.execute_command("ADDJOB", "canary", b"c" * 100, 0)
            canaries += 1
    assert 300_000 // (100 + footprint) < canaries <= 620_000 // (100 + footprint)
    assert call(node, "QLEN", "flood") == taken and call(node, "QLEN", "canary") == canaries
    assert client.ping()


def test_a_flooded_node_places_jobs_on_its_peers(make_cluster) -> None:
    """Past 75% of its maxmemory a node keeps no copy of new jobs and places them on
    its peers (Disque's external replication), from the very job that crosses the
    mark: a flood of 1 MB jobs never fills it, big and small jobs are all taken."""
    a, b, c = make_cluster(3)
    fill_to_the_mark(a)
    # 60 MB may take longer than the client's usual 10 s on a loaded machine, and a
    # pipeline redis-py sends again on a timeout adds every job twice.
    pipe = a.client(socket_timeout=120, retry=Retry(NoBackoff(), 0)).pipeline(
        transaction=False)
    for i in range(60):  # 60 MB against 20 MB of room, as fast as the node takes them
        pipe.execute_command("ADDJOB", "flood", b"b" * 1_000_000, 0, "REPLICATE", 1)
        pipe.execute_command("ADDJOB", "canary", b"c%d" % i, 0, "REPLICATE", 1)
    replies = pipe.execute(raise_on_error=False)
    refused = [str(r) for r in replies if not isinstance(r, bytes)]
    assert refused == [], f"{len(refused)} refused: {sorted(set(refused))}"
    # A job placed on peers is queued by one of them once its copies are confirmed
    # (ENQUEUE, sent as the ADDJOB is answered, again until answered: a link dropped
    # under the flood loses it): the last ones may still be on the bus.
    for queue in ("flood", "canary"):
        try:
            wait_for(lambda q=queue: sum(int(call(n, "QLEN", q)) for n in (a, b, c)) == 60)  # type: ignore
        except AssertionError as exc:  # the states once timed out, not before waiting
            raise AssertionError(f"{exc}: 60 jobs queued in {queue}: "
                                 f"{job_states([a, b, c], queue)}") from None
    maxmemory = int(call(a, "CONFIG", "GET", "maxmemory")[1])  # type: ignore[index]
    assert used_memory(a) <= maxmemory * 0.95


def job_states(nodes: list[DisqProcess], queue: str) -> list[dict[bytes, int]]:
    """How many jobs of `queue` each node holds, by state (JSCAN)."""
    states = []
    for node in nodes:
        counts: dict[bytes, int] = {}
        for job in call(node, "JSCAN", "QUEUE", queue, "COUNT", 1000, "REPLY", "all")[1]:  # type: ignore[index]
            state = dict(zip(job[::2], job[1::2], strict=True))[b"state"]
            counts[state] = counts.get(state, 0) + 1
        states.append(counts)
    return states
