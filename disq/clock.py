"""The core's clock: wall-clock milliseconds, and the random spread of requeue times."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import Final

TIME_ERROR_MS: Final = 250  # requeue and GC times are spread by +/- this much

_time_ns = time.time_ns


def now_ms() -> int:
    return _time_ns() // 1_000_000  # (int(time.time() * 1000) takes 1.6x as long)


# A random offset in [-TIME_ERROR_MS, TIME_ERROR_MS]: spreads requeues so copies on
# several nodes do not all fire at once. Cycles a precomputed table (a C call).
# (random.choices draws the table in a third of the time randint takes: 0.8 vs 2.7 ms
# at every start)
random_time_error: Callable[[], int] = itertools.cycle(
    random.choices(range(-TIME_ERROR_MS, TIME_ERROR_MS + 1), k=4099)).__next__


def ms_after(now: int, delay_ms: int) -> int:
    """The time `delay_ms` after `now` (a `now_ms()` reading), never early: `now_ms`
    floors the clock, so the instant it names may be up to 1 ms past; a delay counted
    from the next millisecond cannot end before its time (0: now)."""
    return now + delay_ms + 1 if delay_ms > 0 else now
