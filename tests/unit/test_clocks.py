"""Clock offsets (disq/cluster/clocks.py) on simulated clocks, and the conversion of
another node's time onto this node's clock (disq/replication/clock.py).

A peer's clock is ours + `offset`; a PING leaves at our t0, reaches the peer after a
forward delay, the PONG comes back after a return delay; delays are random and very
asymmetric, the worst case for NTP's "round trip halved"."""

from __future__ import annotations

import random

import pytest

from disq.cluster.clocks import DRIFT_PPM, MAX_RTT_US, SAMPLES_KEPT, PeerClock, to_ms
from disq.cluster.nodes import ClusterNode, NodeFlag
from disq.ids import new_node_id
from disq.replication.clock import to_local_ms

START_US = 1_700_000_000_000_000  # our wall clock, us


def exchange(clock: PeerClock, t0: int, offset: int, forward: int, back: int) -> int:
    """One PING/PONG: returns the time (ours) the PONG arrived."""
    peer_time = t0 + forward + offset
    t3 = t0 + forward + back
    assert clock.add(t0, peer_time, t3)
    return t3


def test_every_estimate_is_within_its_bound_whatever_the_delays() -> None:
    rng = random.Random(18)
    for offset in (0, 1, -1, 250_000, -3_600_000_000, 37_123):
        clock = PeerClock()
        now = START_US
        for _ in range(200):
            forward = rng.choice((50, 200, 5_000, 40_000)) + rng.randrange(1000)
            back = rng.choice((50, 200, 5_000, 40_000)) + rng.randrange(1000)
            now = exchange(clock, now + rng.randrange(1_000_000), offset, forward, back)
            estimate = clock.estimate(now)
            assert estimate is not None
            found, error, rtt = estimate
            assert abs(found - offset) <= error, (offset, found, error)
            # The bound is half the best round trip kept (+ rounding, + the drift
            # since: the samples are under a second apart).
            best = min(s[3] for s in clock.samples)
            assert error <= best // 2 + 2 + SAMPLES_KEPT * DRIFT_PPM and rtt // 2 + 2 <= error
            offset_ms, uncertainty_ms = to_ms(found, error)
            assert offset_ms - uncertainty_ms <= offset / 1000 <= offset_ms + uncertainty_ms


def test_the_sample_of_the_smallest_round_trip_wins() -> None:
    clock = PeerClock()
    # Delays of 10 ms one way and 0.1 ms back: that sample is off by ~5 ms.
    now = exchange(clock, START_US, 500_000, 10_000, 100)
    assert abs(clock.estimate(now)[0] - 500_000) > 4_000
    now = exchange(clock, now + 1_000_000, 500_000, 100, 120)  # a quick one
    for _ in range(5):  # slow, lopsided ones after it
        now = exchange(clock, now + 1_000_000, 500_000, 20_000, 300)
    found, error, rtt = clock.estimate(now)
    assert rtt == 220 and abs(found - 500_000) <= 10 and error < 200
    # It is forgotten once SAMPLES_KEPT newer ones came.
    for _ in range(SAMPLES_KEPT):
        now = exchange(clock, now + 1_000_000, 500_000, 3_000, 3_000)
    assert clock.estimate(now)[2] == 6_000


def test_the_bound_widens_with_the_age_of_the_sample() -> None:
    clock = PeerClock()
    now = exchange(clock, START_US, 0, 100, 100)
    _, error, _ = clock.estimate(now)
    _, later, _ = clock.estimate(now + 100_000_000)  # 100 s on
    assert later == error + 100 * DRIFT_PPM
    # A newer sample with a larger round trip wins once the old one aged enough.
    now = exchange(clock, now + 100_000_000, 0, 600, 600)
    assert clock.estimate(now)[2] == 1200


def test_a_clock_step_shows_at_the_next_pong() -> None:
    clock = PeerClock()
    now = START_US
    for _ in range(SAMPLES_KEPT):
        now = exchange(clock, now + 1_000_000, 0, 50, 50)
    # The peer's clock is set 300 ms ahead: its next PONG contradicts every kept sample.
    now = exchange(clock, now + 1_000_000, 300_000, 2_000, 2_000)
    found, _, _ = clock.estimate(now)
    assert abs(found - 300_000) <= 2_000 and len(clock.samples) == 1
    # Samples that agree, however slow, are kept.
    now = exchange(clock, now + 1_000_000, 300_000, 30_000, 1_000)
    assert len(clock.samples) == 2


def test_nonsense_samples_are_refused() -> None:
    clock = PeerClock()
    assert not clock.add(START_US, START_US, START_US - 1)  # back before it left
    assert not clock.add(START_US, START_US, START_US + MAX_RTT_US + 1)
    assert clock.estimate(START_US) is None and clock.estimate_ms(START_US) is None


@pytest.mark.parametrize("offset_us, error_us, expected", [
    (0, 2, (0, 1)), (499, 2, (0, 1)), (500, 2, (1, 1)), (-500, 0, (0, 1)),
    (-501, 0, (-1, 1)), (250_000, 1_000, (250, 1)), (250_400, 1_000, (250, 2)),
])
def test_ms_bounds_hold_the_us_ones(offset_us: int, error_us: int,
                                     expected: tuple[int, int]) -> None:
    assert to_ms(offset_us, error_us) == expected


# -- to_local_ms ----------------------------------------------------------------------------
class Bus:
    """The clock part of a BusPort."""

    def __init__(self, clocks: dict[str, PeerClock], now_us: int) -> None:
        self.myself = ClusterNode(new_node_id(), "127.0.0.1", 7711, NodeFlag.MYSELF)
        self.clocks = clocks
        self.now_us = now_us

    def clock_offset(self, node_id: str) -> int | None:
        clock = self.clocks.get(node_id)
        estimate = None if clock is None else clock.estimate_ms(self.now_us)
        return None if estimate is None else estimate[0]

    def clock_uncertainty(self, node_id: str) -> int | None:
        clock = self.clocks.get(node_id)
        estimate = None if clock is None else clock.estimate_ms(self.now_us)
        return None if estimate is None else estimate[1]


def test_an_origin_time_is_never_early_here_and_late_by_the_uncertainty_at_most() -> None:
    rng = random.Random(5)
    peer = new_node_id()
    for _ in range(300):
        offset = rng.randrange(-5_000_000, 5_000_000)  # the peer's clock minus ours (us)
        clock = PeerClock()
        now = START_US
        for _ in range(rng.randrange(1, 10)):
            now = exchange(clock, now + rng.randrange(2_000_000), offset,
                           rng.randrange(20, 30_000), rng.randrange(20, 30_000))
        bus = Bus({peer: clock}, now)
        origin_ms = (now + offset) // 1000 + rng.randrange(-10_000, 100_000)  # peer's
        local = to_local_ms(bus, peer, origin_ms)  # type: ignore[arg-type]
        # That instant is origin_ms on the peer's clock, i.e. origin_ms - offset on ours.
        true_local_us = origin_ms * 1000 - offset
        assert local * 1000 >= true_local_us
        _, uncertainty = clock.estimate_ms(now)
        assert local * 1000 - true_local_us <= (2 * uncertainty + 1) * 1000


def test_an_unknown_offset_or_my_own_time_is_left_as_is() -> None:
    bus = Bus({new_node_id(): PeerClock()}, START_US)
    assert to_local_ms(bus, bus.myself.id, 123) == 123  # type: ignore[arg-type]
    assert to_local_ms(bus, new_node_id(), 123) == 123  # type: ignore[arg-type]
    assert to_local_ms(bus, next(iter(bus.clocks)), 123) == 123  # type: ignore[arg-type]
