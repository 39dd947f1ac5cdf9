"""The dashboard's Cron page in a real browser (conftest.py's Chromium and
fixtures): it lists the schedules (a hostile name shown as text) with their next tick
and the job of the last one, defines a schedule, and deletes one after a
confirmation."""

from __future__ import annotations

from collections.abc import Callable

from browsing import HOSTILE, Page, expect, http_node, no_injected_markup
from support import DisqProcess, call, wait_for


def test_the_cron_page_lists_defines_and_deletes(start_node: Callable[..., DisqProcess],
                                                 page: Page) -> None:
    node, url = http_node(start_node)
    assert call(node, "CRON", "ADD", HOSTILE, "ticks", "* * * * * *", "tick") == b"OK"
    wait_for(lambda: call(node, "QLEN", "ticks") >= 1, 10, message="a first tick")
    page.goto(f"{url}#/cron")
    row = page.locator("#schedules tbody tr").first
    expect(row.locator("td").first).to_have_text(HOSTILE)  # as text
    expect(row.locator("td.next")).to_contain_text("in ")
    expect(row.locator("a[href^='#/job/']")).to_have_count(1)  # the last tick's job
    no_injected_markup(page)

    page.fill("#cron-form input[name=name]", "nightly")
    page.fill("#cron-form input[name=queue]", "reports")
    page.fill("#cron-form input[name=spec]", "0 3 * * *")
    page.fill("#cron-form input[name=tz]", "Europe/Paris")
    page.fill("#cron-form input[name=body]", "run")
    page.click("#cron-form button[type=submit]")
    expect(page.locator(".toast", has_text="Schedule nightly saved")).to_be_visible()
    expect(page.locator('#schedules tr[data-name="nightly"]')).to_contain_text("Europe/Paris")
    page.fill("#cron-form input[name=name]", "bad")
    page.fill("#cron-form input[name=queue]", "reports")
    page.fill("#cron-form input[name=spec]", "not cron")
    page.click("#cron-form button[type=submit]")
    expect(page.locator(".toast.error", has_text="Could not save")).to_be_visible()

    page.click('#schedules [data-action=delete-cron][data-name="nightly"]')
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="Schedule nightly deleted")).to_be_visible()
    expect(page.locator('#schedules tr[data-name="nightly"]')).to_have_count(0)
    names = [entry[1] for entry in call(node, "CRON", "LIST")]  # type: ignore[union-attr]
    assert names == [HOSTILE.encode()]
