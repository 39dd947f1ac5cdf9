"""The membership state machine (disq/cluster/membership.py) without sockets: a few
Membership objects wired by an in-memory network that carries out their actions
(links come up at once, messages arrive in order), on a simulated clock.

Covers the handshake of CLUSTER MEET, gossip spreading a node, PFAIL after the node
timeout, FAIL once a majority reports it (and not before), FAIL cleared by a PONG,
FORGET and its blacklist, the LEAVING flag carried by frame headers, an address taken
over by another node ID (noaddr), and nodes.conf.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from disq.cluster import messages as m
from disq.cluster.actions import Abort, Action, Close, Connect, Reply, Send
from disq.cluster.membership import FORGET_BLACKLIST_MS, ClusterNode, Membership, NodeFlag
from disq.cluster.nodes import flag_names, parse_flag_names, read_records
from disq.ids import new_node_id

TIMEOUT = 1000  # ms, cluster-node-timeout
TICK = 100  # ms, bus.CRON_MS
IP = "127.0.0.1"


@dataclass
class FakeLink:
    """A link as membership sees it (actions.Origin), and where it leads."""
    node: ClusterNode | None  # the node an outbound link reaches; None: inbound
    target: Membership | None = None
    peer_ip: str = IP
    local_ip: str = IP
    pong_queued: bool = False
    closed: bool = False


@dataclass
class Net:
    """Membership objects on one simulated network. Each is reached at IP:port;
    `down` ones neither answer nor tick. Actions are carried out in order, each
    delivery after the ones queued before it."""
    tmp_path: Path
    now: int = 1_000_000
    by_addr: dict[tuple[str, int], Membership] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)  # id() of the members down
    pending: deque[Callable[[], None]] = field(default_factory=deque)
    skew_us: dict[int, int] = field(default_factory=dict)  # id() -> its clock minus now

    def clock_us(self, member: Membership) -> int:
        """The member's wall clock in us (its PING/PONG timestamps)."""
        return self.now * 1000 + self.skew_us.get(id(member), 0)

    def add(self, port: int) -> Membership:
        myself = ClusterNode(new_node_id(), IP, port, NodeFlag.MYSELF)
        member = Membership(myself, str(self.tmp_path / f"nodes-{myself.id}.conf"),
                            node_timeout=lambda: TIMEOUT, rng=random.Random(port))
        self.by_addr[(IP, port)] = member
        return member

    def is_up(self, member: Membership | None) -> bool:
        return member is not None and id(member) not in self.down

    def run(self, member: Membership, actions: list[Action],
            reply: Callable[[list], None] | None = None) -> None:
        for action in actions:
            match action:
                case Send(node, message):
                    link = node.link
                    if node.connected and link is not None and not link.closed:
                        self.pending.append(lambda s=member, out=link, msg=message:
                                            self._deliver(s, out, msg))
                case Reply(message):
                    assert reply is not None and message[0] == m.PONG
                    reply(message)
                case Connect(node):
                    self._dial(member, node)
                case Close(node) | Abort(node):
                    self._drop(member, node)

    def _dial(self, member: Membership, node: ClusterNode) -> None:
        target = self.by_addr.get((node.ip, node.port))
        if not self.is_up(target):
            self.pending.append(lambda: member.link_lost(node))  # refused
            return
        node.link = FakeLink(node, target)
        self.pending.append(lambda: self.run(member, member.link_up(
            node, IP, self.now, self.clock_us(member))))

    def _drop(self, member: Membership, node: ClusterNode) -> None:
        if node.link is not None:
            node.link.closed = True
            node.link = None
            self.pending.append(lambda: member.link_lost(node))

    def _deliver(self, sender: Membership, link: FakeLink, message: list) -> None:
        """`message` from `sender` on its outbound `link`; a PONG comes back on it."""
        target = link.target
        if link.closed or not self.is_up(target) or not self.is_up(sender):
            return
        assert target is not None

        def pong(answer: list) -> None:
            if not link.closed:
                self.run(sender, sender.receive(link, *self.header(target), answer[0],
                                                answer[1:], self.now, self.clock_us(sender)))

        inbound = FakeLink(None)
        self.run(target, target.receive(inbound, *self.header(sender), message[0],
                                        message[1:], self.now, self.clock_us(target)), pong)

    @staticmethod
    def header(member: Membership) -> tuple[str, int, list[str]]:
        """Sender ID, port and flags, as every frame's header carries them."""
        return member.myself.id, member.myself.port, ["leaving"] if member.leaving else []

    def settle(self) -> None:
        for _ in range(10_000):
            if not self.pending:
                return
            self.pending.popleft()()
        raise AssertionError("the network never settles")

    def meet(self, member: Membership, other: Membership) -> None:
        self.run(member, member.meet(other.myself.ip, other.myself.port, self.now))
        self.settle()

    def advance(self, ms: int) -> None:
        """Let `ms` pass, a cron tick every TICK on every member up."""
        for _ in range(ms // TICK):
            self.now += TICK
            for member in list(self.by_addr.values()):
                if self.is_up(member):
                    self.run(member, member.tick(self.now, self.clock_us(member)))
            self.settle()

    def kill(self, member: Membership) -> None:
        """The process dies: every link to it breaks."""
        self.down.add(id(member))
        for other in self.by_addr.values():
            for node in other.nodes.values():
                if node.link is not None and node.link.target is member:
                    self._drop(other, node)
        self.settle()

    def revive(self, member: Membership) -> None:
        self.down.discard(id(member))


def flags_of(observer: Membership, member: Membership) -> NodeFlag | None:
    node = observer.nodes.get(member.myself.id)
    return None if node is None else node.flags


def known(observer: Membership) -> set[str]:
    return {n.id for n in observer.nodes.values() if NodeFlag.HANDSHAKE not in n.flags}


def mesh(net: Net, count: int) -> list[Membership]:
    """`count` members that all know each other, links up, no flags."""
    members = [net.add(7711 + i) for i in range(count)]
    for other in members[1:]:
        net.meet(members[0], other)
    net.advance(3000)
    ids = {member.myself.id for member in members}
    for member in members:
        assert known(member) == ids
        assert all(n.flags in (NodeFlag(0), NodeFlag.MYSELF) and n.connected | n.is_myself
                   for n in member.nodes.values())
    return members


@pytest.fixture
def net(tmp_path: Path) -> Net:
    return Net(tmp_path)


# -- handshake ----------------------------------------------------------------------------
def test_meet_starts_a_handshake_under_a_temporary_id(net: Net) -> None:
    a, b = net.add(7711), net.add(7712)
    actions = a.meet(IP, 7712, net.now)
    [temp] = [n for n in a.nodes.values() if n is not a.myself]
    assert actions == [Connect(temp)]
    assert temp.flags == NodeFlag.HANDSHAKE | NodeFlag.MEET and temp.id != b.myself.id
    assert a.meet(IP, 7712, net.now) == []  # already in progress
    assert a.size() == 1 and a.known_id_map() == {a.myself.id: a.myself.id}
    # The link is up: a MEET goes first, with gossip.
    temp.link = FakeLink(temp, b)
    [send] = a.link_up(temp, IP, net.now)
    assert send == Send(temp, [m.MEET, [], net.now * 1000]) and temp.connected  # sent at (us)


def test_meet_and_pong_make_both_nodes_known(net: Net) -> None:
    a, b = net.add(7711), net.add(7712)
    net.meet(a, b)
    assert known(a) == known(b) == {a.myself.id, b.myself.id}
    assert flags_of(a, b) == flags_of(b, a) == NodeFlag(0)
    assert a.nodes[b.myself.id].port == 7712 and b.nodes[a.myself.id].port == 7711
    assert a.dirty and b.dirty  # nodes.conf to save
    assert a.size() == b.size() == 2


def test_meeting_myself_is_given_up(net: Net) -> None:
    a = net.add(7711)
    net.meet(a, a)
    assert list(a.nodes) == [a.myself.id]


def test_an_unanswered_handshake_is_given_up(net: Net) -> None:
    a = net.add(7711)
    net.run(a, a.meet(IP, 7799, net.now))  # nobody there
    net.settle()
    assert len(a.nodes) == 2
    net.advance(TIMEOUT + TICK)
    assert list(a.nodes) == [a.myself.id]


def test_a_meet_from_a_stranger_adds_it_and_is_answered(net: Net) -> None:
    a = net.add(7711)
    stranger = new_node_id()
    actions = a.receive(FakeLink(None, peer_ip="127.0.0.9"), stranger, 7000, [], m.MEET,
                        [[]], net.now)
    node = a.nodes[stranger]
    assert (node.ip, node.port, node.flags) == ("127.0.0.9", 7000, NodeFlag(0))
    assert actions == [Connect(node), Reply([m.PONG, [[stranger, "127.0.0.9", 7000, [],
                                                       net.now, 0]]])]
    # A PING from a node not known is answered, and ignored.
    other = new_node_id()
    actions = a.receive(FakeLink(None), other, 7001, [], m.PING, [[]], net.now)
    assert [type(x) for x in actions] == [Reply] and other not in a.nodes
    # One PONG a loop turn answers every PING of a link.
    assert a.receive(FakeLink(None, pong_queued=True), stranger, 7000, [], m.PING, [[]],
                     net.now) == []


# -- gossip -------------------------------------------------------------------------------
def test_gossip_spreads_a_node(net: Net) -> None:
    a, b, c = net.add(7711), net.add(7712), net.add(7713)
    net.meet(a, b)
    net.meet(c, b)
    # b's PONG told c of a (c's PING to a got its ID); a ignores PINGs from strangers.
    assert a.myself.id in known(c) and c.myself.id not in a.nodes
    net.advance(2000)  # b's PINGs tell a of c
    ids = {a.myself.id, b.myself.id, c.myself.id}
    assert known(a) == known(b) == known(c) == ids
    assert a.nodes[c.myself.id].connected and c.nodes[a.myself.id].connected


def test_gossip_names_flags_as_the_wire_does(net: Net) -> None:
    a, b = mesh(net, 2)
    node = a.nodes[b.myself.id]
    node.flags |= NodeFlag.PFAIL | NodeFlag.LEAVING
    [[node_id, ip, port, names, ping_sent, pong_received]] = a.gossip()
    assert (node_id, ip, port, names) == (b.myself.id, IP, 7712, ["fail?", "leaving"])
    assert (ping_sent, pong_received) == (node.ping_sent, node.pong_received)
    node.flags = NodeFlag.FAIL | NodeFlag.NOADDR  # noaddr is not gossiped
    assert a.gossip()[0][3] == ["fail"]


def test_flag_names_are_disques() -> None:
    every = NodeFlag.MYSELF | NodeFlag.PFAIL | NodeFlag.FAIL | NodeFlag.HANDSHAKE | (
        NodeFlag.NOADDR | NodeFlag.LEAVING | NodeFlag.MEET)
    assert flag_names(every) == ["myself", "fail?", "fail", "handshake", "noaddr", "leaving"]
    assert parse_flag_names(["fail?", "x", 3, ["fail"], "leaving", "meet"]) == (
        NodeFlag.PFAIL | NodeFlag.LEAVING)


# -- failure detection --------------------------------------------------------------------
def test_pfail_after_the_node_timeout(net: Net) -> None:
    a, b, c = mesh(net, 3)
    net.kill(c)
    net.advance(TIMEOUT - 2 * TICK)
    assert NodeFlag.PFAIL not in flags_of(a, c) and NodeFlag.PFAIL not in flags_of(b, c)
    net.advance(4 * TICK)
    # ... and FAIL: each gossips its PFAIL to the other, a majority of 3.
    net.advance(2 * TIMEOUT)
    assert flags_of(a, c) == flags_of(b, c) == NodeFlag.FAIL
    assert a.reachable() == [a.nodes[b.myself.id]]


def test_fail_needs_a_majority_of_reports(net: Net) -> None:
    members = mesh(net, 5)
    a, b, c, d, gone = members
    ms = a.nodes[gone.myself.id]
    ms.flags |= NodeFlag.PFAIL
    ms.ping_sent = net.now - TIMEOUT - 1

    def report(reporter: Membership, flags: list[str], at: int) -> list[Action]:
        entry = [gone.myself.id, IP, gone.myself.port, flags, 0, 0]
        return a.receive(FakeLink(None), reporter.myself.id, reporter.myself.port, [],
                         m.PING, [[entry]], at)

    report(b, ["fail?"], net.now)
    assert ms.flags == NodeFlag.PFAIL  # 2 of 5: not a majority
    report(c, [], net.now)  # c reaches it: no report from c
    assert list(ms.fail_reports) == [b.myself.id]
    # A report lasts twice the node timeout: b's is too old by the time d reports.
    later = net.now + 2 * TIMEOUT + 1
    report(d, ["fail"], later)
    assert ms.flags == NodeFlag.PFAIL and list(ms.fail_reports) == [d.myself.id]
    actions = report(c, ["fail?"], later)  # a, c and d: 3 of 5
    assert ms.flags == NodeFlag.FAIL and ms.fail_time == later
    sends = [x for x in actions if isinstance(x, Send)]
    # Told to every node with a link up (the failing one too: its link still is).
    assert {x.node.id for x in sends} == {n.myself.id for n in members[1:]}
    assert all(x.message == [m.FAIL, gone.myself.id] for x in sends)


def test_a_fail_message_marks_the_node_failed(net: Net) -> None:
    a, b, c = mesh(net, 3)
    assert a.receive(FakeLink(None), b.myself.id, 7712, [], m.FAIL, [c.myself.id],
                     net.now) == []
    assert flags_of(a, c) == NodeFlag.FAIL
    a.receive(FakeLink(None), b.myself.id, 7712, [], m.FAIL, [a.myself.id], net.now)
    assert a.myself.flags == NodeFlag.MYSELF  # not myself


def test_fail_is_cleared_when_the_node_answers(net: Net) -> None:
    a, b, c = mesh(net, 3)
    net.kill(c)
    net.advance(3 * TIMEOUT)
    assert flags_of(a, c) == flags_of(b, c) == NodeFlag.FAIL
    net.revive(c)
    net.advance(TIMEOUT)
    assert flags_of(a, c) == flags_of(b, c) == NodeFlag(0)
    assert not a.nodes[c.myself.id].fail_reports
    assert len(a.reachable()) == 2


def test_a_stuck_link_is_dropped(net: Net) -> None:
    """No PONG for half the node timeout on a link up: dropped, to reconnect."""
    a, b = mesh(net, 2)
    node = a.nodes[b.myself.id]
    node.ping_sent = net.now  # a PING that never gets its PONG
    node.last_connect = net.now - TIMEOUT
    assert Abort(node) not in a.tick(net.now + TIMEOUT // 2)
    assert Abort(node) in a.tick(net.now + TIMEOUT // 2 + 1)


# -- forget, reset, leaving -----------------------------------------------------------------
def test_forget_blacklists_the_node_for_a_while(net: Net) -> None:
    a, b, c = mesh(net, 3)
    a.dirty = False
    node = a.nodes[c.myself.id]
    assert a.forget(c.myself.id, net.now) == [Close(node)]
    assert c.myself.id not in a.nodes and a.dirty
    net._drop(a, node)
    net.settle()
    # Gossip (b knows c) and a MEET from c do not bring it back...
    net.advance(3000)
    assert c.myself.id not in a.nodes
    assert not [n for n in a.nodes.values() if NodeFlag.HANDSHAKE in n.flags]
    assert a.receive(FakeLink(None), c.myself.id, 7713, [], m.MEET, [[]], net.now) == []
    assert c.myself.id not in a.nodes
    # ... until the blacklist expires.
    net.advance(FORGET_BLACKLIST_MS)
    assert c.myself.id in known(a) and not a.blacklist


def test_reset_forgets_every_other_node(net: Net) -> None:
    a, b, c = mesh(net, 3)
    a.blacklist["x" * 40] = net.now + 1
    actions = a.reset()
    assert sorted(x.node.id for x in actions) == sorted([b.myself.id, c.myself.id])
    assert all(isinstance(x, Close) for x in actions)
    assert list(a.nodes) == [a.myself.id] and not a.blacklist and a.size() == 1
    new_id = new_node_id()
    a.set_my_id(new_id)
    assert list(a.nodes) == [new_id] and a.myself.id == new_id


def test_leaving_travels_in_frame_headers(net: Net) -> None:
    a, b, c = mesh(net, 3)
    a.set_leaving(True)
    assert a.leaving and a.myself.flags == NodeFlag.MYSELF | NodeFlag.LEAVING
    net.advance(2000)
    assert flags_of(b, a) == flags_of(c, a) == NodeFlag.LEAVING
    assert a.myself.id not in {n.id for n in b.reachable()}
    # Any frame says so, not only the membership messages (note_sender).
    a.set_leaving(False)
    changes = b.changes
    assert b.note_sender(b.nodes[a.myself.id], 7711, []) and b.changes == changes + 1
    assert not b.note_sender(b.nodes[a.myself.id], 7711, [])
    assert flags_of(b, a) == NodeFlag(0)
    net.advance(2000)
    assert flags_of(c, a) == NodeFlag(0)


# -- an address taken over by another ID ------------------------------------------------------
def test_an_address_taken_over_by_another_id_becomes_noaddr(net: Net) -> None:
    a, b, c = mesh(net, 3)
    old_id = b.myself.id
    net.kill(b)  # restarted without its nodes.conf: a new ID at the same address
    del net.by_addr[(IP, 7712)]
    new_b = net.add(7712)
    net.advance(TIMEOUT)  # a reconnects to the address, the PONG names another ID
    old = a.nodes[old_id]
    assert NodeFlag.NOADDR in old.flags and (old.ip, old.port) == ("", 0)
    assert not old.linked
    assert "noaddr" in old.describe()
    net.advance(4 * TIMEOUT)  # it never answers again: PFAIL, then FAIL (2 of 3)
    assert old.flags == NodeFlag.NOADDR | NodeFlag.FAIL
    assert flags_of(c, b) == NodeFlag.NOADDR | NodeFlag.FAIL
    # The new ID is met as any node; the old one can be forgotten.
    net.meet(a, new_b)
    assert new_b.myself.id in known(a)
    a.forget(old_id, net.now)
    assert known(a) == {a.myself.id, c.myself.id, new_b.myself.id}


def test_gossip_gives_a_noaddr_node_its_address_back_only_when_failing(net: Net) -> None:
    a, b, c = mesh(net, 3)
    node = a.nodes[c.myself.id]
    node.flags |= NodeFlag.NOADDR
    node.ip, node.port = "", 0
    entry = [c.myself.id, IP, 7713, [], 0, 0]
    a.receive(FakeLink(None), b.myself.id, 7712, [], m.PING, [[entry]], net.now)
    assert node.ip == ""  # not failing here: the stale address stays away
    node.flags |= NodeFlag.PFAIL
    a.receive(FakeLink(None), b.myself.id, 7712, [], m.PING,
              [[[c.myself.id, IP, 7713, ["fail?"], 0, 0]]], net.now)
    assert node.ip == ""  # the sender does not reach it either
    a.receive(FakeLink(None), b.myself.id, 7712, [], m.PING, [[entry]], net.now)
    assert (node.ip, node.port) == (IP, 7713) and NodeFlag.NOADDR not in node.flags


# -- nodes.conf ---------------------------------------------------------------------------
def test_nodes_conf_round_trip(net: Net, tmp_path: Path) -> None:
    a, b, c = mesh(net, 3)
    a.nodes[b.myself.id].flags = NodeFlag.PFAIL | NodeFlag.LEAVING
    a.nodes[c.myself.id].flags = NodeFlag.FAIL
    a.set_leaving(True)
    a.meet(IP, 7799, net.now)  # a handshake: not saved
    a.save()
    text = Path(a.config_path).read_text()
    assert f"{a.myself.id} {IP}:7711 myself,leaving 0 0 connected\n" in text
    assert f" {IP}:7712 fail?,leaving " in text and f" {IP}:7713 fail " in text
    assert "handshake" not in text and len(text.splitlines()) == 3
    loaded = Membership.load_or_create(a.config_path, 7711)
    assert loaded.restored and loaded.myself.id == a.myself.id and loaded.leaving
    assert loaded.nodes[b.myself.id].flags == NodeFlag.LEAVING  # PFAIL is not kept
    assert loaded.nodes[c.myself.id].flags == NodeFlag.FAIL
    created = Membership.load_or_create(str(tmp_path / "new.conf"), 7720)
    assert not created.restored and (tmp_path / "new.conf").read_text() == (
        f"{created.myself.id} :7720 myself 0 0 connected\n")


def test_nodes_conf_keeps_other_parts_records_after_the_nodes(net: Net) -> None:
    """Records (CRON's schedules) follow the node lines; loading the nodes skips them,
    `read_records` gives them back by kind, a payload that is no base64 is dropped."""
    (a,) = mesh(net, 1)
    a.records = lambda: [("cron", b"\x00first \n"), ("cron", b"second"), ("other", b"")]
    a.save(fsync=False)
    text = Path(a.config_path).read_text()
    assert text.splitlines()[0].startswith(a.myself.id) and "cron AGZpcnN0IAo=" in text
    with open(a.config_path, "a") as fh:
        fh.write("cron not*base64\n")
    assert read_records(a.config_path) == {"cron": [b"\x00first \n", b"second"],
                                           "other": [b""]}
    loaded = Membership.load_or_create(a.config_path, 7711)
    assert loaded.restored and list(loaded.nodes) == [a.myself.id]
    assert read_records(a.config_path + ".missing") == {}


# -- clock offsets ------------------------------------------------------------------------
def offset_seen_by(net: Net, observer: Membership, member: Membership) -> tuple[int, int]:
    """(offset, uncertainty) in ms of `member`'s clock as `observer` estimates it now."""
    clock = observer.nodes[member.myself.id].clock
    assert clock is not None
    estimate = clock.estimate_ms(net.clock_us(observer))
    assert estimate is not None
    return estimate


def test_pings_and_pongs_carry_the_clocks_and_each_peer_gets_an_offset(net: Net) -> None:
    a, b = net.add(7711), net.add(7712)
    net.skew_us[id(b)] = 250_000  # b's clock is 250 ms ahead
    net.meet(a, b)
    net.advance(2000)
    # No delay on this network: the round trip is 0 and the offset exact.
    assert offset_seen_by(net, a, b) == (250, 1)
    assert offset_seen_by(net, b, a) == (-250, 1)


def test_a_pong_echoes_the_ping_time_with_the_receivers(net: Net) -> None:
    a = net.add(7711)
    sender = new_node_id()
    [reply] = a.receive(FakeLink(None), sender, 7712, [], m.PING, [[], 123_456], net.now,
                        now_us=999_000)
    assert reply == Reply([m.PONG, [], 123_456, 999_000])
    # A PING without a time (or a bad one) gets a PONG without times.
    for fields in ([[]], [[], "x"], [[], -1], [[], 2**63], [[], True]):
        [reply] = a.receive(FakeLink(None), sender, 7712, [], m.PING, fields, net.now)
        assert reply == Reply([m.PONG, []]), fields


def test_a_pong_with_bad_times_is_no_sample(net: Net) -> None:
    a, b = mesh(net, 2)
    node = a.nodes[b.myself.id]
    node.clock = None
    now_us = net.clock_us(a)
    for times in (["x", 1], [now_us, None], [now_us + 10, now_us],  # back before it left
                  [now_us - 61_000_000, now_us], [-5, now_us], [now_us, 2**64 - 1]):
        a.receive(node.link, b.myself.id, 7712, [], m.PONG, [[], *times], net.now, now_us)
        assert node.clock is None or node.clock.estimate(now_us) is None, times


def test_clock_skew_is_logged_once_per_crossing(net: Net, caplog: pytest.LogCaptureFixture
                                                ) -> None:
    limit = [100]
    a, b = mesh(net, 2)
    a.clock_skew_warn = lambda: limit[0]
    caplog.set_level("INFO", logger="disq")

    def clock_lines(word: str) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.getMessage().startswith(f"Clock of node {b.myself.id}") and word in
                r.getMessage()]

    net.advance(2000)
    assert not clock_lines("")  # in sync
    net.skew_us[id(b)] = 150_000  # b's clock is set 150 ms ahead
    net.advance(3000)  # several PONGs
    assert clock_lines("over") == [
        f"Clock of node {b.myself.id} is +150 ms (+/- 1 ms) off this node's, over "
        f"clock-skew-warn-ms (100): keep the nodes' clocks in sync (NTP)."]
    limit[0] = 200  # CONFIG SET: within the limit from the next PONG
    net.advance(2000)
    assert len(clock_lines("back within")) == 1
    limit[0] = 0  # no warning at all
    net.skew_us[id(b)] = -900_000
    net.advance(2000)
    assert len(clock_lines("over")) == 1
    limit[0] = 100
    net.advance(2000)
    assert len(clock_lines("over")) == 2 and "-900 ms" in clock_lines("over")[1]


def test_a_node_met_at_a_new_address_is_dialled_there(net: Net) -> None:
    """A node restarted elsewhere with its nodes.conf (a pod given a new IP): its peers
    keep its ID at the old address, failing (its PINGs carry its port, not its IP),
    until a CLUSTER MEET of the new one; its handshake names the known ID, which takes
    the new address."""
    a, b, c = mesh(net, 3)
    moved_id = b.myself.id
    net.kill(b)
    net.advance(4 * TIMEOUT)
    assert flags_of(a, b) & NodeFlag.FAIL
    del net.by_addr[(IP, 7712)]
    net.by_addr[("127.0.0.2", 7712)] = b
    b.myself.ip = "127.0.0.2"
    net.down.discard(id(b))
    net.advance(2 * TIMEOUT)
    assert flags_of(a, b) & NodeFlag.FAIL  # still dialled at the old address
    net.meet(a, b)  # the operator (or a Kubernetes sidecar) meets the new address
    node = a.nodes[moved_id]
    assert (node.ip, node.port) == ("127.0.0.2", 7712)
    assert known(a) == {a.myself.id, moved_id, c.myself.id}  # no second entry for it
    net.advance(2 * TIMEOUT)
    assert not flags_of(a, b) & (NodeFlag.FAIL | NodeFlag.PFAIL)
