"""The dashboard's batches in a real browser (conftest.py's Chromium and fixtures):
the Batches page lists a closed batch with its counts and progress (followed as its
members end), and a done one with its callback job's link to that job's page; a member
job's page shows its batch; the state filter; closing an open batch from the page; a
hostile batch ID shown as text."""

from __future__ import annotations

from collections.abc import Callable

from browsing import HOSTILE, Page, expect, http_node, job_url, no_injected_markup
from support import DisqProcess, call, wait_for


def _added(node: DisqProcess, queue: str, bid: str, count: int) -> list[bytes]:
    ids = [call(node, "ADDJOB", queue, f"job {i}", 0, "BATCH", bid) for i in range(count)]
    assert all(isinstance(i, bytes) for i in ids)
    return ids  # type: ignore[return-value]


def _ack_one(node: DisqProcess, queue: str) -> None:
    [[_, job_id, _]] = call(node, "GETJOB", "NOHANG", "FROM", queue)  # type: ignore[misc]
    assert call(node, "ACKJOB", job_id) == 1


def test_the_batches_page_shows_progress_and_callbacks(
        start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node)
    assert call(node, "BATCH", "NEW", HOSTILE, "ONDONE", "report", "done") == b"OK"
    members = _added(node, "rows", HOSTILE, 4)
    assert call(node, "BATCH", "CLOSE", HOSTILE) == 4
    _ack_one(node, "rows")
    assert call(node, "BATCH", "NEW", "finished", "ONDONE", "report", "all done") == b"OK"
    _added(node, "other", "finished", 1)
    assert call(node, "BATCH", "CLOSE", "finished") == 1
    _ack_one(node, "other")
    wait_for(lambda: call(node, "QLEN", "report") == 1, 5, message="the callback added")
    assert call(node, "BATCH", "NEW", "still-open", "ONDONE", "report", "x") == b"OK"

    page.goto(f"{url}#/batches")
    closed = page.locator(f'#batches tr[data-batch="{HOSTILE}"]')
    expect(closed.locator("td code").first).to_have_text(HOSTILE)  # as text
    expect(closed.locator(".badge")).to_have_text("closed")
    expect(closed.locator("td.members")).to_have_text("4 jobs")
    expect(closed.locator("td.pending")).to_have_text("3 jobs")
    expect(closed.locator("td.acked")).to_have_text("1 job")
    expect(closed.locator(".progress-value")).to_have_text("25 %")
    expect(closed.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "25")
    expect(closed.locator("td.expires")).to_contain_text("(in 6d 23h)")  # a week's TTL
    no_injected_markup(page)
    # a member's page shows its batch
    queued = next(m for m in members  # (the acked one is gone)
                  if b"queued" in (call(node, "SHOW", m) or []))  # type: ignore[operator]
    page.goto(job_url(url, queued))
    expect(page.locator("#job-batch .badge")).to_have_text("closed")
    expect(page.locator("#job-batch td code").first).to_have_text(HOSTILE)
    expect(page.locator("#job-batch .progress-value")).to_have_text("25 %")
    no_injected_markup(page)
    page.click("text=Every batch")
    # the page follows the batch as its members end
    for _ in range(3):
        _ack_one(node, "rows")
    expect(closed.locator(".badge")).to_have_text("done")
    expect(closed.locator(".progress-value")).to_have_text("100 %")

    # the state filter
    page.select_option("#batch-state", "open")
    expect(page.locator("#batches tbody tr[data-batch]")).to_have_count(1)
    expect(page.locator('#batches tr[data-batch="still-open"]')).to_be_visible()
    # closing it from the page (an empty batch: done at once)
    page.click('#batches tr[data-batch="still-open"] [data-action=close-batch]')
    page.click("#confirm-yes")
    expect(page.locator(".toast")).to_contain_text("Batch still-open closed: 0 member jobs")
    page.select_option("#batch-state", "done")
    expect(page.locator("#batches tbody tr[data-batch]")).to_have_count(3)

    # a done batch links its callback job's page
    done = page.locator('#batches tr[data-batch="finished"]')
    expect(done.locator(".progress-value")).to_have_text("100 %")
    status = call(node, "BATCH", "STATUS", "finished")
    [callback] = status[status.index(b"callbacks") + 1]  # type: ignore[union-attr,index]
    expect(done.locator("a.callback")).to_have_text(callback.decode())
    done.locator("a.callback").click()
    expect(page.locator("#job-id")).to_have_text(callback.decode())
    expect(page.locator("#job pre.body")).to_have_text("all done")
