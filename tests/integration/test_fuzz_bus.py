"""Corrupt and hostile frames on a real node's cluster bus: garbage, mutated frames,
and well-framed messages of every type with fields of the wrong type, sent by an
impostor that joined with MEET. The node keeps serving, logs no bug, its jobs stay
intact and its link with a real peer is unaffected. With cluster-secret, a speaker
that does not prove the secret is closed and never becomes a member."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

import msgpack
import pytest
from fuzzing import JOB_ID_SHAPED, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from support import (
    DisqProcess,
    call,
    cluster_nodes,
    form_cluster,
    free_port,
    parse_nodes,
    wait_closed,
    wait_for,
)

from disq.cluster import messages as m
from disq.dedup_table import scoped_key

KEEP_QUEUE = b"fuzz-keep-9d41a0"
PROBE_QUEUE = b"fuzz-probe"
IMPOSTOR = os.urandom(20).hex()
IMPOSTOR_PORT = free_port()  # nothing listens there: the node's link to it fails


def frame(messages: list[list], sender: str = IMPOSTOR, port: int = IMPOSTOR_PORT,
          flags: object = None) -> bytes:
    payload = msgpack.packb([m.VERSION, sender, port, flags or [], messages],
                            use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


class BusSpeaker:
    """A connection to a node's bus port that reopens (and MEETs again) when closed."""

    def __init__(self, port: int, meet: bool = True) -> None:
        self.address = ("127.0.0.1", port + 10000)
        self.meet = meet
        self.sock: socket.socket | None = None
        self.reopened = 0

    def send(self, data: bytes) -> None:
        if self.sock is None or self.closed():
            self.open()
        assert self.sock is not None
        try:
            self.sock.sendall(data)
        except OSError:
            self.close()

    def open(self) -> None:
        self.close()
        self.reopened += 1
        self.sock = socket.create_connection(self.address, timeout=5)
        if self.meet:
            self.sock.sendall(frame([[m.MEET, []]]))

    def closed(self) -> bool:
        """Drain what the node sent; True if it closed the connection."""
        assert self.sock is not None
        self.sock.setblocking(False)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            self.sock.setblocking(True)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("fuzz-bus")
    nodes = [DisqProcess(base / f"n{i}", "--cluster-node-timeout", "3000") for i in range(2)]
    speaker = None
    try:
        for node in nodes:
            node.start()
        form_cluster(nodes)
        keep = [call(nodes[0], "ADDJOB", KEEP_QUEUE, b"keep%d" % i, 5000, "REPLICATE", 2)
                for i in range(3)]
        probe = [call(nodes[0], "ADDJOB", PROBE_QUEUE, b"probe", 5000, "REPLICATE", 2)
                 for _ in range(3)]
        speaker = BusSpeaker(nodes[0].port)
        yield {"nodes": nodes, "keep": keep, "probe": probe, "speaker": speaker}
    finally:
        if speaker is not None:
            speaker.close()
        for node in nodes:
            node.stop()


LEAVES = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
          | st.floats(allow_nan=False) | st.text(max_size=45) | st.binary(max_size=45)
          | JOB_ID_SHAPED | st.sampled_from([IMPOSTOR, "127.0.0.1", "::1", "", "x" * 40,
                                             "1.2.3.4\nbad", "leaving", "fail"]))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=6)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=16)


@st.composite
def messages(draw: st.DrawFn) -> list[list]:
    """Messages of every type, fields of any type; a few name the probe jobs."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        fields = draw(st.lists(VALUES | st.just("PROBE"), max_size=4))
        out.append([draw(st.integers(0, max(m.NAMES) + 1)), *fields])
    return out


ID = JOB_ID_SHAPED | st.just("PROBE")
INT = st.integers(-5, 2**33) | st.sampled_from([0, 1, 2, 4, 6, 255, 2**64 - 1, -2**63])
GOSSIP = st.lists(st.tuples(st.sampled_from([IMPOSTOR, "f" * 40, "0" * 40]) | st.text(max_size=41),
                            st.sampled_from(["127.0.0.1", "", "1.2.3.4\nbad", "a b", "::1",
                                             "999.1.1.1"]) | st.text(max_size=8),
                            INT, st.lists(st.sampled_from(["fail", "fail?", "leaving", "x"])),
                            INT, INT).map(list), max_size=3)
HOLDERS = st.lists(st.sampled_from([IMPOSTOR, "f" * 40]) | VALUES, max_size=3)
WIRE_COPY = st.tuples(ID, st.binary(max_size=8), st.binary(max_size=8), INT, INT, INT, INT, INT,
                      INT, INT, INT, INT).map(list)  # REPLJOB's: holders once per message
WIRE_JOB = st.tuples(WIRE_COPY, HOLDERS).map(lambda t: [*t[0], t[1]])  # YOURJOBS'
# A copy of a DEDUP ADDJOB: its key (scoped to the copy's queue, or to none), then (if
# it waits for its copies) whether to check the key and how long the ADDJOB may still
# fail (replication/dedup_checks.py)
SCOPE_IT = st.binary(min_size=1, max_size=8).map(lambda key: ("scope", key))
DEDUP_COPY = st.tuples(WIRE_COPY, SCOPE_IT | st.binary(max_size=8) | VALUES,
                       st.lists(st.booleans() | VALUES, max_size=1),
                       st.lists(INT | VALUES, max_size=1)).map(
    lambda t: [*t[0], scoped_key(t[0][1], t[1][1]) if type(t[1]) is tuple else t[1],
               *(t[2] + t[3] if t[2] else [])])
REPLJOB_FIELDS = st.builds(lambda noreply, holders, copies: (noreply, holders, *copies),
                           st.booleans(), HOLDERS, st.lists(WIRE_COPY | DEDUP_COPY, max_size=3))
# Per type, fields of the right shape (values in and out of range): deeper paths.
SHAPED = {
    m.PING: st.tuples(GOSSIP), m.PONG: st.tuples(GOSSIP), m.MEET: st.tuples(GOSSIP),
    m.FAIL: st.tuples(st.sampled_from([IMPOSTOR, "f" * 40]) | st.text(max_size=41)),
    m.REPLJOB: REPLJOB_FIELDS, m.GOTJOB: st.lists(ID, max_size=3),
    m.ENQUEUE: st.tuples(ID, INT), m.QUEUED: st.tuples(ID, INT), m.SETACK: st.tuples(ID, INT),
    m.WILLQUEUE: st.tuples(ID), m.GOTACK: st.tuples(ID, st.booleans()), m.DELJOB: st.tuples(ID),
    m.NEEDJOBS: st.tuples(st.sampled_from([PROBE_QUEUE, b"other"]), INT)
    | st.tuples(st.sampled_from([PROBE_QUEUE, b"other"]), INT, INT | VALUES),
    m.NEEDJOBS_CANCEL: st.tuples(st.sampled_from([PROBE_QUEUE, b"other"]) | VALUES),
    m.YOURJOBS: st.tuples(st.lists(WIRE_JOB, max_size=2)), m.WORKING: st.tuples(ID),
    m.PAUSE: st.tuples(st.sampled_from([PROBE_QUEUE, b"other"]), INT),
    m.QLEN_REQUEST: st.tuples(INT, st.binary(max_size=8)), m.QLEN_REPLY: st.tuples(INT, INT),
    m.DEDUP_SETTLED: st.lists(ID | VALUES, max_size=3),
}


@st.composite
def shaped_messages(draw: st.DrawFn) -> list[list]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        mtype = draw(st.sampled_from(sorted(SHAPED)))
        out.append([mtype, *draw(SHAPED[mtype])])
    return out


def with_probes(value: object, probe: list[bytes]) -> object:
    """The placeholder "PROBE" replaced by the probe jobs' IDs, at any depth."""
    if value == "PROBE":
        return probe[0]
    if isinstance(value, list):
        return [with_probes(v, probe) for v in value]
    return value


@fuzz_settings(250)
@given(messages() | shaped_messages(), st.lists(VALUES, max_size=2), st.integers(0, 5))
def test_wrong_typed_messages_from_a_member(pair: dict, batch: list[list], sender_flags: list,
                                            damage: int) -> None:
    speaker: BusSpeaker = pair["speaker"]
    data = frame(with_probes(batch, pair["probe"]), flags=sender_flags)  # type: ignore
    if damage == 3:
        data = data[:len(data) // 2]  # a frame cut off, then a new connection
    elif damage == 4:
        data = os.urandom(len(data))
    speaker.send(data)
    if damage >= 3:
        speaker.close()


def test_garbage_on_fresh_bus_connections(pair: dict) -> None:
    node = pair["nodes"][0]
    for data in (b"\x00" * 64, b"\xff\xff\xff\xff", os.urandom(300), b"PING\r\n",
                 frame([[m.PING, []]], sender="not-a-node-id"),
                 frame([[m.PING, []]], port=70000)):
        with socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5) as sock:
            sock.sendall(data)


def test_gossip_with_an_address_that_is_not_an_ip_is_ignored(pair: dict) -> None:
    """Found by the property: such an entry started a handshake with that "address",
    and CLUSTER NODES (and nodes.conf) showed it, breaking their line format."""
    node = pair["nodes"][0]
    bad = ["1.2.3.4\nbad", "a b", "\x0b", "999.1.1.1", "host.example"]
    speaker = BusSpeaker(node.port)
    try:
        speaker.send(frame([[m.PING, [[os.urandom(20).hex(), ip, 7000, [], 0, 0]
                                      for ip in bad]]]))
        assert call(node, "PING") == b"PONG"  # after the frame, on the node's one loop
        speaker.send(frame([[m.PING, []]]))
    finally:
        speaker.close()
    assert not [n for n in cluster_nodes(node).values() if n.ip in bad]


def test_the_nodes_their_jobs_and_their_link_survive(pair: dict) -> None:
    """Runs after the properties."""
    a, b = pair["nodes"]
    pair["speaker"].close()
    assert IMPOSTOR in cluster_nodes(a)  # its messages were handled as a member's
    parse_nodes((a.dir / "nodes.conf").read_text())  # still a valid nodes.conf
    assert call(a, "PING") == b"PONG"
    assert call(a, "QLEN", KEEP_QUEUE) == 3
    for i, job_id in enumerate(pair["keep"]):
        for node in (a, b):
            shown = call(node, "SHOW", job_id)
            fields = dict(zip(shown[::2], shown[1::2], strict=True))
            assert fields[b"body"] == b"keep%d" % i, (node.port, fields)

    def linked() -> bool:
        ids = {n: call(n, "CLUSTER", "MYID").decode() for n in (a, b)}
        return all(cluster_nodes(x)[ids[y]].link == "connected"
                   and not cluster_nodes(x)[ids[y]].flags for x, y in ((a, b), (b, a)))

    wait_for(linked, 10, 0.05, "the real link to stay up")
    assert call(a, "ADDJOB", b"after", b"x", 5000, "REPLICATE", 2).startswith(b"D-")
    for node in (a, b):
        log = node.log()
        assert "Traceback" not in log and "Error handling a bus message" not in log, log[-4000:]


def test_a_speaker_without_the_cluster_secret_is_closed(start_node) -> None:
    node = start_node("--cluster-secret", "s3cret")
    me = call(node, "CLUSTER", "MYID").decode()
    attempts = [frame([[m.MEET, []]]),
                frame([[m.AUTH, os.urandom(16)], [m.AUTH_PROOF, os.urandom(32)],
                       [m.MEET, []]]),
                frame([[m.AUTH_PROOF, "wrong type"], [m.PING, []]]),
                frame([[m.REPLJOB, [], False]])]
    for data in attempts:
        with socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5) as sock:
            sock.sendall(data)
            wait_closed(sock, 5, "the link")  # after the node's AUTH challenge
    assert list(cluster_nodes(node)) == [me]
    assert "Traceback" not in node.log()
