"""The docs site's generated reference pages are those their sources give now: a
directive, a route or an option changed without the page would fail here."""

from __future__ import annotations

from pathlib import Path

import pytest

from disq.server.referencedocs import PAGES

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
FILES = {"directives": "directives.md", "http": "http-api.md", "metrics": "metrics.md"}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_a_generated_reference_page_is_current(page: str) -> None:
    assert (REFERENCE / FILES[page]).read_text() == PAGES[page](), (
        f"docs/reference/{FILES[page]} is stale: run `python -m disq.server.referencedocs "
        f"{page} > docs/reference/{FILES[page]}`")
