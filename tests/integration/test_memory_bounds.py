"""What a node keeps of the requests it refuses: nothing. Long loops of every kind of
error reply, each request carrying a large argument, must leave the node's RSS flat
(a node that kept the refused arguments grew by hundreds of MB here)."""

from __future__ import annotations

import socket

import hiredis
from support import DisqProcess

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
