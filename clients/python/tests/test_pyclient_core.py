"""The client's sans-I/O core (disq_client.core) without a socket: bytes and replies
in, choices out. `Shell` below plays Client's part with scripted nodes, to check the
decisions a real client makes: which node it connects to, where a command goes after a
node broke or refused it, when it gives up."""

from __future__ import annotations

import random
from collections.abc import Callable

import hiredis
import pytest
from disq_client import commands as cmds
from disq_client.cluster import FAILED_PENALTY
from disq_client.core import HELLO_REQUEST, ClientCore, failover_policy, seed_list
from disq_client.errors import (
    AuthenticationError,
    DisqConnectionError,
    LeavingError,
    NoReplicationError,
)
from disq_client.protocol import Address, ErrorReply, encode, new_reader
from disq_client.types import Job

A, B, C = "a" * 40, "b" * 40, "c" * 40
IDS = {1: A, 2: B, 3: C}
H = "127.0.0.1"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def parse(data: bytes) -> object:
    """A reply as the shells get it: RESP bytes through the clients' hiredis reader."""
    reader = new_reader()
    reader.feed(data)
    reply = reader.gets()
    assert reply is not False and reader.gets() is False
    return reply


def hello_bytes(me: int, priorities: dict[int, int]) -> bytes:
    """HELLO's reply as node 127.0.0.1:`me` sends it, listing ports 1..3."""
    out = [b"*%d\r\n:1\r\n$40\r\n%s\r\n" % (2 + len(priorities), IDS[me].encode())]
    for port, prio in priorities.items():
        out.append(b"*4\r\n$40\r\n%s\r\n$9\r\n127.0.0.1\r\n$1\r\n%d\r\n$%d\r\n%d\r\n"
                   % (IDS[port].encode(), port, len(str(prio)), prio))
    return b"".join(out)


def job_from(node_id: str, n: int) -> Job:
    return Job(f"D-{node_id[:8]}-{'x' * 20}{n:04d}-05a1", "q", b"")


def core(seeds: list[str], clock: FakeClock | None = None, **kwargs: int) -> ClientCore:
    return ClientCore(seeds, clock=clock or FakeClock(), rng=random.Random(7), **kwargs)


def test_the_bytes_it_sends_and_the_seeds_it_takes() -> None:
    assert HELLO_REQUEST == b"*1\r\n$5\r\nHELLO\r\n"
    assert seed_list("h:1, h:2,") == ["h:1", "h:2"]
    assert seed_list(("h", 1)) == [("h", 1)]
    assert seed_list([("h", 1), "h:2"]) == [("h", 1), "h:2"]
    assert failover_policy(3).max_attempts == 4 and failover_policy(-1).max_attempts == 1
    with pytest.raises(ValueError):
        ClientCore([])


def test_seeds_in_random_order_then_hello_decides() -> None:
    seeds = [f"{H}:{p}" for p in (1, 2, 3)]
    orders = {tuple(ClientCore(seeds, rng=random.Random(s)).candidates()) for s in range(20)}
    assert len(orders) > 1  # seeds are shuffled: clients spread over them

    c = core([f"{H}:1"])
    assert c.candidates() == [(H, 1)]
    hello = c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1, 3: 5})))
    assert hello.node_id == A and [n.priority for n in hello.nodes] == [1, 1, 5]
    assert c.view.current == (H, 1) and c.view.current_id == A
    assert c.candidates()[-1] == (H, 3)  # priority 5 comes after the fine nodes
    assert c.better_than((H, 1)) == []


def test_a_leaving_seed_is_left_at_once() -> None:
    c = core([f"{H}:1"])
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 100, 2: 1, 3: 10})))
    assert c.better_than((H, 1)) == [(H, 2), (H, 3)]


def test_a_hello_refused_raises_its_error() -> None:
    c = core([f"{H}:1"])
    with pytest.raises(AuthenticationError):
        c.hello_reply((H, 1), parse(b"-NOAUTH Authentication required.\r\n"))
    assert c.view.current is None


def test_an_unreachable_node_goes_last_for_a_while() -> None:
    clock = FakeClock()
    c = core([f"{H}:1"], clock)
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1, 3: 1})))
    c.connect_failed((H, 2))
    c.connect_failed((H, 3))
    assert c.candidates()[0] == (H, 1)
    clock.now += FAILED_PENALTY + 0.1
    assert set(c.candidates()[:2]) != {(H, 1)} and len(c.candidates()) == 3
    assert str(c.no_node(["x: refused", "y: timeout"])) == (
        "no node answered: x: refused; y: timeout")


def test_a_broken_connection_fails_over_until_the_retries_are_spent() -> None:
    c = core([f"{H}:1"], retries=2)
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1, 3: 1})))
    generation = c.generation
    assert c.broken((H, 1), 1) is True
    assert c.view.current is None and c.candidates()[-1] == (H, 1)
    assert c.broken((H, 2), 2) is True
    assert c.broken((H, 3), 3) is False  # the third failure: retries=2 are spent
    assert not c.closed_since(generation)
    c.close()
    assert c.closed_since(generation) and c.view.current is None
    c.retries = 0
    assert c.retries == 0 and c.broken((H, 1), 1) is False


def test_a_preferred_node_comes_first_among_its_equals() -> None:
    """A producer spread over the nodes (a Spark task by its partition) starts on its
    own node, but a node that failed lately or has a worse priority stays behind."""
    clock = FakeClock()
    c = core([f"{H}:1", f"{H}:2", f"{H}:3"], clock)
    c.view.prefer(f"{H}:2")
    assert c.view.preferred == (H, 2) and c.candidates()[0] == (H, 2)
    c.hello_reply((H, 2), parse(hello_bytes(2, {1: 1, 2: 1, 3: 1})))
    assert c.candidates()[0] == (H, 2)
    c.connect_failed((H, 2))
    assert c.candidates()[-1] == (H, 2)
    clock.now += FAILED_PENALTY + 0.1
    assert c.candidates()[0] == (H, 2)
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 5, 3: 1})))
    assert c.candidates()[-1] == (H, 2)  # priority 5: after the fine nodes
    c.view.prefer(None)
    assert c.view.preferred is None


def test_failovers_are_counted() -> None:
    c = core([f"{H}:1"], retries=1)
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1, 3: 1})))
    assert c.failovers == 0
    assert c.broken((H, 1), 1) is True and c.failovers == 1
    assert c.broken((H, 2), 2) is False and c.failovers == 1  # given up: not resent


def test_refusals_raise_or_move_on() -> None:
    c = core([f"{H}:1"], retries=1)
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1, 3: 1})))
    leaving = parse(b"-LEAVING This node is leaving the cluster\r\n")
    assert isinstance(leaving, ErrorReply)
    assert c.refused((H, 1), leaving, 1) is None  # goes to another node...
    assert c.view.current is None and c.view.nodes[(H, 1)].priority == 100
    assert c.candidates()[-1] == (H, 1)  # ...not this one
    with pytest.raises(LeavingError):  # no retry left: the caller sees -LEAVING
        c.refused((H, 2), leaving, 2)
    norepl = parse(b"-NOREPL Timeout reached before replicating to the requested number\r\n")
    assert isinstance(norepl, ErrorReply)
    with pytest.raises(NoReplicationError):  # not a reason to change nodes
        c.refused((H, 2), norepl, 1)


def test_a_consumer_follows_the_producer() -> None:
    c = core([f"{H}:1"], switch_after_jobs=4)
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1, 3: 1})))
    assert c.follow([job_from(B, i) for i in range(3)]) is None
    assert c.follow([job_from(B, 3)]) == (H, 2)


def test_hello_command_refreshes_the_view() -> None:
    c = core([f"{H}:1"])
    c.hello_answered(cmds.hello().parse(parse(hello_bytes(1, {1: 1, 2: 1}))))
    assert len(c.view.nodes) == 1  # no current node: nothing learnt
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1})))
    c.hello_answered(cmds.hello().parse(parse(hello_bytes(1, {1: 1, 2: 10, 3: 1}))))
    assert {a[1]: e.priority for a, e in c.view.nodes.items()} == {1: 1, 2: 10, 3: 1}


def test_a_scan_starts_again_when_the_client_moves() -> None:
    c = core([f"{H}:1"])
    c.hello_reply((H, 1), parse(hello_bytes(1, {1: 1, 2: 1})))
    scan = c.scan()
    assert scan.next() == 0 and scan.answered(5) and not scan.done
    assert scan.next() == 5
    c.hello_reply((H, 2), parse(hello_bytes(2, {1: 1, 2: 1})))  # moved during the page
    assert not scan.answered(9)  # that page's items are dropped
    assert scan.next() == 0 and scan.answered(3)
    c.view.current = (H, 1)  # moved between pages
    assert scan.next() == 0 and scan.answered(0) and scan.done


# -- a shell over the core, with scripted nodes -----------------------------------------------
Node = Callable[[bytes], bytes | None]  # request bytes -> reply bytes; None: it broke


class Shell:
    """What Client does with its core, minus the sockets: `nodes[addr]` answers."""

    def __init__(self, c: ClientCore, nodes: dict[Address, Node]) -> None:
        self.core = c
        self.nodes = nodes
        self.sent: list[tuple[int, bytes]] = []  # (port, request)

    def _send(self, addr: Address, data: bytes) -> object:
        self.sent.append((addr[1], data))
        reply = self.nodes[addr](data)
        if reply is None:
            raise DisqConnectionError(f"{addr}: connection closed")
        return parse(reply)

    def _connection(self) -> Address:
        if self.core.view.current is not None:
            return self.core.view.current
        failures = []
        for addr in self.core.candidates():
            try:
                reply = self._send(addr, HELLO_REQUEST)
            except DisqConnectionError as exc:
                self.core.connect_failed(addr)
                failures.append(str(exc))
                continue
            self.core.hello_reply(addr, reply)
            return addr
        raise self.core.no_node(failures)

    def run(self, cmd: cmds.Cmd[object]) -> object:
        generation, failures = self.core.generation, 0
        while True:
            addr = self._connection()
            try:
                reply = self._send(addr, encode(cmd.args))
            except DisqConnectionError:
                failures += 1
                if self.core.closed_since(generation) or not self.core.broken(addr,
                                                                               failures):
                    raise
                continue
            if isinstance(reply, ErrorReply):
                failures += 1
                self.core.refused(addr, reply, failures)
                continue
            return cmd.parse(reply)


def scripted(me: int, priorities: dict[int, int], on_command: bytes | None) -> Node:
    def answer(data: bytes) -> bytes | None:
        return hello_bytes(me, priorities) if data == HELLO_REQUEST else on_command
    return answer


def test_a_command_goes_to_the_next_node_by_priority() -> None:
    prios = {1: 1, 2: 5, 3: 1}
    shell = Shell(core([f"{H}:1"]), {
        (H, 1): scripted(1, prios, None),  # breaks on the command
        (H, 2): scripted(2, prios, b"+PONG\r\n"),
        (H, 3): scripted(3, prios, b"-LEAVING This node is leaving the cluster\r\n"),
    })
    assert shell.run(cmds.ping()) == "PONG"
    ping = encode(("PING",))
    # 1 broke; 3 (priority 1) came before 2 (priority 5), and said it is leaving
    assert shell.sent == [(1, HELLO_REQUEST), (1, ping), (3, HELLO_REQUEST), (3, ping),
                          (2, HELLO_REQUEST), (2, ping)]
    assert shell.core.view.current == (H, 2)


def test_when_every_node_fails_the_command_raises() -> None:
    prios = {1: 1, 2: 1, 3: 1}
    nodes: dict[Address, Node] = {(H, p): scripted(p, prios, None) for p in (1, 2, 3)}
    shell = Shell(core([f"{H}:1"], retries=2), nodes)
    with pytest.raises(DisqConnectionError, match="connection closed"):
        shell.run(cmds.ping())
    tried = [port for port, data in shell.sent if data != HELLO_REQUEST]
    assert tried[0] == 1 and sorted(tried) == [1, 2, 3]  # each node once, then no retry left
    shell.sent.clear()
    shell.nodes = {addr: (lambda data: None) for addr in nodes}
    with pytest.raises(DisqConnectionError, match="no node answered"):
        shell.run(cmds.ping())
    assert sorted(port for port, _ in shell.sent) == [1, 2, 3]  # each tried once


def test_hiredis_is_what_the_shells_parse_with() -> None:
    """The shells' reader gives error replies as ErrorReply, which the core types."""
    reader = new_reader()
    assert isinstance(reader, hiredis.Reader)
    reader.feed(b"-MAXLEN Queue is already longer than the specified MAXLEN count\r\n")
    assert isinstance(reader.gets(), ErrorReply)
