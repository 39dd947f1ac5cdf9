"""Each peer's clock offset, estimated from the bus's PING/PONG timestamps as NTP does.

A PING carries the pinger's wall clock when it was made (t0, microseconds); the PONG
echoes it with the peer's clock when the PING arrived (tp); the pinger notes its own
clock when the PONG arrives (t3). The peer read its clock somewhere between t0 and t3
of ours, so its offset (its clock minus ours, positive: it is ahead) lies within

    tp - (t0 + t3) / 2  +/-  (t3 - t0) / 2

whatever the delays each way (NTP's offset and delay with t1 = t2 = tp: the time the
PONG waits for the end of the peer's loop turn just counts as delay). That bound holds
for every sample, so `PeerClock` keeps the last SAMPLES_KEPT and trusts the one with
the smallest bound (NTP's clock filter: the minimum round trip), each widened by how
far two clocks may drift apart since it was taken (DRIFT_PPM, NTP's PHI). A new sample
whose bound does not meet an older one's proves the peer's (or this) clock was set
meanwhile: the older ones are dropped, so a step shows at the next PONG.

Microseconds: on a LAN a round trip takes a fraction of a millisecond, which whole
milliseconds would round to 0 (or 1) and blur the bound by a millisecond.
"""

from __future__ import annotations

from typing import Final

SAMPLES_KEPT: Final = 8  # NTP's clock filter keeps 8
DRIFT_PPM: Final = 15  # how fast two disciplined clocks may drift apart (NTP's PHI, 15 us/s)
MAX_RTT_US: Final = 60_000_000  # a PONG slower than this says nothing useful (or is not ours)
_ROUNDING_US: Final = 2  # the three timestamps are whole microseconds (floored)


class PeerClock:
    """The samples of one peer's clock offset; `estimate` is the best bound now.
    `warned`: its offset is over clock-skew-warn-ms and that was logged (membership
    logs once per crossing)."""

    __slots__ = ("samples", "warned")

    def __init__(self) -> None:
        # (taken at, offset, error, round trip) in us: the offset is within +/- error
        # at `taken`; oldest first.
        self.samples: list[tuple[int, int, int, int]] = []
        self.warned = False

    def add(self, sent_us: int, peer_us: int, received_us: int) -> bool:
        """A PING sent at `sent_us` (my clock), seen by the peer at `peer_us` (its
        clock), answered at `received_us` (my clock). False if the sample makes no
        sense (the PONG came back before its PING left, or took over a minute)."""
        rtt = received_us - sent_us
        if not 0 <= rtt <= MAX_RTT_US:
            return False
        offset = peer_us - (sent_us + received_us) // 2
        error = rtt // 2 + _ROUNDING_US
        kept = [s for s in self.samples
                if abs(s[1] - offset) <= s[2] + _drift(received_us - s[0]) + error]
        kept.append((received_us, offset, error, rtt))
        self.samples = kept[-SAMPLES_KEPT:]
        return True

    def estimate(self, now_us: int) -> tuple[int, int, int] | None:
        """(offset, error, round trip) in us of the sample with the smallest error
        now, its drift since included: the peer's clock minus mine is within
        offset +/- error. None before the first sample."""
        best: tuple[int, int, int] | None = None
        for taken, offset, error, rtt in self.samples:
            error += _drift(now_us - taken)
            if best is None or error < best[1]:
                best = (offset, error, rtt)
        return best

    def estimate_ms(self, now_us: int) -> tuple[int, int] | None:
        """`estimate`'s (offset, error) in whole ms (see `to_ms`)."""
        found = self.estimate(now_us)
        return None if found is None else to_ms(found[0], found[1])


def to_ms(offset_us: int, error_us: int) -> tuple[int, int]:
    """(offset, uncertainty) in whole ms such that the ms interval offset +/-
    uncertainty holds the us one offset_us +/- error_us: rounding never narrows it."""
    offset_ms = (offset_us + 500) // 1000
    return offset_ms, -(-(error_us + abs(offset_us - offset_ms * 1000)) // 1000)


def _drift(age_us: int) -> int:
    """How far two clocks may have drifted apart in `age_us` (rounded up)."""
    return -(-max(age_us, 0) * DRIFT_PPM // 1_000_000)
