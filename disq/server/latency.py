"""The latency monitor (latency-monitor-threshold, the LATENCY command), as Redis's:
per event, one sample a second (the worst of that second), the last 160 kept."""

from __future__ import annotations

import time
from collections import deque

HISTORY_LEN = 160  # Redis's LATENCY_TS_LEN


class _Series:
    __slots__ = ("samples", "max")

    def __init__(self) -> None:
        self.samples: deque[list[int]] = deque(maxlen=HISTORY_LEN)  # [unix time, ms]
        self.max = 0


class LatencyMonitor:
    """Events by name ("command", "jobs-processing"), created on their first sample."""

    def __init__(self) -> None:
        self.events: dict[str, _Series] = {}

    def add(self, event: str, ms: int) -> None:
        series = self.events.get(event)
        if series is None:
            series = self.events[event] = _Series()
        now = int(time.time())
        samples = series.samples
        if samples and samples[-1][0] == now:  # one sample a second: the worst
            if ms > samples[-1][1]:
                samples[-1][1] = ms
        else:
            samples.append([now, ms])
        if ms > series.max:
            series.max = ms

    def latest(self) -> list[list[object]]:
        """LATENCY LATEST: [event, time of the last sample, its ms, all-time max ms]."""
        return [[name.encode(), s.samples[-1][0], s.samples[-1][1], s.max]
                for name, s in self.events.items()]

    def history(self, event: str) -> list[list[int]]:
        series = self.events.get(event)
        return [list(sample) for sample in series.samples] if series else []

    def reset(self, events: list[str] | None = None) -> int:
        """Forget the events named (all when None); returns how many there were."""
        if events is None:
            count = len(self.events)
            self.events.clear()
            return count
        wanted = {e.lower() for e in events}
        gone = [name for name in self.events if name.lower() in wanted]
        for name in gone:
            del self.events[name]
        return len(gone)

    def doctor(self, threshold_ms: int) -> str:
        if not self.events:
            return "No latency spikes were observed during the lifetime of this server."
        lines = [f"Latency spikes of {threshold_ms} ms or more (latency-monitor-threshold):"]
        for number, (name, series) in enumerate(self.events.items(), 1):
            values = [ms for _, ms in series.samples]
            average = sum(values) / len(values)
            lines.append(f"{number}. {name}: {len(values)} latency spikes (average "
                         f"{average:.0f}ms). Worst all time event {series.max}ms.")
        return "\n".join(lines) + "\n"
