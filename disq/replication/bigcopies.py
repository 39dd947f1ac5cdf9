"""The copies of a big job body (BIG_COPY bytes or more) for an ADDJOB that waits for
them (copies.py): each sent to a node once per link.

TCP delivers what a link carries, so a copy sent again every 50 ms (Disque's resend,
which copies.py keeps for small ones) only queues behind itself: 50 MB copies filled
the send buffer until it dropped the link, again and again. A big copy is sent again
to a node only once it left this process (ClusterBus.copy_left) and was not confirmed
`patience` after (a holder short of memory, a paused queue: it skipped it), or if its
link dropped; no other node is tried while a copy was sent to a node yet to confirm
less than `patience` ago; a copy waits while its link holds BIG_COPY_BACKLOG bytes not
yet sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from ..cluster import messages as m
from ..cluster.port import BusPort

BIG_COPY: Final = 1024 * 1024
BIG_COPY_PATIENCE_MS: Final = 1000  # ...and this much more per MB of body:
BIG_COPY_MS_PER_MB: Final = 50  # (a 100 MB copy: 6 s)
BIG_COPY_BACKLOG: Final = m.MAX_FRAME


class BigCopies:
    """The big copies of one waiting ADDJOB: node -> [copy_mark, sent ms, left ms or 0]."""

    __slots__ = ("patience", "sent")

    def __init__(self, body_len: int) -> None:
        self.patience = BIG_COPY_PATIENCE_MS + body_len * BIG_COPY_MS_PER_MB // (1024 * 1024)
        self.sent: dict[str, list[Any]] = {}

    def may_add_node(self, waiting_for: Iterable[str], since: int, now: int) -> bool:
        """Whether one more node may be tried: no copy was sent to the nodes yet to
        confirm (`waiting_for`) in the last `patience` (nor, for one never sent to,
        since the ADDJOB: `since`)."""
        sent = self.sent
        patience = self.patience
        for node_id in waiting_for:
            copy = sent.get(node_id)
            if now - (since if copy is None else copy[1]) < patience:
                return False
        return True

    def ready(self, bus: BusPort, node_ids: Iterable[str], now: int) -> list[str]:
        """The nodes of `node_ids` that may get the copy now: none sent to them over
        their link, or it left this process `patience` ago unconfirmed; and their
        link has room."""
        ready = []
        for node_id in node_ids:
            copy = self.sent.get(node_id)
            if copy is not None:
                left = bus.copy_left(copy[0])
                if left is False:
                    continue  # still in this node's buffers: never queued behind itself
                if left:
                    if not copy[2]:
                        copy[2] = now
                    if now - copy[2] < self.patience:
                        continue
            if bus.unsent_bytes(node_id) < BIG_COPY_BACKLOG:
                ready.append(node_id)
        return ready

    def record(self, bus: BusPort, node_ids: Iterable[str], now: int) -> None:
        """The copy was just queued for `node_ids`."""
        for node_id in node_ids:
            mark = bus.copy_mark(node_id)
            if mark is not None:  # (no link: nothing was sent)
                self.sent[node_id] = [mark, now, 0]
