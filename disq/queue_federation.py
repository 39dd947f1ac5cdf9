"""What federation (replication/federation.py) keeps of one queue, made on the queue's
first ask or import (`Queue.federation`): apart from queue.py, which the core's every
path reads, as the core reads only the few fields of it Queue keeps itself."""

from __future__ import annotations

from .queue import NO_PRIORITY


class QueueFederation:
    """What federation (replication/federation.py) keeps of one queue: its asks for
    jobs (when, how many, who answered), the jobs it imported (per-second buckets) and
    the most urgent priority each peer said it has queued. Made on the queue's first
    ask or import (`Queue.federation`), so a queue federation never touches, and a
    node alone, carry none of it; it goes with its queue."""

    __slots__ = ("bcast_time", "asked_time", "bcast_attempt", "adhoc_attempt",
                 "responders", "import_second", "imported_prev", "imported_curr",
                 "import_time", "peer_best")

    def __init__(self) -> None:
        self.bcast_time = 0  # no NEEDJOBS goes out before this (back-off)
        # when a NEEDJOBS for consumers blocked here went out, 0 once they are gone
        self.asked_time = 0
        self.bcast_attempt = 0
        self.adhoc_attempt = 0  # the size of the next ask (0: the first size)
        self.responders: dict[str, int] | None = None  # node ID -> its last import
        self.import_second = 0  # the second `imported_curr` counts
        self.imported_prev = 0
        self.imported_curr = 0
        self.import_time = 0
        self.peer_best: dict[str, int] | None = None  # node ID -> its most urgent priority

    def note_import(self, now_ms: int) -> None:
        """Count one job imported by federation (per-second buckets)."""
        second = now_ms // 1000
        if second != self.import_second:
            self.imported_prev = self.imported_curr if second == self.import_second + 1 else 0
            self.imported_curr = 0
            self.import_second = second
        self.imported_curr += 1
        self.import_time = now_ms

    def import_rate_at(self, now_ms: int) -> int:
        """Jobs imported per second: this second's and the previous one's count, the
        larger, as long as the last import is under 5 s old (Disque's window)."""
        if not self.import_time or now_ms - self.import_time > 5000:
            return 0
        second = now_ms // 1000
        if second == self.import_second:
            return max(self.imported_curr, self.imported_prev)
        if second == self.import_second + 1:
            return self.imported_curr
        return 1  # imported within 5 s, but not in the last two seconds

    def set_peer_best(self, node_id: str, priority: int) -> int | None:
        """A peer's most urgent queued priority (NO_PRIORITY: none), as it said: the
        most urgent of the peers' now, or None if nothing changed."""
        bests = self.peer_best
        if priority >= NO_PRIORITY:
            if bests is None or bests.pop(node_id, None) is None:
                return None
        else:
            if bests is None:
                self.peer_best = bests = {}
            bests[node_id] = priority
        return min(bests.values(), default=NO_PRIORITY)
