"""What membership (membership.py, sans-IO) asks the bus (bus.py, the I/O shell) to do,
and what it needs to know of the link a message came in on: the seam between the
state machine and the sockets. The bus carries the actions out in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .nodes import ClusterNode


@dataclass(frozen=True, slots=True)
class Send:
    """Queue `message` on the node's outbound link (dropped if it is not up)."""
    node: ClusterNode
    message: list[Any]


@dataclass(frozen=True, slots=True)
class Reply:
    """Queue `message` on the link the message handled came in on (the PONG)."""
    message: list[Any]


@dataclass(frozen=True, slots=True)
class Connect:
    """Open the node's outbound link; report link_up, or link_lost if it fails."""
    node: ClusterNode


@dataclass(frozen=True, slots=True)
class Close:
    """Close the node's outbound link (report link_lost once it is gone)."""
    node: ClusterNode


@dataclass(frozen=True, slots=True)
class Abort:
    """Drop the node's outbound link at once, with what it still had to send: it may
    be stuck (report link_lost once it is gone)."""
    node: ClusterNode


Action = Send | Reply | Connect | Close | Abort


class Origin(Protocol):
    """The link a message came in on, as far as membership cares."""

    node: ClusterNode | None  # the node an outbound link reaches; None: an inbound link
    peer_ip: str
    local_ip: str
    pong_queued: bool  # a PONG waits on it already this loop turn: it answers every PING
