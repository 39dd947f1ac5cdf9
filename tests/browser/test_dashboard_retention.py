"""The dashboard's queue page shows a RETAIN queue's retention (conftest.py's
Chromium and fixtures): how long acked jobs are kept, and what this node keeps."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from browsing import HOSTILE, Page, expect, http_node, no_injected_markup
from support import DisqProcess, call, wait_for


def retained(node: DisqProcess) -> bool:
    text = call(node, "INFO", "retention")
    assert isinstance(text, bytes)
    return b"retained_jobs:2\r\n" in text


def test_the_queue_page_shows_the_retention(
        start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node)
    assert call(node, "QPOLICY", HOSTILE, "SET", "RETAIN", 7200) == b"OK"
    for i in range(2):
        job_id = call(node, "ADDJOB", HOSTILE, f"job {i}", 0)
        call(node, "GETJOB", "NOHANG", "FROM", HOSTILE)
        call(node, "ACKJOB", job_id)
    wait_for(lambda: retained(node), message="two retained jobs")
    page.goto(f"{url}#/queue/{quote(HOSTILE, safe='')}")
    box = page.locator("#retention")
    expect(box).to_be_visible()
    expect(box).to_contain_text("Acked jobs retained for")
    expect(box.locator(".card-stat", has_text="Retained here")).to_contain_text("2")
    no_injected_markup(page)
    # a queue without RETAIN: no retention shown
    call(node, "ADDJOB", "plain", "x", 0)
    page.goto(f"{url}#/queue/plain")
    expect(page.locator("#qname")).to_have_text("plain")
    expect(page.locator("#retention")).to_be_hidden()
