"""The dashboard's search in a real browser (conftest.py's Chromium and fixtures):
a job ID typed in the top bar opens the job; attribute conditions and body text list
the matching jobs this node holds (a hostile body shown as text), a page at a time."""

from __future__ import annotations

from collections.abc import Callable

from browsing import HOSTILE, Page, expect, http_node, no_injected_markup
from support import DisqProcess, call


def test_search_by_id_attributes_and_text(start_node: Callable[..., DisqProcess],
                                          page: Page) -> None:
    node, url = http_node(start_node)
    eu = call(node, "ADDJOB", "orders", f"order {HOSTILE}", 0, "ATTR", "region", "eu",
              "ATTR", "amount", "12")
    call(node, "ADDJOB", "orders", "order two", 0, "ATTR", "region", "us", "ATTR", "amount",
         "50")
    call(node, "ADDJOB", "mail", "hello there", 0)
    assert isinstance(eu, bytes)
    page.goto(url + "#/queues")
    page.fill("#search-box input", eu.decode())
    page.press("#search-box input", "Enter")
    expect(page.locator("#job-id")).to_have_text(eu.decode())

    page.fill("#search-box input", "region = eu and amount > 10")
    page.press("#search-box input", "Enter")
    expect(page.locator("#found tbody tr")).to_have_count(1)
    expect(page.locator(f'#found tr[data-job="{eu.decode()}"] td.body')).to_contain_text(HOSTILE)
    no_injected_markup(page)

    page.fill("#search-box input", "hello")  # not a condition: the body's text
    page.press("#search-box input", "Enter")
    expect(page.locator("#found tbody tr")).to_have_count(1)
    expect(page.locator("#found tbody tr td").nth(1)).to_have_text("mail")

    page.fill("#search-form input[name=where]", "amount ~ 3")  # a bad condition
    page.fill("#search-form input[name=text]", "")
    page.click("#search-form button[type=submit]")
    expect(page.locator(".toast.error", has_text="Could not search")).to_be_visible()
