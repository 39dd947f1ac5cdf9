"""What a node exposes beyond loopback: the start-up warning for a client port without a
password, the closed cluster bus, the metrics endpoint's password (disq/exposure.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from disq.cluster.bus import ClusterBus
from disq.cluster.membership import Membership
from disq.cluster.nodes import ClusterNode, NodeFlag
from disq.config import Config
from disq.exposure import (
    bus_closed,
    bus_hosts,
    check_metrics,
    far_peers_refusal,
    is_loopback,
    meet_refusal,
)
from disq.ids import new_node_id
from disq.server.process import exposure_warning


@pytest.mark.parametrize("bind", [["127.0.0.1", "::1"], ["127.0.0.5"], ["localhost"], ["::1"]])
def test_loopback_only_is_quiet(bind: list[str]) -> None:
    assert exposure_warning(bind, False) is None


@pytest.mark.parametrize("bind", [["0.0.0.0"], ["127.0.0.1", "10.1.2.3"], ["::"],
                                  ["node1.example"]])
def test_exposed_without_password_warns(bind: list[str]) -> None:
    warning = exposure_warning(bind, False)
    assert warning is not None and "without a password" in warning
    assert bind[-1] in warning


def test_a_required_password_silences_the_warning() -> None:
    assert exposure_warning(["0.0.0.0"], True) is None


# -- the closed bus and the metrics endpoint (disq/exposure.py) --------------------------------
def settings(**values: object) -> Config:
    config = Config()
    for name, value in values.items():
        config.apply(name.replace("_", "-"), [str(value)])
    return config


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "localhost",
                                  "::ffff:127.0.0.1"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.0.2.1", "::ffff:10.0.0.1",
                                  "node1.example", ""])
def test_addresses_beyond_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_the_bus_is_closed_without_a_secret_tls_or_the_opt_out() -> None:
    assert bus_closed(settings())
    assert not bus_closed(settings(cluster_secret="s3cret"))
    assert not bus_closed(settings(cluster_open_bus="yes"))
    config = settings()
    config.apply("tls-cluster", ["yes"])  # (the start checks its files, not the settings)
    assert not bus_closed(config)


@pytest.mark.parametrize(("bind", "closed", "hosts"), [
    (["127.0.0.1", "::1"], True, ["127.0.0.1", "::1"]),
    (["0.0.0.0"], True, ["127.0.0.1", "::1"]),  # a single node's remote clients
    (["127.0.0.5", "10.0.0.5"], True, ["127.0.0.5"]),
    (["0.0.0.0"], False, ["0.0.0.0"]),
    (["127.0.0.1", "10.0.0.5"], False, ["127.0.0.1", "10.0.0.5"]),
])
def test_a_closed_bus_listens_on_loopback_only(bind: list[str], closed: bool,
                                               hosts: list[str]) -> None:
    assert bus_hosts(bind, closed) == hosts


def test_messages_say_how_to_open_the_bus() -> None:
    for text in (meet_refusal("192.0.2.1", 7711), far_peers_refusal(["192.0.2.1:7711"])):
        assert "192.0.2.1:7711" in text
        assert "cluster-secret <the same secret on every node>" in text
        assert "cluster-open-bus yes" in text


def test_metrics_beyond_loopback_need_a_password() -> None:
    assert check_metrics(settings(metrics_bind="0.0.0.0")) is None  # (metrics-port 0: off)
    assert check_metrics(settings(metrics_port=9121)) is None
    assert check_metrics(settings(metrics_port=9121, metrics_bind="0.0.0.0",
                                  requirepass="pw")) is None
    assert check_metrics(settings(metrics_port=9121, metrics_bind="0.0.0.0",
                                  aclfile="users.acl")) is None
    refusal = check_metrics(settings(metrics_port=9121, metrics_bind="0.0.0.0"))
    assert refusal is not None
    assert "requirepass" in refusal and "metrics-bind 127.0.0.1" in refusal



def test_a_closed_bus_dials_no_peer_beyond_loopback(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Gossip or nodes.conf may name a far node: a closed bus does not connect to it
    (the dial fails at once, as an unreachable node's does) and logs it once."""
    myself = ClusterNode(new_node_id(), "127.0.0.1", 7711, NodeFlag.MYSELF)
    membership = Membership(myself, str(tmp_path / "nodes.conf"))
    bus = ClusterBus(membership, ["0.0.0.0"], 7711, lambda: 1000,
                     SimpleNamespace(), closed=True)  # type: ignore[arg-type]
    far = ClusterNode(new_node_id(), "192.0.2.1", 7711)
    membership.nodes[far.id] = far
    with caplog.at_level(logging.WARNING, logger="disq"):
        for _ in range(3):
            far.linked = True  # as Membership._connect sets it before the dial
            bus._dial(far)
            assert far.link is None and not far.linked and not far.connected
    assert [r.getMessage() for r in caplog.records] == [
        "Not connecting to 192.0.2.1:7711: the cluster bus is closed (loopback only) "
        "without cluster-secret"]
