"""Clock offsets between real nodes: each node estimates every peer's clock
from the bus PING/PONG timestamps and shows it in `INFO clock` and /metrics; the log
warns when one is over clock-skew-warn-ms. The machine has one clock, so a skew is
made with DEBUG BUS-CLOCK-SHIFT (the node's PING/PONG timestamps only)."""

from __future__ import annotations

import re
import urllib.request

import pytest
import redis
from support import DisqProcess, assert_stays, call, form_cluster, free_port, myid, wait_for

SHIFT_MS = 700


def peer_clocks(node: DisqProcess) -> dict[str, dict[str, str]]:
    """INFO clock's peer lines, by node ID."""
    text = call(node, "INFO", "clock")
    assert isinstance(text, bytes) and text.startswith(b"# Clock\r\n")
    peers = {}
    for line in text.decode().split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.startswith("peer"):
            fields = dict(item.split("=", 1) for item in value.split(","))
            peers[fields["id"]] = fields
    return peers


def offset_of(observer: DisqProcess, node: DisqProcess) -> tuple[int, int] | None:
    """(offset, uncertainty) in ms of `node`'s clock as `observer` shows it."""
    fields = peer_clocks(observer).get(myid(node), {})
    if "offset_ms" not in fields:
        return None
    return int(fields["offset_ms"]), int(fields["uncertainty_ms"])


def within(observer: DisqProcess, node: DisqProcess, true_offset: int) -> bool:
    """`observer`'s estimate of `node`'s clock holds `true_offset` (ms)."""
    found = offset_of(observer, node)
    return found is not None and abs(found[0] - true_offset) <= found[1]


def clock_warnings(node: DisqProcess, about: DisqProcess, word: str) -> int:
    return sum(1 for line in node.log().splitlines()
               if f"Clock of node {myid(about)}" in line and word in line)


@pytest.fixture
def trio(start_node) -> list[DisqProcess]:
    return form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(3)])


def test_nodes_on_one_machine_see_each_other_in_sync(trio: list[DisqProcess]) -> None:
    for observer in trio:
        others = [n for n in trio if n is not observer]
        wait_for(lambda o=observer, others=others: all(offset_of(o, n) for n in others),
                 10.0, 0.05, "every peer's clock measured")
        for node in others:  # one clock: the offset is 0, within its bound
            assert within(observer, node, 0), (offset_of(observer, node))
        fields = peer_clocks(observer)[myid(others[0])]
        assert fields["ip"] == "127.0.0.1" and int(fields["port"]) == others[0].port
        assert int(fields["rtt_us"]) >= 0
    info = call(trio[0], "INFO", "clock").decode()
    assert "clock_skew_warn_ms:100\r\n" in info and "clock_peers_measured:2\r\n" in info
    # Disque's INFO is unchanged: the section shows only when asked by name.
    for section in ([], ["all"], ["default"]):
        assert b"# Clock" not in call(trio[0], "INFO", *section)


def test_a_skewed_node_is_seen_and_logged_once_per_crossing(trio: list[DisqProcess]) -> None:
    a, b, skewed = trio
    assert call(skewed, "DEBUG", "BUS-CLOCK-SHIFT", SHIFT_MS) == b"OK"
    wait_for(lambda: within(a, skewed, SHIFT_MS) and within(b, skewed, SHIFT_MS)
             and within(skewed, a, -SHIFT_MS), 10.0, 0.05, "the skew measured")
    assert within(a, b, 0)  # the others still agree
    wait_for(lambda: clock_warnings(a, skewed, "over clock-skew-warn-ms (100)"), 5.0, 0.05,
             "the warning")
    # More PONGs (a peer is PINGed every half node timeout at least), no more warnings.
    assert_stays(lambda: clock_warnings(a, skewed, "over clock-skew-warn-ms") == 1, 2.0,
                 "one warning per crossing")
    line = next(x for x in a.log().splitlines() if f"Clock of node {myid(skewed)}" in x)
    found = re.search(r" is \+(\d+) ms \(\+/- (\d+) ms\) off this node's", line)
    assert found and abs(int(found[1]) - SHIFT_MS) <= int(found[2]), line
    # Back in sync: said once as well.
    assert call(skewed, "DEBUG", "BUS-CLOCK-SHIFT", 0) == b"OK"
    wait_for(lambda: clock_warnings(a, skewed, "back within"), 10.0, 0.05, "back within")
    assert within(a, skewed, 0)
    assert clock_warnings(a, skewed, "over clock-skew-warn-ms") == 1


def test_clock_skew_warn_ms_is_a_directive(start_node) -> None:
    node = start_node("--clock-skew-warn-ms", "250")
    assert call(node, "CONFIG", "GET", "clock-skew-warn-ms") == [b"clock-skew-warn-ms", b"250"]
    assert call(node, "CONFIG", "SET", "clock-skew-warn-ms", "0") == b"OK"
    assert call(node, "CONFIG", "GET", "clock-skew-warn-ms") == [b"clock-skew-warn-ms", b"0"]
    assert b"clock_skew_warn_ms:0\r\n" in call(node, "INFO", "clock")
    for bad in ("-1", "abc"):
        with pytest.raises(redis.ResponseError):
            call(node, "CONFIG", "SET", "clock-skew-warn-ms", bad)
    assert call(node, "CONFIG", "GET", "clock-skew-warn-ms") == [b"clock-skew-warn-ms", b"0"]
    with pytest.raises(redis.ResponseError, match="integer"):
        call(node, "DEBUG", "BUS-CLOCK-SHIFT", "soon")


def test_metrics_show_each_peers_clock(start_node) -> None:
    metrics_port = free_port()
    a = start_node("--cluster-node-timeout", "1000", "--metrics-port", str(metrics_port))
    b = start_node("--cluster-node-timeout", "1000")
    form_cluster([a, b])
    call(b, "DEBUG", "BUS-CLOCK-SHIFT", -SHIFT_MS)
    wait_for(lambda: within(a, b, -SHIFT_MS), 10.0, 0.05, "the skew measured")

    def sample(name: str) -> float | None:
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        wanted = f'{name}{{peer="{myid(b)}"}} '
        for line in text.splitlines():
            if line.startswith(wanted):
                return float(line[len(wanted):])
        return None

    offset = sample("disq_peer_clock_offset_seconds")
    uncertainty = sample("disq_peer_clock_uncertainty_seconds")
    assert offset is not None and uncertainty is not None
    assert abs(offset + SHIFT_MS / 1000) <= uncertainty + 0.0015  # (another PONG since)
    rtt = sample("disq_peer_round_trip_seconds")
    assert rtt is not None and rtt >= 0
