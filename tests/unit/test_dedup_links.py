"""A DEDUP key given two jobs by a node asking before its links are up: a node
restarted (kill -9: it has forgotten its keys, nodes.conf still lists its peers)
asks every peer it can send to, and right after it started it has no link yet to a
live peer that knows the key. Deterministic, over test_replication's in-memory bus
(`FakeBus.unlinked`: the peers a node has no link to, and whether its dial failed).

The rule: a peer that is not known failing and that this node has not failed to reach
(never dialled since it started, or dialled again after its link dropped, until that
dial fails) is asked once its link is up: the ADDJOB waits for it, within the 2 s the
other peers have to answer (then -NOREPL: try again). A peer whose dial failed, or
that is PFAIL/FAIL, is not waited for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from bench.common import free_port
from disq.cluster.bus import BUS_PORT_OFFSET, ClusterBus
from disq.cluster.membership import ClusterNode, Membership, NodeFlag
from disq.ids import new_node_id
from disq.node import now_ms
from disq.replication.dedup_queries import DEDUP_TIMEOUT_MS, RECHECK_MS

from .test_dedup import dedup_add, queued, scoped
from .test_replication import Member, Network, cluster

KEY = b"k"


def known_by_one(net: Network, members: list[Member]) -> bytes:
    """b adds a job with KEY and REPLICATE 1 (its copies cannot check the key: it
    asks a and c, then keeps the job alone). Returns the ADDJOB's reply."""
    b = members[1]
    first: list[bytes] = []
    dedup_add(b, KEY, first, repl=1)
    net.pump()
    assert len(first) == 1 and first[0].startswith(b"+D-"), first
    return first[0]


def later(polls: int) -> int:
    """The time of the `polls`th look at the peers being reached."""
    return now_ms() + polls * (RECHECK_MS + 1)


def restart(member: Member, peers: list[Member]) -> None:
    """kill -9 and restart: its keys and reservations are gone, and it has no link
    yet to `peers` (nodes.conf lists them: not dialled yet)."""
    member.node.dedup.clear()
    member.node.dedup_since = now_ms()
    member.bus.unlinked = {x.id: False for x in peers}


def test_a_just_restarted_node_waits_for_a_peer_it_has_not_reached_yet() -> None:
    """c restarts, reaches a but not b yet; a client's ADDJOB of b's key on c must
    get b's job, not a second one (before: c asked a alone and added its own)."""
    net, members = cluster(3)
    a, b, c = members
    first = known_by_one(net, members)
    restart(c, [b])
    second: list[bytes] = []
    dedup_add(c, KEY, second, repl=1)
    net.pump()
    assert second == [], "added before asking b"
    c.repl.dedup.queries.check(later(1))  # still no link: nothing changes
    net.pump()
    assert second == [] and not c.node.jobs
    del c.bus.unlinked[b.id]  # the first dial to b succeeded
    c.repl.dedup.queries.check(later(2))
    net.pump()
    assert second == [first]
    assert queued(members) == 1


def test_a_link_dialled_again_is_waited_for_as_well() -> None:
    """The link from c to b dropped (b is alive, it knows the key) and is being
    dialled again: c waits for it as for a first dial."""
    net, members = cluster(3)
    a, b, c = members
    first = known_by_one(net, members)
    c.node.dedup.clear()  # (c asked about nothing: it never knew the key)
    c.bus.unlinked = {b.id: False}
    second: list[bytes] = []
    dedup_add(c, KEY, second, repl=1)
    net.pump()
    assert second == []
    del c.bus.unlinked[b.id]
    c.repl.dedup.queries.check(later(1))
    net.pump()
    assert second == [first] and queued(members) == 1


def test_a_peer_whose_dial_failed_is_not_waited_for() -> None:
    """Availability: a peer c could not connect to (killed: connection refused) is
    skipped as before, without waiting until it is PFAIL."""
    net, members = cluster(3)
    a, b, c = members
    restart(c, [b])
    c.bus.unlinked[b.id] = True
    replies: list[bytes] = []
    dedup_add(c, KEY, replies, repl=1)
    net.pump()
    assert len(replies) == 1 and replies[0].startswith(b"+D-")


def test_a_dial_failing_while_the_ask_waits_lets_it_add() -> None:
    net, members = cluster(3)
    a, b, c = members
    restart(c, [b])
    replies: list[bytes] = []
    dedup_add(c, KEY, replies, repl=1)
    net.pump()
    assert replies == []
    c.bus.unlinked[b.id] = True  # connection refused
    c.repl.dedup.queries.check(later(1))
    net.pump()
    assert len(replies) == 1 and replies[0].startswith(b"+D-")
    assert queued(members) == 1


def test_a_peer_never_reached_in_time_fails_the_add_with_norepl() -> None:
    """Its dial neither succeeds nor fails within the 2 s (a SYN nobody answers):
    -NOREPL, nothing added, as for a peer that does not answer; the retry, once the
    dial failed, adds."""
    net, members = cluster(3)
    a, b, c = members
    restart(c, [a, b])
    replies: list[bytes] = []
    dedup_add(c, KEY, replies, repl=1)
    net.pump()
    c.repl.dedup.queries.check(later(1))
    assert replies == []
    del c.bus.unlinked[a.id]  # a comes up, and answers
    c.repl.dedup.queries.check(later(2))
    net.pump()
    assert replies == [] and c.repl.dedup.queries.query(scoped(KEY)).peers == {b.id}
    c.repl.dedup.queries.check(now_ms() + DEDUP_TIMEOUT_MS + 1)
    assert len(replies) == 1 and replies[0].startswith(b"-NOREPL")
    assert not c.node.jobs
    c.bus.unlinked[b.id] = True
    dedup_add(c, KEY, replies, repl=1)
    net.pump()
    assert replies[1].startswith(b"+D-")


def test_a_failing_peer_is_not_waited_for() -> None:
    """PFAIL/FAIL (the in-memory bus's `down`): not reachable, not waited for."""
    net, members = cluster(3)
    a, b, c = members
    restart(c, [b])
    net.down.add(b.id)
    replies: list[bytes] = []
    dedup_add(c, KEY, replies, repl=1)
    net.pump()
    assert len(replies) == 1 and replies[0].startswith(b"+D-")


# -- the real bus: which peers it counts as being reached --------------------------------

async def until(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def test_the_bus_waits_for_a_peer_until_a_dial_to_it_fails(tmp_path: Path) -> None:
    """ClusterBus.reaching_peers: a peer from nodes.conf, not dialled yet, is being
    reached; not once its dial is refused, nor while it is dialled again after that;
    a link that was up and dropped makes it reached again until a dial fails; a link
    given up (stuck) does not."""
    loop = asyncio.get_running_loop()
    myself = ClusterNode(new_node_id(), "127.0.0.1", free_port(), NodeFlag.MYSELF)
    membership = Membership(myself, str(tmp_path / "nodes.conf"))
    bus = ClusterBus(membership, [], myself.port, lambda: 15_000, loop)
    port = free_port()  # nothing listens on its bus port yet
    peer = ClusterNode(new_node_id(), "127.0.0.1", port)
    membership.nodes[peer.id] = peer
    bus._topology_changed()

    def dial() -> None:
        peer.linked = True  # as Membership._connect sets it
        bus._dial(peer)

    assert bus.reaching_peers() == [peer.id]
    dial()
    await until(lambda: not peer.linked, "the dial to fail")
    assert bus.reaching_peers() == []
    accepted: list[asyncio.Transport] = []

    class Accept(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(transport)  # type: ignore[arg-type]

    server = await loop.create_server(Accept, "127.0.0.1", port + BUS_PORT_OFFSET)
    try:
        assert bus.reaching_peers() == []  # (dialled again: still failed so far)
        dial()
        await until(lambda: bus.can_send(peer.id) and accepted, "the link")
        assert bus.reaching_peers() == []  # (asked: not waited for)
        accepted[0].close()  # the link drops: the peer was reached, it is waited for
        await until(lambda: not peer.linked, "the link to drop")
        assert bus.reaching_peers() == [peer.id]
        dial()
        await until(lambda: bus.can_send(peer.id) and len(accepted) == 2, "the link again")
        peer.link.abort()  # stuck (no PONG for half the node timeout)
        await until(lambda: not peer.linked, "the link to go")
        assert bus.reaching_peers() == []
    finally:
        server.close()
        bus.stop()
