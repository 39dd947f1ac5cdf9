"""What the replication layer may use of the cluster bus (a narrow interface, so the
replication logic can be tested with an in-memory bus and the bus knows nothing about
jobs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .nodes import ClusterNode

# handler(sender, fields): `fields` are the message fields after the header, as listed
# in messages.py. Handlers run on the event loop and must not block.
Handler = Callable[[ClusterNode, list[Any]], None]


class BusPort(Protocol):
    myself: ClusterNode
    # Known nodes not in handshake, myself included (Disque's cluster size), kept up
    # to date by the bus (read on every ADDJOB).
    cluster_size: int
    # Frames received so far from nodes counted failing (a heal noticed early)
    failing_heard: int

    def on(self, mtype: int, handler: Handler) -> None:
        """Register the handler of a message type (one per type)."""

    def send(self, node_id: str, mtype: int, *fields: object) -> bool:
        """Queue a message to one node; it leaves with the other messages for that node
        at the end of this loop turn. False if the node is unknown or has no link now
        (the message is dropped: the bus is best effort, callers retry)."""

    def can_send(self, node_id: str) -> bool:
        """The node is known, not myself, its link is up and it is not failing: a
        message sent now should arrive (for what must not be sent in vain)."""

    def send_batched(self, node_ids: Iterable[str], mtype: int, items: list[Any],
                     head: tuple[Any, ...] = ()) -> int:
        """Like `send` to each node, but items sent to one node one after the other
        in a loop turn, with the same type and head, share one message
        `[mtype, *head, item, ...]` (the REPLJOBs and GOTJOB confirmations of a
        pipeline); the messages to a node keep the order they were sent in. Returns
        how many nodes it was queued for."""

    def copy_mark(self, node_id: str) -> object:
        """Where the messages just queued for `node_id` end in its link's output (None:
        no link now), for `copy_left`."""

    def copy_left(self, mark: object) -> bool | None:
        """Whether what was queued up to `mark` (copy_mark) left this process (True),
        waits in its output (False), or its link is gone (None)."""

    def unsent_bytes(self, node_id: str) -> int:
        """Bytes queued for `node_id` that have not left this process (0: no link)."""

    def broadcast(self, mtype: int, *fields: object,
                  node_ids: Iterable[str] | None = None, urgent: bool = False) -> int:
        """`send` to every known peer (not myself, not in handshake), or to the given
        IDs (myself skipped). Returns how many sends were queued. `urgent`: the
        links' queues leave now, not at the end of the loop turn (ahead of a client
        reply the caller is about to write)."""

    def reachable_peers(self) -> list[ClusterNode]:
        """Peers a job may be replicated to: not myself, not in handshake, not
        PFAIL/FAIL, not leaving. A peer may be without a link for a moment (until it
        is PFAIL): a message to it is then dropped, and the caller sends it again."""

    def reaching_peers(self) -> list[str]:
        """IDs of the reachable peers (`reachable_peers`) without a link now that this
        node has not failed to reach: not dialled yet since it started, or dialled
        again after their link dropped, until a dial fails (refused, given up) or a
        new link closes before it could carry messages. Their link is expected soon:
        what must reach every peer that may know something waits for them."""

    def leaving_peers(self) -> list[str]:
        """IDs of the peers that are leaving (CLUSTER LEAVING), not PFAIL/FAIL, with a
        link up now: not in `reachable_peers` (they take no new copies), but they
        hold their jobs, and those jobs' DEDUP keys, until the jobs are acked."""

    def known_ids(self) -> list[str]:
        """IDs of every known node but myself and handshake nodes."""

    def known_id_map(self) -> dict[str, str]:
        """Every known node ID (myself included, handshake nodes not) mapped to one
        shared string object. Read only."""

    def clock_offset(self, node_id: str) -> int | None:
        """How far the node's clock is ahead of mine (ms, negative: behind), as
        estimated from PING/PONG round trips (clocks.py); None if not known yet."""

    def clock_uncertainty(self, node_id: str) -> int | None:
        """How far off `clock_offset` may be (ms, half the round trip of its sample
        and the drift since): the true offset is within offset +/- this."""
