"""Cluster membership with real processes: the bus on port+10000, MEET and gossip
discovery, PFAIL ("fail?") / FAIL ("fail") failure detection, restarts from nodes.conf,
CLUSTER LEAVING / FORGET / RESET / MEET, HELLO priorities, and a bus that survives
garbage. Driven as Disque's own cluster suite drives its nodes (MEET chain, polling
cluster_reachable_nodes, parsing CLUSTER NODES flags, kill -9 and restart), with a small
cluster-node-timeout so failures are detected in about a second.
"""

from __future__ import annotations

import random
import re
import socket
import struct

import msgpack
import pytest
import redis
from support import (
    BUS_VARIANTS,
    NODE_TIMEOUT,
    DisqProcess,
    assert_stays,
    call,
    cluster_info,
    cluster_nodes,
    conf_lists_all,
    form_cluster,
    free_port,
    meet,
    myid,
    parse_nodes,
    wait_for,
    wait_formed,
)

from disq.cluster.messages import MAX_FRAME, VERSION

FAIL_TIMEOUT = 15.0
LOCALHOST = b"127.0.0.1"


# -- talking to a node --------------------------------------------------------------------
def error_of(node: DisqProcess, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as info:
        call(node, *args)
    return str(info.value)


def flags_seen_by(observer: DisqProcess, node_id: str) -> tuple[str, ...] | None:
    line = cluster_nodes(observer).get(node_id)
    return None if line is None else line.flags


def hello(node: DisqProcess) -> dict[str, tuple[bytes, bytes, bytes]]:
    """HELLO as {id: (ip, port, priority)}, after checking its shape."""
    reply = call(node, "HELLO")
    assert isinstance(reply, list) and reply[0] == 1
    assert reply[1] == myid(node).encode()
    entries = {}
    for entry in reply[2:]:
        assert isinstance(entry, list) and len(entry) == 4, entry
        node_id, ip, port, priority = entry
        assert all(isinstance(x, bytes) for x in entry), entry  # all bulk strings
        entries[node_id.decode()] = (ip, port, priority)
    assert len(entries) == len(reply) - 2
    return entries


def priority_seen_by(observer: DisqProcess, node_id: str) -> bytes | None:
    entry = hello(observer).get(node_id)
    return None if entry is None else entry[2]


# -- cluster state --------------------------------------------------------------------------
def wait_flags(observers: list[DisqProcess], node_id: str, flag: str,
               timeout: float = FAIL_TIMEOUT) -> None:
    wait_for(lambda: all(flag in (flags_seen_by(o, node_id) or ()) for o in observers),
             timeout, 0.02, f"{node_id} flagged {flag!r} on {len(observers)} nodes")


def messages_received(node: DisqProcess) -> int:
    return int(cluster_info(node)["cluster_stats_messages_received"])


def wait_more_messages(node: DisqProcess, count: int) -> None:
    """Let `count` more bus messages reach `node` (gossip rounds happened)."""
    start = messages_received(node)
    wait_for(lambda: messages_received(node) >= start + count, 15, 0.05,
             f"{count} more bus messages on port {node.port}")


# -- forming a cluster ------------------------------------------------------------------------
@pytest.mark.parametrize("bus_args", BUS_VARIANTS)
@pytest.mark.parametrize("n,join", [(3, "chain"), (5, "star")])
def test_join_and_auto_discovery(make_cluster, n, join):
    nodes = make_cluster(n, join)
    ids = [myid(node) for node in nodes]
    assert len(set(ids)) == n
    expected = {node_id: f"127.0.0.1:{node.port}"
                for node_id, node in zip(ids, nodes, strict=True)}

    for node, node_id in zip(nodes, ids, strict=True):
        lines = cluster_nodes(node)
        assert {i: line.addr for i, line in lines.items()} == expected  # all agree
        mine = [line for line in lines.values() if "myself" in line.flags]
        assert len(mine) == 1 and mine[0].id == node_id
        assert (mine[0].flags, mine[0].ping_sent, mine[0].pong_recv, mine[0].link) == (
            ("myself",), 0, 0, "connected")
        for line in lines.values():
            if line.id != node_id:
                assert line.flags == () and line.link == "connected", line
                assert line.pong_recv > 0, line

        info = cluster_info(node)
        assert list(info) == ["cluster_state", "cluster_known_nodes", "cluster_reachable_nodes",
                              "cluster_size", "cluster_stats_messages_sent",
                              "cluster_stats_messages_received"]
        assert info["cluster_state"] == "ok"
        assert info["cluster_known_nodes"] == str(n)
        assert info["cluster_reachable_nodes"] == str(n - 1)
        assert info["cluster_size"] == str(n)
        assert int(info["cluster_stats_messages_sent"]) > 0
        assert int(info["cluster_stats_messages_received"]) > 0

        assert hello(node) == {i: (LOCALHOST, str(p.port).encode(), b"1")
                               for i, p in zip(ids, nodes, strict=True)}

    # nodes.conf: the same line format, the same nodes (make_cluster waited for it)
    for node in nodes:
        assert conf_lists_all(node, nodes)


def test_meet_errors_and_handshake_timeout(start_node):
    node = start_node("--cluster-node-timeout", str(NODE_TIMEOUT))
    assert error_of(node, "CLUSTER", "MEET", "127.0.0.1", "x") == "Invalid TCP port specified: x"
    assert error_of(node, "CLUSTER", "MEET", "127.0.0.1", "12ab") == (
        "Invalid TCP port specified: 12ab")
    for ip, port in [("300.1.1.1", "7711"), ("localhost", "7711"), ("127.0.0.1", "0"),
                     ("127.0.0.1", "-1"), ("127.0.0.1", "55536")]:
        assert error_of(node, "CLUSTER", "MEET", ip, port) == (
            f"Invalid node address specified: {ip}:{port}")
    assert error_of(node, "CLUSTER", "MEET", "127.0.0.1") == (
        "Wrong CLUSTER subcommand or number of arguments")
    assert cluster_info(node)["cluster_known_nodes"] == "1"

    # Nobody at that address: a handshake node shows up (counted in known_nodes, not in
    # size), and is dropped when nobody answers within max(node timeout, 1 s).
    dead_port = free_port()  # nothing listens on it nor on dead_port + 10000
    assert call(node, "CLUSTER", "MEET", "127.0.0.1", dead_port) == b"OK"
    assert call(node, "CLUSTER", "MEET", "127.0.0.1", dead_port) == b"OK"  # in progress: OK
    lines = cluster_nodes(node)
    handshakes = [n for n in lines.values() if "handshake" in n.flags]
    assert len(handshakes) == 1 and handshakes[0].addr == f"127.0.0.1:{dead_port}"
    info = cluster_info(node)
    assert (info["cluster_known_nodes"], info["cluster_size"],
            info["cluster_reachable_nodes"]) == ("2", "1", "0")
    wait_for(lambda: cluster_info(node)["cluster_known_nodes"] == "1", 10, 0.05,
             "the unanswered handshake to be dropped")
    assert [n.flags for n in cluster_nodes(node).values()] == [("myself",)]

    # Meeting myself: the handshake completes with my own ID and is dropped.
    me = myid(node)
    assert call(node, "CLUSTER", "MEET", "127.0.0.1", node.port) == b"OK"
    wait_for(lambda: cluster_info(node)["cluster_known_nodes"] == "1", 10, 0.05,
             "the handshake with myself to be dropped")
    assert list(cluster_nodes(node)) == [me]
    assert myid(node) == me


# -- failure detection ------------------------------------------------------------------------
@pytest.mark.parametrize("bus_args", BUS_VARIANTS)
def test_killed_node_fails_and_rejoins_by_itself(make_cluster):
    """kill -9 one node of 3: PFAIL then FAIL on the others; restarted, it comes back
    from nodes.conf with its ID, without a new MEET, and the flags clear everywhere."""
    a, b, c = make_cluster(3)
    c_id = myid(c)
    seen: list[tuple[str, ...]] = []
    c.kill()

    def failed_everywhere() -> bool:
        flags = flags_seen_by(a, c_id)
        if not seen or seen[-1] != flags:
            seen.append(flags)
        return "fail" in flags and "fail" in (flags_seen_by(b, c_id) or ())
    wait_for(failed_everywhere, FAIL_TIMEOUT, 0.01, "the killed node to be FAIL")
    # what `a` showed, in order: healthy, maybe PFAIL for a moment, then FAIL
    assert seen[-1] == ("fail",)
    assert [f for f in seen if f not in ((), ("fail?",), ("fail",))] == []
    assert seen.index(("fail",)) == len(seen) - 1
    for observer in (a, b):
        line = cluster_nodes(observer)[c_id]
        assert line.link == "disconnected" and line.addr == f"127.0.0.1:{c.port}"
        assert priority_seen_by(observer, c_id) == b"100"
        info = cluster_info(observer)
        assert (info["cluster_known_nodes"], info["cluster_size"]) == ("3", "3")
        wait_for(lambda o=observer: cluster_info(o)["cluster_reachable_nodes"] == "1", 10,
                 0.05, "only the live peer reachable")

    c.start()  # no MEET: the peers are in its nodes.conf
    assert myid(c) == c_id
    wait_formed([a, b, c])
    for observer in (a, b):
        assert priority_seen_by(observer, c_id) == b"1"
    assert "Clear FAIL state" in a.log() + b.log()


@pytest.mark.parametrize("bus_args", BUS_VARIANTS)
def test_address_taken_by_another_id_becomes_noaddr(make_cluster):
    """A node restarted without its nodes.conf comes back with a new ID on the same
    address: as Redis Cluster does, the peers keep the old ID without an address
    (noaddr), it fails, and it can be forgotten; nothing flaps or crashes."""
    a, b, c = make_cluster(3)
    old_id = myid(c)
    c.kill()
    (c.dir / "nodes.conf").unlink()
    c.start()
    new_id = myid(c)
    assert new_id != old_id
    for observer in (a, b):
        wait_for(lambda o=observer: "noaddr" in (flags_seen_by(o, old_id) or ()),
                 FAIL_TIMEOUT, 0.05, "the stale entry to lose its address")
        wait_for(lambda o=observer: "fail" in (flags_seen_by(o, old_id) or ()),
                 FAIL_TIMEOUT, 0.05, "the stale entry to fail")
        line = cluster_nodes(observer)[old_id]
        assert line.addr == ":0" and line.link == "disconnected"
        assert new_id not in cluster_nodes(observer)  # a new node is met, not guessed
    assert "answers with another ID" in a.log() + b.log()
    for observer in (a, b):
        assert call(observer, "CLUSTER", "FORGET", old_id) == b"OK"
    call(a, "CLUSTER", "MEET", "127.0.0.1", c.port)
    wait_formed([a, b, c])


def test_pfail_without_majority_then_fail(make_cluster):
    """3 nodes, 2 killed: the survivor alone is no majority (3/2+1 = 2 with itself), so
    both stay PFAIL (priority 10). When one comes back, the two of them are a majority
    and the other one becomes FAIL (priority 100) on both."""
    a, b, c = make_cluster(3)
    b_id, c_id = myid(b), myid(c)
    b.kill()
    c.kill()
    for node_id in (b_id, c_id):
        wait_flags([a], node_id, "fail?")
        assert priority_seen_by(a, node_id) == b"10"
    assert cluster_info(a)["cluster_reachable_nodes"] == "0"
    assert_stays(lambda: flags_seen_by(a, b_id) == ("fail?",)
                 and flags_seen_by(a, c_id) == ("fail?",),
                 3 * NODE_TIMEOUT / 1000, "PFAIL must not become FAIL without a majority")

    b.start()
    wait_flags([a, b], c_id, "fail")
    assert priority_seen_by(a, c_id) == b"100" and priority_seen_by(b, c_id) == b"100"
    # b's gossip can reach a before a's own link to b is back: polled
    wait_for(lambda: flags_seen_by(a, b_id) == () and flags_seen_by(b, myid(a)) == (), 10,
             0.05, "a and b to see each other healthy")
    assert priority_seen_by(a, b_id) == b"1"

    c.start()
    wait_formed([a, b, c])


def test_fail_needs_majority_of_five(make_cluster):
    """5 nodes: FAIL needs 5/2+1 = 3 voters. With 2 down the 3 survivors mark both FAIL;
    with a third down the 2 left can only see it PFAIL."""
    nodes = make_cluster(5)
    a, b, c, d, e = nodes
    ids = [myid(n) for n in nodes]
    d.kill()
    e.kill()
    for node_id in ids[3:]:
        wait_flags([a, b, c], node_id, "fail")
        for observer in (a, b, c):
            assert priority_seen_by(observer, node_id) == b"100"
    for observer in (a, b, c):
        assert cluster_info(observer)["cluster_size"] == "5"
        wait_for(lambda o=observer: cluster_info(o)["cluster_reachable_nodes"] == "2", 10,
                 0.05, "the 2 live peers reachable")

    c.kill()
    wait_flags([a, b], ids[2], "fail?")
    assert_stays(lambda: all(flags_seen_by(o, ids[2]) == ("fail?",) for o in (a, b)),
                 3 * NODE_TIMEOUT / 1000, "2 voters of 5 must not reach FAIL")
    for observer in (a, b):
        assert priority_seen_by(observer, ids[2]) == b"10"
        assert flags_seen_by(observer, ids[3]) == ("fail",)
        assert flags_seen_by(observer, ids[4]) == ("fail",)

    for node in (c, d, e):
        node.start()
    wait_formed(nodes)
    assert [myid(n) for n in nodes] == ids


# -- LEAVING, FORGET, RESET ------------------------------------------------------------------
@pytest.mark.parametrize("bus_args", BUS_VARIANTS)
def test_leaving_is_gossiped(make_cluster):
    a, b, c = make_cluster(3)
    a_id = myid(a)
    assert call(a, "CLUSTER", "LEAVING", "yes") == b"OK"
    assert cluster_nodes(a)[a_id].flags == ("myself", "leaving")
    assert priority_seen_by(a, a_id) == b"100"
    wait_flags([b, c], a_id, "leaving")
    for observer in (b, c):
        assert flags_seen_by(observer, a_id) == ("leaving",)
        assert cluster_nodes(observer)[a_id].link == "connected"
        assert priority_seen_by(observer, a_id) == b"100"
        assert cluster_info(observer)["cluster_size"] == "3"
        wait_for(lambda o=observer: cluster_info(o)["cluster_reachable_nodes"] == "1", 10,
                 0.05, "a leaving node not reachable")

    assert call(a, "CLUSTER", "LEAVING", "no") == b"OK"
    wait_formed([a, b, c])
    for observer in (a, b, c):
        assert priority_seen_by(observer, a_id) == b"1"


def test_forget(make_cluster):
    a, b, c = make_cluster(3)
    a_id, c_id = myid(a), myid(c)
    assert error_of(a, "CLUSTER", "FORGET", "abc") == "Invalid node identifier"
    assert error_of(a, "CLUSTER", "FORGET", c_id + "0") == "Invalid node identifier"
    unknown = "0" * 40
    assert error_of(a, "CLUSTER", "FORGET", unknown) == f"Unknown node {unknown}"
    assert error_of(a, "CLUSTER", "FORGET", a_id) == "I tried hard but I can't forget myself..."

    assert call(a, "CLUSTER", "FORGET", c_id) == b"OK"
    assert c_id not in cluster_nodes(a)
    assert c_id not in hello(a)
    info = cluster_info(a)
    assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"],
            info["cluster_size"]) == ("2", "1", "2")
    # b keeps gossiping about c and c keeps PINGing a: the forgotten node stays out
    # (blacklisted), it does not come back by gossip
    wait_more_messages(a, 10)
    assert c_id not in cluster_nodes(a)
    assert cluster_info(a)["cluster_known_nodes"] == "2"
    assert error_of(a, "CLUSTER", "FORGET", c_id) == f"Unknown node {c_id}"

    # an explicit MEET brings it back
    meet(a, c)
    wait_formed([a, b, c])


@pytest.mark.parametrize("bus_args", BUS_VARIANTS)
def test_reset_soft_keeps_id_hard_gives_new_one(make_cluster):
    a, b, c = make_cluster(3)
    a_id, c_id = myid(a), myid(c)
    job = call(c, "ADDJOB", "q", "body", 0, "REPLICATE", 1)
    assert job.startswith(b"D-") and call(c, "QLEN", "q") == 1
    assert error_of(c, "CLUSTER", "RESET", "MEDIUM") == "syntax error"

    assert call(c, "CLUSTER", "RESET", "SOFT") == b"OK"
    assert myid(c) == c_id
    assert list(cluster_nodes(c)) == [c_id]
    info = cluster_info(c)
    assert (info["cluster_known_nodes"], info["cluster_reachable_nodes"],
            info["cluster_size"]) == ("1", "0", "1")
    assert call(c, "QLEN", "q") == 0 and call(c, "SHOW", job) is None
    assert [n.id for n in parse_nodes((c.dir / "nodes.conf").read_text())] == [c_id]
    # a and b still PING it, but PINGs from unknown nodes don't add them back
    wait_more_messages(c, 5)
    assert list(cluster_nodes(c)) == [c_id]

    meet(c, a)
    wait_formed([a, b, c])

    job = call(c, "ADDJOB", "q", "body", 0, "REPLICATE", 1)
    assert call(c, "CLUSTER", "RESET", "HARD") == b"OK"
    new_id = myid(c)
    assert new_id != c_id and re.fullmatch(r"[0-9a-f]{40}", new_id)
    lines = cluster_nodes(c)
    assert list(lines) == [new_id] and lines[new_id].flags == ("myself",)
    assert cluster_info(c)["cluster_known_nodes"] == "1"
    assert call(c, "QLEN", "q") == 0 and call(c, "SHOW", job) is None
    assert [n.id for n in parse_nodes((c.dir / "nodes.conf").read_text())] == [new_id]
    assert call(c, "CLUSTER", "RESET") == b"OK"  # SOFT by default
    assert myid(c) == new_id

    # Join again under the new ID by meeting a only: b learns it by gossip although it
    # still knows the old ID at the same address (as Disque, which handshakes any
    # unknown ID it hears of). The old ID is never answered for again; it stays
    # until forgotten (Disque's suite resets every node, or FORGETs).
    meet(c, a)
    wait_for(lambda: all(new_id in cluster_nodes(n) for n in (a, b)), 10, 0.05,
             "a and b to learn the new ID")
    for observer in (a, b):
        assert c_id in cluster_nodes(observer)
        assert call(observer, "CLUSTER", "FORGET", c_id) == b"OK"
    wait_formed([a, b, c])
    for node in (a, b, c):
        assert set(cluster_nodes(node)) == {a_id, myid(b), new_id}
    # jobs carry the new identity: in their ID and among their holders, everywhere
    for origin in (c, a):
        job = call(origin, "ADDJOB", "q", "body", 5000, "REPLICATE", 3)
        for node in (a, b, c):
            holders = {i.decode() for i in call(node, "SHOW", job)[21]}
            assert holders == {a_id, myid(b), new_id}, (origin.port, node.port)
    assert call(c, "ADDJOB", "q", "x", 5000, "REPLICATE", 1).startswith(
        b"D-" + new_id[:8].encode())


# -- restarts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bus_args", BUS_VARIANTS)
def test_restart_all_nodes_keeps_the_cluster(make_cluster):
    nodes = make_cluster(3, "chain")
    ids = [myid(n) for n in nodes]
    for node in nodes:
        assert node.stop() == 0  # SIGTERM: clean exit, nodes.conf saved
    for node in nodes:
        conf = parse_nodes((node.dir / "nodes.conf").read_text())
        assert {n.id for n in conf} == set(ids)
    for node in nodes:
        node.start()
    assert [myid(n) for n in nodes] == ids
    wait_formed(nodes)
    for node in nodes:
        assert {i: (ip, prio) for i, (ip, _, prio) in hello(node).items()} == {
            i: (LOCALHOST, b"1") for i in ids}


# -- a bus that survives garbage -------------------------------------------------------------
def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def bus_connect(node: DisqProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5)


def frame(*items: object) -> bytes:
    payload = msgpack.packb(list(items), use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def garbage_payloads() -> list[tuple[str, bytes]]:
    rng = random.Random(20240611)
    cases = [
        ("huge length prefix", b"\xff\xff\xff\xff"),
        ("MAX_FRAME + 1 length prefix", struct.pack(">I", MAX_FRAME + 1) + b"x" * 100),
        ("an HTTP request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a RESP command", b"*1\r\n$4\r\nPING\r\n"),
        ("undecodable msgpack", struct.pack(">I", 16) + b"\xc1" * 16),
        ("msgpack that is not a list", struct.pack(">I", 4) + msgpack.packb({"a": 1})),
        ("a short list", frame(VERSION, 0)),
        ("a wrong version", frame(99, "a" * 40, 7711, [], [[0, []]])),
        ("a wrong header type", frame(VERSION, 7711, "a" * 40, [], [[0, []]])),
        ("a message that is not a list", frame(VERSION, "a" * 40, 7711, [], ["ping"])),
        ("a message type that is not an int", frame(VERSION, "a" * 40, 7711, [], [["0", []]])),
        ("a frame with trailing bytes", struct.pack(">I", 3) + b"\x01\x02\x03"),
    ]
    for i in range(20):  # random bodies, announced with their exact length
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        cases.append((f"random frame {i}", struct.pack(">I", len(body)) + body))
    for i in range(5):  # random bytes, the first one making the length > MAX_FRAME
        blob = bytes([rng.randrange((MAX_FRAME >> 24) + 1, 256)]) + bytes(rng.randrange(256) for _ in range(200))
        cases.append((f"random bytes {i}", blob))
    return cases


def test_bus_garbage_closes_the_link_only(make_cluster):
    nodes = make_cluster(3)
    a = nodes[0]
    for name, payload in garbage_payloads():
        with bus_connect(a) as sock:
            sock.sendall(payload)
            assert closed_by_peer(sock), f"link kept open after {name}"
        assert call(a, "PING") == b"PONG", name
    assert "Closing bus link" in a.log()
    # half a frame then silence: that link just waits, the node keeps working
    with bus_connect(a) as idle:
        idle.sendall(struct.pack(">I", 1000) + b"\x95")
        assert call(a, "PING") == b"PONG"
    wait_formed(nodes)


def test_bus_messages_from_strangers_are_ignored(make_cluster):
    """Well-formed frames with nonsense in them, or from a node nobody MEETs: no crash,
    no FAIL forged by a non-member, and the cluster stays formed."""
    nodes = make_cluster(3)
    a, b = nodes[0], nodes[1]
    a_id, b_id = myid(a), myid(b)
    stranger = "f" * 40
    messages = [
        frame(VERSION, stranger, 7711, [], [[3, b_id]]),  # FAIL about b from a non-member
        frame(VERSION, stranger, 7711, [], [[0, "not gossip"]]),
        frame(VERSION, stranger, 7711, [], [[0, [[1, 2, 3], "x", [b_id, "127.0.0.1", -5, "??"]]]]),
        frame(VERSION, stranger, 7711, ["leaving"], [[1, []]]),
        frame(VERSION, stranger, 7711, [], [[200, 1, 2, 3]]),  # unknown type
        frame(VERSION, stranger, 7711, [], [[4, b"\x00" * 10, True]]),  # REPLJOB, non-member
        frame(VERSION, a_id, 7711, [], [[3, b_id]]),  # FAIL "from myself"
    ]
    with bus_connect(a) as sock:
        sock.sendall(b"".join(messages))
        # the PINGs are answered with PONGs: proof they were all read and handled
        sock.settimeout(5)
        assert sock.recv(4)
    assert call(a, "PING") == b"PONG"
    assert stranger not in cluster_nodes(a)
    assert flags_seen_by(a, b_id) == ()
    wait_formed(nodes)


def test_bus_sender_that_is_no_node_is_dropped(start_node):
    """A MEET whose sender is not a node ID (or has an impossible port) must not enter
    the node table: nodes.conf would hold it and the node could not start again."""
    a = start_node("--cluster-node-timeout", str(NODE_TIMEOUT))
    a_id = myid(a)
    for sender, port in [("short-id", 7711), ("z" * 40, 7711), ("ab" * 20, 70000),
                         ("ab" * 20, 0), ("é" * 40, 7711)]:
        with bus_connect(a) as sock:
            sock.sendall(frame(VERSION, sender, port, [], [[2, []]]))  # MEET
            assert closed_by_peer(sock), (sender, port)
    assert list(cluster_nodes(a)) == [a_id]
    assert call(a, "CLUSTER", "SAVECONFIG") == b"OK"
    assert a.stop() == 0
    a.start()
    assert myid(a) == a_id and list(cluster_nodes(a)) == [a_id]


def test_leaving_survives_a_restart(make_cluster):
    """Disque keeps LEAVING in nodes.conf (its loader reads the `leaving` flag) and
    myself's flag is the leaving state: after a restart the node is still leaving."""
    a, b = make_cluster(2)
    a_id = myid(a)
    assert call(a, "CLUSTER", "LEAVING", "yes") == b"OK"
    assert call(a, "CLUSTER", "SAVECONFIG") == b"OK"
    assert a.stop() == 0
    a.start()
    assert cluster_nodes(a)[a_id].flags == ("myself", "leaving")
    assert priority_seen_by(a, a_id) == b"100"
    assert call(a, "CLUSTER", "LEAVING") == b"yes"  # fails: b"no"


def test_nodes_conf_has_no_handshake_nodes(start_node):
    """Disque saves clusterGenNodesDescription(CLUSTER_NODE_HANDSHAKE): nodes still in
    handshake (random temporary IDs) are not written to nodes.conf."""
    a = start_node("--cluster-node-timeout", str(NODE_TIMEOUT))
    assert call(a, "CLUSTER", "MEET", "127.0.0.1", free_port()) == b"OK"
    assert any("handshake" in n.flags for n in cluster_nodes(a).values())
    assert call(a, "CLUSTER", "SAVECONFIG") == b"OK"
    conf = parse_nodes((a.dir / "nodes.conf").read_text())
    assert [n.id for n in conf] == [myid(a)]


# -- cluster-secret ------------------------------------------------------------------------
def test_cluster_secret_keeps_strangers_out(start_node):
    """With cluster-secret, both ends of every bus link prove they know it before any
    message is handled: the nodes that share it form a cluster and replicate; a node
    without it, or with another one, can neither join (MEET either way) nor talk."""
    def secret_node(*args: str) -> DisqProcess:
        return start_node("--cluster-node-timeout", str(NODE_TIMEOUT), *args)

    a, b, c = form_cluster([secret_node("--cluster-secret", "s3cret") for _ in range(3)])
    job_id = call(a, "ADDJOB", "q", "body", 5000, "REPLICATE", 3)
    assert len(call(b, "SHOW", job_id)[21]) == 3  # nodes-delivered
    members = {myid(n) for n in (a, b, c)}
    strangers = [secret_node(), secret_node("--cluster-secret", "guess")]
    for stranger in strangers:
        meet(a, stranger)
        meet(stranger, b)
    assert_stays(lambda: all(only_these_or_handshakes(n, members) for n in (a, b, c)), 3,
                 "a stranger joined the cluster")
    for stranger in strangers:
        assert only_these_or_handshakes(stranger, {myid(stranger)})
    assert "did not prove the cluster secret" in a.log() + b.log()
    # a raw MEET frame without the proof: the link is closed, nothing is added
    with bus_connect(c) as sock:
        sock.sendall(frame(VERSION, "f" * 40, 7711, [], [[2, []]]))
        assert closed_by_peer(sock)
    assert only_these_or_handshakes(c, members)
    wait_formed([a, b, c])


def only_these_or_handshakes(node: DisqProcess, ids: set[str]) -> bool:
    """Whether `node` knows no node but `ids` and nodes in handshake (a MEET's temporary
    IDs, which come and go: one CLUSTER NODES, not two)."""
    return all(node_id in ids or "handshake" in line.flags
               for node_id, line in cluster_nodes(node).items())
