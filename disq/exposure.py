"""What a node exposes beyond loopback, and what it refuses to.

The cluster bus is closed unless it is protected: without `cluster-secret` (or
`tls-cluster yes`) anyone who reaches the bus port can act as a peer (delete jobs,
pause queues, introduce nodes), so the bus then listens on loopback only and dials
only loopback peers, whatever `bind` says for the client port. `cluster-open-bus yes`
is the explicit opt-out that keeps Disque's open bus.

The metrics endpoint (`metrics-port`) asks for the node's users as the HTTP port
does; beyond loopback it lets in only a user with a password (allowed INFO), so it
must start with requirepass or an aclfile there (a start-up refusal otherwise).

Only the standard library here: the cluster layer and the program both use it.
"""

from __future__ import annotations

import ipaddress
from typing import Any

DEFAULT_LOOPBACK = ["127.0.0.1", "::1"]  # the default `bind`

# How to open the bus, in every message that refuses to reach beyond loopback.
HOW_TO_OPEN_THE_BUS = (
    "set cluster-secret <the same secret on every node> (or tls-cluster yes), "
    "or cluster-open-bus yes to keep Disque's open bus")


def is_loopback(host: str) -> bool:
    """An address (or `localhost`) that only this machine reaches."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1
    return address.is_loopback


def bus_closed(config: Any) -> bool:
    """No cluster-secret, no tls-cluster and no cluster-open-bus: loopback only."""
    return not (config.cluster_secret or config.tls_cluster or config.cluster_open_bus)


def bus_hosts(bind: list[str], closed: bool) -> list[str]:
    """The addresses the bus listens on: `bind`'s; a closed bus keeps its loopback
    ones, or listens on the default loopback addresses when it has none (`bind
    0.0.0.0` for remote clients of a single node)."""
    if not closed:
        return list(bind)
    return [host for host in bind if is_loopback(host)] or list(DEFAULT_LOOPBACK)


def meet_refusal(ip: str, port: int) -> str:
    """CLUSTER MEET's error for a peer beyond loopback on a closed bus."""
    return (f"the cluster bus is closed: it reaches loopback addresses only, not "
            f"{ip}:{port}; to form a cluster across hosts {HOW_TO_OPEN_THE_BUS}")


def far_peers_refusal(addresses: list[str]) -> str:
    """Why a closed bus does not start with peers beyond loopback in nodes.conf
    (an existing cluster across hosts, now without a way to reach it)."""
    return (f"The cluster config file lists peers beyond loopback "
            f"({', '.join(addresses[:5])}{', ...' if len(addresses) > 5 else ''}), but "
            f"without cluster-secret the cluster bus is closed (loopback only): "
            f"{HOW_TO_OPEN_THE_BUS}; or start it with another cluster-config-file to leave "
            f"that cluster")


def _metrics_beyond_loopback(config: Any) -> bool:
    return bool(config.metrics_port) and not is_loopback(config.metrics_bind)


def check_metrics(config: Any) -> str | None:
    """Why the metrics endpoint may not start as configured (None: it may): beyond
    loopback it needs users with passwords to ask for (requirepass, or an aclfile)."""
    if not _metrics_beyond_loopback(config) or config.requirepass or config.aclfile:
        return None
    return (f"metrics-bind {config.metrics_bind} without requirepass or aclfile: the "
            f"metrics would have no user to ask for. Set requirepass <password> "
            f"(Prometheus then sends it as basic auth or a bearer token) or an aclfile "
            f"with a user allowed INFO, or metrics-bind 127.0.0.1")
