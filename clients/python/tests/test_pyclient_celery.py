"""The Celery glue's pure parts: how priorities, ETAs and node lists map onto disq
(a real worker runs in tests/integration/test_celery.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

pytest.importorskip("celery")

from celery import Celery  # noqa: E402
from disq_client.celery_backend import DisqBackend  # noqa: E402
from disq_client.kombu_transport import (  # noqa: E402
    Transport,
    celery_priority_to_disq,
    eta_to_unix_ms,
    seed_nodes,
)
from kombu.transport import resolve_transport  # noqa: E402


def test_priorities_keep_their_order_and_ends() -> None:
    mapped = [celery_priority_to_disq(p) for p in range(10)]
    assert mapped[0] == 0 and mapped[9] == 255  # 0 the most urgent in both
    assert mapped == sorted(set(mapped))
    assert celery_priority_to_disq(-3) == 0 and celery_priority_to_disq(42) == 255


def test_an_eta_is_never_rounded_early() -> None:
    eta = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert eta_to_unix_ms(eta.isoformat()) == int(eta.timestamp() * 1000) + 1
    plus_two = eta.astimezone(timezone(timedelta(hours=2)))
    assert eta_to_unix_ms(plus_two.isoformat()) == eta_to_unix_ms(eta.isoformat())


def test_seeds_come_from_the_url_and_its_failover_urls() -> None:
    assert seed_nodes("a", 7000, ["disq://a:7000", "disq://b", "disq://c:7002/"]) == [
        "a:7000", "b:7711", "c:7002"]
    assert seed_nodes(None, None, []) == ["localhost:7711"]


def test_the_disq_scheme_is_registered_for_both() -> None:
    assert resolve_transport("disq") is Transport
    app = Celery("t", backend="disq://h1:7001;disq://h2:7002")
    backend = app.backend
    assert isinstance(backend, DisqBackend)
    assert backend.as_uri() == "disq://h1:7001;disq://h2:7002"
    comma = DisqBackend(app=app, url="disq://:secret@h1:7001,h2")
    assert comma.as_uri() == "disq://h1:7001;disq://h2:7711"
    assert "secret" in comma.as_uri(include_password=True)


def test_the_package_declares_the_result_backend_entry_point() -> None:
    """Celery reads `celery.result_backends` entry points; an installed disq-client
    declares `disq` there (its pyproject), pointing at the backend class."""
    import tomllib
    from pathlib import Path

    from kombu.utils.imports import symbol_by_name

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    target = project["entry-points"]["celery.result_backends"]["disq"]
    assert symbol_by_name(target) is DisqBackend
    assert any(dep.startswith("celery") for dep in project["optional-dependencies"]["celery"])
