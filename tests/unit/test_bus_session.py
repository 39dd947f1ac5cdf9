"""The cluster-secret handshake and frame tags (disq/cluster/session.py), sans-IO: two
Handshakes talking to each other, and what a relay, a reflection or a replay gets."""

from __future__ import annotations

import importlib.util

import pytest

from disq.cluster import messages as m
from disq.cluster.session import FrameTags, Handshake, HandshakeError
from disq.ids import new_node_id

SECRET = b"s3cret"


def pair(secret_a: bytes = SECRET, secret_b: bytes = SECRET
         ) -> tuple[Handshake, Handshake, str, str]:
    a_id, b_id = new_node_id(), new_node_id()
    return (Handshake(secret_a, a_id, connector=True),
            Handshake(secret_b, b_id, connector=False), a_id, b_id)


def run(c: Handshake, a: Handshake) -> None:
    """Both sides' messages, in the order a link carries them."""
    proof_c = c.receive(a.my_id, a.hello())
    proof_a = a.receive(c.my_id, c.hello())
    assert c.receive(a.my_id, proof_a) == []
    assert a.receive(c.my_id, proof_c) == []


def frames(sender: Handshake, count: int) -> list[tuple[bytes, bytes]]:
    assert sender.sending is not None
    payloads = [m.encode_frame(sender.my_id, 7711, [], [[m.PING, [], i]])[4:]
                for i in range(count)]
    return [(payload, sender.sending.tag(payload, 0)) for payload in payloads]


def holds(receiver: Handshake, payload: bytes, tag: bytes) -> bool:
    """Whether `receiver` takes `tag` for `payload` as the next frame's."""
    assert receiver.receiving is not None
    return receiver.receiving.check(payload + tag, 0, len(payload))


def test_both_sides_prove_and_agree_on_the_keys() -> None:
    c, a, c_id, a_id = pair()
    run(c, a)
    assert c.done and a.done
    assert (c.peer_id, a.peer_id) == (a_id, c_id)
    assert c.receiving is not None and a.receiving is not None
    for payload, tag in frames(c, 3):
        assert holds(a, payload, tag)
    for payload, tag in frames(a, 3):
        assert holds(c, payload, tag)


def test_a_wrong_secret_fails_both_ways() -> None:
    c, a, c_id, a_id = pair(SECRET, b"other")
    proof_c = c.receive(a_id, a.hello())
    proof_a = a.receive(c_id, c.hello())
    with pytest.raises(HandshakeError, match="did not prove"):
        c.receive(a_id, proof_a)
    with pytest.raises(HandshakeError, match="did not prove"):
        a.receive(c_id, proof_c)


def session() -> tuple[Handshake, Handshake]:
    c, a, _, _ = pair()
    run(c, a)
    return c, a


def test_a_replayed_reordered_changed_or_foreign_frame_fails_its_tag() -> None:
    """(A failed tag closes the link: each case on a session of its own.)"""
    c, a = session()
    (p0, t0), (p1, t1) = frames(c, 2)
    assert a.receiving is not None
    assert holds(a, p0, t0)
    assert not holds(a, p0, t0)  # frame 0 again
    c, a = session()
    (p0, t0), (p1, t1) = frames(c, 2)
    assert a.receiving is not None
    assert not holds(a, p1, t1)  # frame 1 before frame 0
    c, a = session()
    assert a.receiving is not None
    assert not holds(a, p0, t0)  # another session's frame 0
    c, a = session()
    (r0, v0), = frames(c, 1)
    assert a.receiving is not None
    assert not holds(a, bytes([r0[0] ^ 1]) + r0[1:], v0)  # changed


def test_a_relay_passes_the_handshake_but_learns_no_key() -> None:
    """A relay between c (which dialled the address of a stopped node) and a: each
    side proves itself to the other through it, bound to each other's IDs; what the
    relay may add to the stream fails the tags."""
    c, a, c_id, a_id = pair()
    run(c, a)  # every message passed on unchanged
    assert (c.peer_id, a.peer_id) == (a_id, c_id)
    forged = m.encode_frame(c_id, 7711, [], [[m.DELJOB, "D-1"]])[4:]
    assert not holds(a, forged, bytes(16))


def test_a_proof_is_bound_to_both_challenges_and_ids() -> None:
    """A's proof from one session is worth nothing in another (other challenges),
    nor for another ID, nor reflected back as the other side's."""
    c, a, c_id, a_id = pair()
    proof_a = a.receive(c_id, c.hello())
    c.receive(a_id, a.hello())
    c2 = Handshake(SECRET, c_id, connector=True)
    c2.receive(a_id, [[m.AUTH, bytes(16)]])  # another challenge from "a"
    with pytest.raises(HandshakeError):
        c2.receive(a_id, proof_a)
    # reflected: c's own proof handed back to it as a's
    c3, a3, _, a3_id = pair()
    proof_c3 = c3.receive(a3_id, a3.hello())
    with pytest.raises(HandshakeError):
        c3.receive(a3_id, proof_c3)


@pytest.mark.parametrize("messages", [
    [[m.AUTH, bytes(16)], [m.DELJOB, "D-1"]],  # something beside the AUTH
    [[m.PING, [], 0]],  # not a handshake message
    [[m.AUTH, bytes(15)]],  # a short challenge
    [[m.AUTH_PROOF, bytes(32)]],  # a proof before the AUTH
])
def test_anything_but_the_handshake_is_refused(messages: list[list[object]]) -> None:
    _, a, c_id, _ = pair()
    with pytest.raises(HandshakeError):
        a.receive(c_id, messages)


def test_the_proof_must_come_from_the_id_of_the_auth() -> None:
    c, a, c_id, _ = pair()
    proof_c = c.receive(a.my_id, a.hello())
    a.receive(c_id, c.hello())
    with pytest.raises(HandshakeError):
        a.receive(new_node_id(), proof_c)


def test_a_link_to_itself_is_refused() -> None:
    c, _, c_id, _ = pair()
    with pytest.raises(HandshakeError, match="itself"):
        c.receive(c_id, [[m.AUTH, bytes(16)]])


def test_the_reader_checks_tags_before_decoding() -> None:
    """FrameReader with a link's tags: frames decode while their tags hold; a frame
    without one (or a replay) raises FrameError before its payload is decoded."""
    c, a, _, _ = pair()
    run(c, a)
    assert c.sending is not None
    reader = m.FrameReader()
    reader.tags = a.receiving
    stream = b""
    for i in range(3):
        data = m.frame(m.frame_prefix(c.my_id, 7711, []), [[m.PING, [], i]], m.TAG_LEN)
        stream += data + c.sending.tag(data, 4)
    got = list(reader.feed(stream))
    assert [f[4][0][2] for f in got] == [0, 1, 2]
    with pytest.raises(m.FrameError, match="failed its authentication"):
        list(reader.feed(stream[:len(stream) // 3]))  # frame 0 again


@pytest.mark.skipif(importlib.util.find_spec("disq._bustag") is None,
                    reason="disq._bustag is not built")
def test_the_c_tags_are_the_fallbacks() -> None:
    """A node built without disq._bustag (no compiler, no OpenSSL headers) tags and
    checks frames as one with it: each takes the other's."""
    from disq._bustag import Tags
    key = bytes(range(32))
    c_tags, py_tags = Tags(key), FrameTags(key)
    c_check, py_check = Tags(key), FrameTags(key)
    for size in (0, 1, 100, 5000):
        data = b"head" + bytes(size)
        tag = c_tags.tag(data, 4)
        assert tag == py_tags.tag(data, 4)
        assert c_check.check(data + tag, 4, len(data))
        assert py_check.check(data + tag, 4, len(data))
    assert not Tags(key).check(bytes(20), 0, 4)
    assert not FrameTags(key).check(bytes(20), 0, 4)
