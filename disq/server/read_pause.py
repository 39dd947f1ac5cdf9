"""When a client connection reads its client's requests (flow control): it stops
(the transport's pause_reading) while what it would read can only pile up, and reads
again once that has gone down. It stops when

- the client does not read its replies (the transport's pause_writing; the
  client-output-buffer-limit is the server's business: clients.py),
- over HELD_REQUESTS requests wait behind a parked GETJOB or a CLIENT PAUSE,
- over HELD_REPLIES replies wait behind one not answered yet (ADDJOBs waiting for their
  copies: the cluster catches up with this client);

and reads again when its output drains, the held requests have run, or the replies
are down to half, but never while a GETJOB is parked (its client's later requests wait
anyway, the connection asks `blocked` first). The reasons are not counted apart: any
of these ends a pause.
"""

from __future__ import annotations

import asyncio
from typing import Final

HELD_REQUESTS: Final = 100_000  # requests held while blocked (or paused), per client
HELD_REPLIES: Final = 100_000  # replies waiting behind an unanswered one, per client


class ReadPause:
    """One connection's reading: `transport` is its connection's while connected."""

    __slots__ = ("transport", "paused")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.paused = False

    def pause(self) -> None:
        if self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and self.paused:
            self.paused = False
            self.transport.resume_reading()

    def requests_held(self, count: int) -> None:
        """`count` requests wait behind a parked GETJOB or a CLIENT PAUSE."""
        if count > HELD_REQUESTS:
            self.pause()

    def replies_held(self, count: int) -> None:
        """`count` replies wait behind one not answered yet."""
        if count > HELD_REPLIES:
            self.pause()

    def replies_left(self, count: int) -> None:
        """Replies left the queue, `count` still wait (no GETJOB parked)."""
        if count < HELD_REPLIES // 2:
            self.resume()
