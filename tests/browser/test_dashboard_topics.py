"""The dashboard's topics in a real browser (conftest.py's Chromium and fixtures):
the Topics page lists a topic's subscribed queues (a hostile name shown as text),
subscribes a queue, publishes (each queue's job linked), and unsubscribes after a
confirmation."""

from __future__ import annotations

from collections.abc import Callable

from browsing import HOSTILE, Page, expect, http_node, no_injected_markup
from support import DisqProcess, call


def test_the_topics_page_subscribes_publishes_and_unsubscribes(
        start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node)
    assert call(node, "TOPIC", "SUBSCRIBE", "orders", HOSTILE) == 1
    assert call(node, "TOPIC", "SUBSCRIBE", "other", "eu-only", "WHERE", "region", "=",
                HOSTILE) == 1
    page.goto(f"{url}#/topics")
    expect(page.locator('#topics tr[data-topic="other"] .filter')).to_have_text(
        f"where region = {HOSTILE}")
    row = page.locator('#topics tr[data-topic="orders"]')
    expect(row.locator(".queues code")).to_have_text(HOSTILE)  # as text
    expect(row.locator("td.num")).to_have_text("1 queue")
    no_injected_markup(page)

    page.fill("#subscribe-form input[name=topic]", "orders")
    page.fill("#subscribe-form input[name=queue]", "shipping")
    page.click("#subscribe-form button[type=submit]")
    expect(page.locator(".toast", has_text="shipping subscribed to orders")).to_be_visible()
    expect(row.locator("td.num")).to_have_text("2 queues")

    page.fill("#publish-form input[name=topic]", "orders")
    page.fill("#publish-form input[name=body]", "order 1")
    page.fill("#publish-form input[name=msgid]", "o-1")
    page.click("#publish-form button[type=submit]")
    expect(page.locator("#published li")).to_have_count(2)
    assert call(node, "QLEN", "shipping") == 1 and call(node, "QLEN", HOSTILE) == 1
    [[_, job_id, _]] = call(node, "QPEEK", "shipping", 1)  # type: ignore[misc]
    link = page.locator("#published a", has_text=job_id.decode())
    link.click()
    expect(page.locator("#job-id")).to_have_text(job_id.decode())

    page.goto(f"{url}#/topics")
    page.click('#topics [data-action=unsubscribe][data-queue="shipping"]')
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="shipping unsubscribed from orders")).to_be_visible()
    expect(page.locator('#topics tr[data-topic="orders"] td.num')).to_have_text("1 queue")
    assert call(node, "TOPIC", "LIST", "orders") == [[b"orders", [HOSTILE.encode()], [b""]]]
