"""The browser tests' fixtures: one headless Chromium per test module (`browser`), a
fresh page per test (`page`) that fails the test on any script error or dialog. The
modules import test_dashboard, which skips them where Playwright or Chromium is
missing (saying why)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from browserutil import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # a dialog only markup from the server could open (an alert in an onerror)
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"),
                                      dialog.dismiss()))
    yield page
    context.close()
    assert errors == [], errors  # no script error (nor injected dialog) on the way
