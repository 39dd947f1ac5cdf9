"""The browser tests' fixtures: one Chromium per test module, a fresh page per test
(browsing.py starts them; importing it there, not here, lets a test module without
Playwright or Chromium be skipped with the reason)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from browsing import Browser, Page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from browsing import chromium

    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    from browsing import new_page

    with new_page(browser) as opened:
        yield opened
