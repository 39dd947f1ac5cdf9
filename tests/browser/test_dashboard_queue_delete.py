"""The dashboard's queue page purges and deletes a queue in a real browser
(conftest.py's Chromium and fixtures), each after a confirmation: cancelled, it
changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from browsing import HOSTILE, Page, expect, http_node, no_injected_markup
from support import DisqProcess, call


def test_the_queue_page_purges_then_deletes_the_queue(
        start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node)
    for i in range(3):
        call(node, "ADDJOB", HOSTILE, f"job {i}", 0)
    assert call(node, "QPOLICY", HOSTILE, "SET", "MAXDELIVERIES", 4) == b"OK"
    page.goto(f"{url}#/queue/{quote(HOSTILE, safe='')}")
    expect(page.locator("#qname")).to_have_text(HOSTILE)
    no_injected_markup(page)

    page.click("[data-action=purge-queue]")
    page.click("#confirm-dialog button[value=no]")  # cancelled: nothing happens
    assert call(node, "QLEN", HOSTILE) == 3
    page.click("[data-action=purge-queue]")
    expect(page.locator("#confirm-text")).to_contain_text("QPURGE")
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="3 jobs deleted on this node")).to_be_visible()
    assert call(node, "QLEN", HOSTILE) == 0
    assert call(node, "QPOLICY", HOSTILE, "GET") is not None  # a purge keeps the policy

    call(node, "ADDJOB", HOSTILE, "one more", 0)
    page.click("[data-action=delete-queue]")
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="1 job on this node")).to_be_visible()
    expect(page).to_have_url(f"{url}#/queues")
    assert call(node, "QLEN", HOSTILE) == 0
    assert call(node, "QPOLICY", HOSTILE, "GET") is None
