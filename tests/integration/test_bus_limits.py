"""What one bus connection may make a node allocate.

With cluster-secret, a connection that has not proven the secret gets only the
handshake: a frame longer than that is refused from its length, before its bytes are
buffered or decoded. Once a link may talk (proven, or no secret set), a frame's
msgpack may not decode into far more memory than it has bytes. Measured on the node's
peak RSS (VmHWM), on a node of its own."""

from __future__ import annotations

import socket
import struct
import threading

import msgpack
from support import call, form_cluster, wait_closed, wait_for
from test_fuzz_bus import IMPOSTOR, frame

from disq.cluster import messages as m

MB = 1024 * 1024


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def empty_arrays_frame(count: int, per_field: int = 0) -> bytes:
    """A well-framed PING followed by `count` empty msgpack arrays: as fields of the
    message, or (per_field > 0) grouped by `per_field` in arrays that are its fields
    (which no single array length limit stops)."""
    head = b"\x95" + b"".join(map(msgpack.packb, (m.VERSION, IMPOSTOR, 7000, [])))
    if per_field:
        group = b"\xdd" + struct.pack(">I", per_field) + b"\x90" * per_field
        groups = count // per_field
        body = b"\xdd" + struct.pack(">I", groups + 1) + b"\x00" + group * groups
    else:
        body = b"\xdd" + struct.pack(">I", count + 1) + b"\x00" + b"\x90" * count
    payload = head + b"\x91" + body  # messages: [[PING, [], [], ...]]]
    return struct.pack(">I", len(payload)) + payload


def send_until_closed(sock: socket.socket, data: bytes) -> None:
    """Send what the node takes; it may close the connection on the way."""
    try:
        sock.sendall(data)
    except OSError:
        pass


def cluster_works(nodes: list) -> None:
    assert call(nodes[0], "PING") == b"PONG"
    job = call(nodes[0], "ADDJOB", b"limits-q", b"body", 5000, "REPLICATE", 2)
    assert isinstance(job, bytes) and job.startswith(b"D-")
    wait_for(lambda: call(nodes[1], "SHOW", job), 5, 0.05, "the copy on the other node")


def test_no_big_frame_before_the_cluster_secret(start_node) -> None:
    """(Was: decoded, 1.4 GB for these 20 MB.) Closed from the frame's length."""
    nodes = form_cluster([start_node("--cluster-secret", "s3cret") for _ in range(2)])
    node = nodes[0]
    before = peak_rss(node.pid)
    with socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5) as sock:
        send_until_closed(sock, empty_arrays_frame(20 * MB))
        wait_closed(sock, 3, "the link sending a 20 MB frame before the secret")
    assert peak_rss(node.pid) - before < 50 * MB
    assert "did not prove the cluster secret" not in node.log()  # the length did it
    assert "bytes before proving the cluster secret" in node.log()
    cluster_works(nodes)


def test_unfinished_big_frames_before_the_cluster_secret(start_node) -> None:
    """(Was: buffered, up to 64 MB each, until the AUTH deadline.)"""
    nodes = form_cluster([start_node("--cluster-secret", "s3cret") for _ in range(2)])
    node = nodes[0]
    before = peak_rss(node.pid)
    socks = [socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5)
             for _ in range(4)]
    try:
        for sock in socks:  # each: a 64 MB frame of which 32 MB come
            send_until_closed(sock, struct.pack(">I", m.MAX_FRAME) + bytes(32 * MB))
        for sock in socks:
            sock.settimeout(2)  # well before the AUTH deadline (5 s) would close it
            wait_closed(sock, 2, "a link sending an unfinished frame before the secret")
    finally:
        for sock in socks:
            sock.close()
    assert peak_rss(node.pid) - before < 50 * MB
    cluster_works(nodes)


def test_amplifying_frame_from_a_link_that_may_talk(start_node) -> None:
    """No secret: any connection may talk, but its msgpack may not decode into far
    more memory than its bytes (was: 1 MB of empty arrays, 72 MB of lists)."""
    nodes = form_cluster([start_node() for _ in range(2)])
    node = nodes[0]
    before = peak_rss(node.pid)
    for per_field in (0, 1000):
        with socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5) as sock:
            send_until_closed(sock, frame([[m.MEET, []]]))
            send_until_closed(sock, empty_arrays_frame(MB, per_field))
            try:
                sock.shutdown(socket.SHUT_WR)  # handled or refused, the node then closes
            except OSError:
                pass
            wait_closed(sock, 10, "the link sending an amplifying frame")
    assert peak_rss(node.pid) - before < 50 * MB
    assert "would decode into more than" in node.log()
    cluster_works(nodes)


def test_refused_big_frames_cost_their_bytes_only_and_are_given_back(start_node) -> None:
    """No secret: four links at once each send a 48 MB frame of empty arrays (which
    would decode into 3 GB), three rounds. Each frame is refused from its bytes,
    before it is decoded, and what the links buffered is freed when they close, round
    after round (was: 1.7 GB at the peak, and 107 -> 198 -> 272 -> 383 MB kept)."""
    nodes = form_cluster([start_node() for _ in range(2)])
    node = nodes[0]
    data = empty_arrays_frame(48 * MB)
    before = peak_rss(node.pid)
    settled: list[int] = []
    for _ in range(3):
        socks = [socket.create_connection(("127.0.0.1", node.port + 10000), timeout=30)
                 for _ in range(4)]
        try:
            senders = [threading.Thread(target=send_until_closed, args=(sock, data))
                       for sock in socks]
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join(60)
            for sock in socks:
                wait_closed(sock, 30, "a link sending a 48 MB frame of empty arrays")
        finally:
            for sock in socks:
                sock.close()
        # the links are gone once the node answers on a new one
        settled.append(wait_for(lambda: node.rss() < before + 40 * MB and node.rss(), 15,
                                0.1, "the links' memory given back"))
    # the frames' bytes (4 x 48 MB at most), never what they would decode into
    assert peak_rss(node.pid) - before < 4 * 48 * MB + 60 * MB
    assert max(settled) - min(settled) < 30 * MB
    assert node.log().count("would decode into more than") >= 12
    cluster_works(nodes)


def test_one_pong_for_a_frame_of_pings(start_node) -> None:
    """A PING is answered on its link; a frame of 3-byte PINGs must not make the node
    queue a PONG (with its gossip, ~1 KB) for each (was: 50,000 PONGs)."""
    node = start_node()
    reader = m.FrameReader()
    with socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5) as sock:
        sock.sendall(frame([[m.MEET, []]] + [[m.PING, []]] * 50_000))
        frames: list[list] = []
        while not frames:
            data = sock.recv(1 << 20)
            assert data, "the node closed the link"
            frames += reader.feed(data)
        pongs = [message for message in frames[0][4] if message[0] == m.PONG]
        assert len(pongs) == 1, len(pongs)
    assert call(node, "PING") == b"PONG"


def test_big_and_dense_frames_of_a_real_cluster_pass(start_node) -> None:
    """What the limits must let through: a 30 MB body, and the copies of thousands of
    pipelined ADDJOBs (frames well over PLAIN_DECODE_MAX, dense in small lists)."""
    nodes = form_cluster([start_node("--cluster-secret", "s3cret") for _ in range(2)])
    body = bytes(range(256)) * (30 * MB // 256)
    job = call(nodes[0], "ADDJOB", b"big-q", body, 20_000, "REPLICATE", 2)
    shown = call(nodes[1], "SHOW", job)
    assert dict(zip(shown[::2], shown[1::2], strict=True))[b"body"] == body
    client = nodes[0].client(protocol=2, socket_timeout=30)
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(20_000):
            pipe.execute_command("ADDJOB", b"dense-q", b"%d" % i, 20_000, "REPLICATE", 2)
        jobs = pipe.execute()
    finally:
        client.close()
    assert all(j.startswith(b"D-") for j in jobs)  # each one replicated, synchronously
    for job in jobs[::1000]:
        assert call(nodes[1], "SHOW", job)
    for node in nodes:
        assert "Closing bus link" not in node.log()
