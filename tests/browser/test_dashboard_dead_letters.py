"""Bulk actions on dead letters in the dashboard, in a real browser (conftest.py's
Chromium and fixtures): jobs picked on a queue's page (the picks kept while the page
redraws) are requeued to the queues they came from or deleted, each after a
confirmation; a dead letter's own Requeue sends it back to its queue, from the list and
from its page."""

from __future__ import annotations

from collections.abc import Callable

from browsing import Page, expect, http_node
from support import DisqProcess, call, wait_for


def test_dead_letters_are_requeued_and_deleted_in_bulk(start_node: Callable[..., DisqProcess],
                                                       page: Page) -> None:
    node, url = http_node(start_node)
    ids = []
    for i in range(5):
        job_id = call(node, "ADDJOB", "work", f"job {i}", 0, "MAXDELIVERIES", 1)
        assert isinstance(job_id, bytes)
        ids.append(job_id.decode())
        call(node, "GETJOB", "NOHANG", "FROM", "work")
        call(node, "NACK", job_id)
    assert call(node, "QLEN", "dead:work") == 5
    page.goto(url + "#/queue/dead:work")
    expect(page.locator("#jobs tbody tr")).to_have_count(5)
    for job_id in ids[:2]:
        page.check(f'#jobs input[data-action=pick][data-job="{job_id}"]')
    expect(page.locator("#bulk-count")).to_have_text("2 jobs selected")
    page.wait_for_timeout(2000)  # a negative check: the page's redraws keep the picks
    expect(page.locator("#jobs input[data-action=pick]:checked")).to_have_count(2)
    page.click("[data-action=requeue-selected]")
    page.click("#confirm-dialog button[value=no]")  # cancelled: nothing happens
    assert call(node, "QLEN", "dead:work") == 5
    page.click("[data-action=requeue-selected]")
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="2 dead letters requeued")).to_be_visible()
    assert call(node, "QLEN", "work") == 2 and call(node, "QLEN", "dead:work") == 3
    expect(page.locator("#bulk")).to_be_hidden()

    page.check(f'#jobs input[data-action=pick][data-job="{ids[2]}"]')
    page.click("[data-action=delete-selected]")
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="1 job deleted")).to_be_visible()
    assert call(node, "SHOW", ids[2]) is None and call(node, "QLEN", "dead:work") == 2

    row = page.locator(f'#jobs tr[data-job="{ids[3]}"]')
    row.locator("[data-action=requeue-dead-job]").click()  # "Requeue to work"
    expect(page.locator(".toast", has_text="requeued to the queue it came from")).to_be_visible()
    assert call(node, "QLEN", "work") == 3

    page.goto(url + f"#/job/{ids[4]}")
    button = page.locator("#requeue")
    expect(button).to_have_text("Requeue to work")
    button.click()  # (its toast reads as the one before, which may still be shown)
    wait_for(lambda: call(node, "QLEN", "work") == 4, 10, message="the job page's requeue")
    assert call(node, "QLEN", "dead:work") == 0
