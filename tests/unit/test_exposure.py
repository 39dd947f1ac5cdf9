"""The start-up warning for a node reachable beyond loopback without a password."""

from __future__ import annotations

import pytest

from disq.server.process import exposure_warning


@pytest.mark.parametrize("bind", [["127.0.0.1", "::1"], ["127.0.0.5"], ["localhost"], ["::1"]])
def test_loopback_only_is_quiet(bind: list[str]) -> None:
    assert exposure_warning(bind, "") is None


@pytest.mark.parametrize("bind", [["0.0.0.0"], ["127.0.0.1", "10.1.2.3"], ["::"],
                                  ["node1.example"]])
def test_exposed_without_password_warns(bind: list[str]) -> None:
    warning = exposure_warning(bind, "")
    assert warning is not None and "without a password" in warning
    assert bind[-1] in warning


def test_password_silences_the_warning() -> None:
    assert exposure_warning(["0.0.0.0"], "secret") is None
