"""Another node's times on this node's clock.

A scheduled job (ADDJOB AT / DELAY-MS) is due at a time of the clock of the node that
queued it. A copy of it held here must not be delivered before that time, wherever this
node's clock stands: `to_local_ms` moves the time onto this clock by the peer's offset
as the bus estimates it (disq/cluster/clocks.py) and errs late by the estimate's
uncertainty (half a round trip, a fraction of a ms on a LAN), never early.
"""

from __future__ import annotations

from ..cluster.port import BusPort


def to_local_ms(bus: BusPort, origin_node_id: str, origin_ms: int) -> int:
    """`origin_ms`, a wall-clock time (ms) on the clock of node `origin_node_id` (the
    node that sent it, which keeps its times on its own clock), as the earliest time of
    this node's clock that is sure to be at or after it. Unchanged for this node
    itself, and for a node whose offset is not known yet (no PONG from it yet: nothing
    to correct by, as in Disque)."""
    if origin_node_id == bus.myself.id:
        return origin_ms
    offset = bus.clock_offset(origin_node_id)
    if offset is None:
        return origin_ms
    return origin_ms - offset + (bus.clock_uncertainty(origin_node_id) or 0)
