"""The cluster-secret handshake against a stranger who knows no secret but can take a
stopped node's bus address, with real nodes: it relays the handshake between two real
peers, which then trust the link, and speaks on it itself; it replays captured frames.

Nodes X, Y and Z share a secret; Z is killed and the test binds Z's bus port. Y dials
that address again every cron tick; the relay opens a link to X and passes every byte
between the two, so that each proves the secret to the other, then sends a frame of
its own to X in Y's name: a DELJOB of a job X holds, a PAUSE of its queue and an admin
user. None of it may take effect: the frames after the handshake carry a tag made with
a key derived from the secret and both sides' challenges, which the relay cannot make.
And a program that does know the secret speaks only in the name of the node it proved.
"""

from __future__ import annotations

import hashlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import msgpack
import pytest
import redis
from support import NODE_TIMEOUT, DisqProcess, call, form_cluster, myid, wait_for

from disq.cluster import messages as m
from disq.cluster.session import Handshake

SECRET = "s3cret"
EVIL_PASSWORD = "evilpw"


def frame(sender: str, port: int, messages: list[list[object]]) -> bytes:
    """A frame as a node without the session's keys can make it (no tag)."""
    payload = msgpack.packb([m.VERSION, sender, port, [], messages], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def split_frames(buf: bytearray) -> Iterator[bytes]:
    """The whole frames at the start of `buf` (removed from it), length prefix included."""
    while len(buf) >= 4:
        (length,) = struct.unpack_from(">I", buf)
        if len(buf) < 4 + length:
            return
        data = bytes(buf[:4 + length])
        del buf[:4 + length]
        yield data


def is_proof(data: bytes) -> bool:
    """A handshake frame holding AUTH_PROOF (handshake frames carry no tag)."""
    try:
        decoded = msgpack.unpackb(data[4:], raw=False)
    except (ValueError, msgpack.ExtraData):
        return False
    return any(message[0] == m.AUTH_PROOF for message in decoded[4])


class Relay:
    """Listens on a stopped node's bus address; for the first peer that dials it, opens
    a link to `target` and passes whole frames both ways until each side has sent its
    AUTH_PROOF, then hands both sockets to the test."""

    def __init__(self, address: tuple[str, int], target: tuple[str, int],
                 dialer_id: str) -> None:
        self.listener = socket.create_server(address, reuse_port=False)
        self.listener.settimeout(15)
        self.target = target
        self.dialer_id = dialer_id  # every peer dials the address: the one relayed
        self.dialer: socket.socket | None = None  # the peer that dialled the address
        self.upstream: socket.socket | None = None  # our link to target
        self.captured: list[bytes] = []  # frames from the dialer after its proof
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            first = self._accept_dialer()
            self.upstream = socket.create_connection(self.target, timeout=10)
            self.upstream.sendall(first)
            assert self.dialer is not None
            buffers = {self.dialer: bytearray(), self.upstream: bytearray()}
            proved = {self.dialer: False, self.upstream: False}
            other = {self.dialer: self.upstream, self.upstream: self.dialer}
            deadline = time.monotonic() + 10
            while not all(proved.values()) and time.monotonic() < deadline:
                readable, _, _ = select.select(list(buffers), [], [], 0.5)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionError("a side closed during the handshake")
                    buffers[sock] += data
                    for whole in split_frames(buffers[sock]):
                        other[sock].sendall(whole)
                        if not proved[sock]:
                            proved[sock] = is_proof(whole)
                        elif sock is self.dialer:
                            self.captured.append(whole)
            if not all(proved.values()):
                raise TimeoutError("the handshake did not go through the relay")
            # The dialer's first frames after its proof (it talks at once: its PING),
            # passed on as the others.
            self.dialer.settimeout(5)
            end = time.monotonic() + 5
            while not self.captured and time.monotonic() < end:
                buffers[self.dialer] += self.dialer.recv(65536)
                for whole in split_frames(buffers[self.dialer]):
                    self.upstream.sendall(whole)
                    self.captured.append(whole)
        except BaseException as exc:  # reported to the test
            self.error = exc
        finally:
            self.done.set()

    def _accept_dialer(self) -> bytes:
        """Accept dials until one comes from `dialer_id` (its AUTH frame's header names
        it); returns that frame."""
        while True:
            sock, _ = self.listener.accept()
            sock.settimeout(5)
            buf = bytearray()
            frames: list[bytes] = []
            while not frames:
                data = sock.recv(65536)
                if not data:
                    break
                buf += data
                frames = list(split_frames(buf))
            if frames and msgpack.unpackb(frames[0][4:], raw=False)[1] == self.dialer_id:
                self.dialer = sock
                return b"".join(frames) + bytes(buf)
            sock.close()

    def wait(self) -> tuple[socket.socket, socket.socket]:
        assert self.done.wait(30), "the relay did not finish"
        if self.error is not None:
            raise self.error
        assert self.dialer is not None and self.upstream is not None
        return self.dialer, self.upstream

    def close(self) -> None:
        for sock in (self.listener, self.dialer, self.upstream):
            if sock is not None:
                sock.close()


@contextmanager
def relay_to(target: DisqProcess, stopped: DisqProcess, dialer: DisqProcess
             ) -> Iterator[Relay]:
    """A Relay on `stopped`'s bus address (the node must be down) between `dialer`,
    dialling it, and `target`'s bus."""
    relay = Relay(("127.0.0.1", stopped.port + 10000), ("127.0.0.1", target.port + 10000),
                  myid(dialer))
    try:
        yield relay
    finally:
        relay.close()


def closed_by_peer(sock: socket.socket, timeout: float = 10) -> bool:
    """Whether the peer closes `sock` within `timeout` (what it sends is dropped)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def evil_user() -> list[object]:
    """An admin user as ACL_SET carries it, with a version no change would beat."""
    digest = hashlib.sha256(EVIL_PASSWORD.encode()).hexdigest()
    return ["evil", 2**53, "f" * 40, False, f"on #{digest} ~* +@all"]


def can_auth_as_evil(node: DisqProcess) -> bool:
    client = node.client(socket_timeout=5)
    try:
        client.execute_command("AUTH", "evil", EVIL_PASSWORD)
        return True
    except (redis.ResponseError, redis.AuthenticationError):
        return False
    finally:
        client.close()


@pytest.fixture
def three_with_a_secret(start_node) -> list[DisqProcess]:
    return form_cluster([start_node("--cluster-node-timeout", str(NODE_TIMEOUT),
                                    "--cluster-secret", SECRET) for _ in range(3)])


def test_a_relayed_handshake_gives_the_relay_no_voice(three_with_a_secret) -> None:
    x, y, z = three_with_a_secret
    job_id = call(x, "ADDJOB", "q", "body", 5000, "REPLICATE", 1)
    assert isinstance(job_id, bytes)
    z.kill()
    with relay_to(x, z, y) as relay:
        _, upstream = relay.wait()
        # The relay speaks on the link X now trusts, in Y's name.
        upstream.sendall(frame(myid(y), y.port, [
            [m.DELJOB, job_id], [m.PAUSE, b"q", 3], [m.ACL_SET, evil_user()]]))
        closed = closed_by_peer(upstream)
    assert call(x, "SHOW", job_id) is not None  # not deleted
    assert call(x, "PAUSE", "q", "state") == b"none"
    assert not can_auth_as_evil(x)
    assert not can_auth_as_evil(y)
    assert closed, "X kept the link after an untagged frame"
    assert "failed its authentication" in x.log()


def test_a_captured_frame_replayed_is_refused(three_with_a_secret) -> None:
    """A frame Y sent on a relayed link, sent again on it (same session) and on a new
    relayed link (another session): X closes the link each time."""
    x, y, z = three_with_a_secret
    z.kill()
    with relay_to(x, z, y) as relay:
        dialer, upstream = relay.wait()
        assert relay.captured, "Y sent nothing after the handshake"
        captured = relay.captured[0]
        dialer.close()  # Y is out of it: the relay alone speaks from now on
        upstream.sendall(captured)
        assert closed_by_peer(upstream), "X took a frame replayed in its session"
    refusals = x.log().count("failed its authentication")
    assert refusals >= 1
    with relay_to(x, z, y) as relay:
        dialer, upstream = relay.wait()
        dialer.close()
        upstream.sendall(captured)
        assert closed_by_peer(upstream), "X took a frame of another session"
    assert x.log().count("failed its authentication") > refusals


class SecretPeer:
    """A bus link to a node made by a program that knows the secret: it proves a node
    ID of its choice (session.Handshake), then sends tagged frames."""

    def __init__(self, target: DisqProcess, my_id: str, my_port: int) -> None:
        self.my_id, self.my_port = my_id, my_port
        self.sock = socket.create_connection(("127.0.0.1", target.port + 10000), timeout=10)
        self.handshake = Handshake(SECRET.encode(), my_id, connector=True)
        self.buf = bytearray()
        self._send_plain(self.handshake.hello())
        while not self.handshake.done:
            data = self.sock.recv(65536)
            assert data, "the node closed the link during the handshake"
            self.buf += data
            for whole in split_frames(self.buf):
                decoded = msgpack.unpackb(whole[4:], raw=False)
                answer = self.handshake.receive(decoded[1], decoded[4])
                if answer:
                    self._send_plain(answer)

    def _send_plain(self, messages: list[list[object]]) -> None:
        self.sock.sendall(m.encode_frame(self.my_id, self.my_port, [], messages))

    def send(self, sender_id: str, messages: list[list[object]]) -> None:
        """A tagged frame whose header names `sender_id`."""
        assert self.handshake.sending is not None
        data = m.frame(m.frame_prefix(sender_id, self.my_port, []), messages, m.TAG_LEN)
        self.sock.sendall(data + self.handshake.sending.tag(data, 4))


def test_a_frame_in_another_nodes_name_is_refused(three_with_a_secret) -> None:
    """A link proved as Y may speak as Y (the control: its DELJOB works), never as Z."""
    x, y, z = three_with_a_secret
    kept = call(x, "ADDJOB", "q", "kept", 5000, "REPLICATE", 1)
    deleted = call(x, "ADDJOB", "q", "deleted", 5000, "REPLICATE", 1)
    peer = SecretPeer(x, myid(y), y.port)
    try:
        peer.send(myid(z), [[m.DELJOB, kept]])
        assert closed_by_peer(peer.sock), "X kept a link that named another node"
    finally:
        peer.sock.close()
    assert call(x, "SHOW", kept) is not None
    assert f"a frame in the name of node {myid(z)} from node {myid(y)}" in x.log()
    peer = SecretPeer(x, myid(y), y.port)
    try:
        peer.send(myid(y), [[m.DELJOB, deleted]])
        wait_for(lambda: call(x, "SHOW", deleted) is None, message="Y's own DELJOB")
    finally:
        peer.sock.close()
