"""What the browser tests share: Debian's Chromium driven by Playwright (the `browser`
and `page` fixtures of conftest.py start them from here), a node with its HTTP port,
and the checks every page makes. Importing it skips the importing test module, saying
why, where Playwright or Chromium is missing (`make test` installs both)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
from support import NODE_TIMEOUT, DisqProcess, free_port

CHROMIUM = os.environ.get("DISQ_CHROMIUM", "/usr/bin/chromium")
# This machine's network may be closed: without the background-networking flags
# Chromium's own connections (updates, safe browsing...) are refused and it logs them.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 15_000  # what the page may take to show a change (it polls every 1.5 s)
HOSTILE = "<img src=x onerror=alert(1)>"  # markup a consumer may give: shown as text

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - `make test` installs it (the test extra)
    pytest.skip("playwright is not installed (pip install -e '.[test]')",
                allow_module_level=True)
if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs Debian's chromium as root; "
                "DISQ_CHROMIUM names another)", allow_module_level=True)

__all__ = ["CHROMIUM", "HOSTILE", "TIMEOUT_MS", "Browser", "Page", "chromium", "expect",
           "http_node", "job_url", "new_page", "no_injected_markup", "queue_row"]


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextmanager
def new_page(browser: Browser) -> Iterator[Page]:
    """A page in a context of its own; no script error (nor a dialog injected markup
    could open) on the way, checked when it closes."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"),
                                      dialog.dismiss()))
    yield page
    context.close()
    assert errors == [], errors


def http_node(start_node: Callable[..., DisqProcess], *args: str,
              **kwargs: Any) -> tuple[DisqProcess, str]:
    """A node serving the dashboard, and its URL."""
    port = free_port()
    node = start_node("--cluster-node-timeout", str(NODE_TIMEOUT), "--http-port", str(port),
                      *args, **kwargs)
    return node, f"http://127.0.0.1:{port}/"


def queue_row(page: Page, name: str) -> Any:
    return page.locator(f'#queues tr[data-queue="{name}"]')


def job_url(url: str, job_id: bytes) -> str:
    return f"{url}#/job/{quote(job_id.decode(), safe='')}"


def no_injected_markup(page: Page) -> None:
    """Nothing a consumer wrote became an element."""
    expect(page.locator("#page img")).to_have_count(0)
    expect(page.locator("#page pre b")).to_have_count(0)
