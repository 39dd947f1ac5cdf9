"""A job's history and the dashboard's units in a real browser (conftest.py's
Chromium and fixtures): a job that failed a delivery shows its events on this node,
with their times; the queues' and the node's figures carry their units."""

from __future__ import annotations

import re
from collections.abc import Callable

from browsing import HOSTILE, Page, expect, http_node, job_url, no_injected_markup
from support import DisqProcess, call


def test_a_job_s_history_on_its_page(start_node: Callable[..., DisqProcess],
                                     page: Page) -> None:
    node, url = http_node(start_node)
    job_id = call(node, "ADDJOB", "hist", "work", 0, "RETRY", 60)
    assert isinstance(job_id, bytes)
    page.goto(job_url(url, job_id))
    expect(page.locator("#job .fields")).to_be_visible()
    expect(page.locator("#job-history")).to_be_hidden()  # a plain job has none
    assert call(node, "GETJOB", "NOHANG", "FROM", "hist")
    assert call(node, "NACK", "ERROR", HOSTILE, job_id) == 1
    assert call(node, "GETJOB", "NOHANG", "FROM", "hist")
    rows = page.locator("#job-history tbody tr")
    expect(rows).to_have_count(4)  # added, nacked, queued, delivered
    expect(rows.nth(0)).to_contain_text("added")
    expect(rows.nth(1)).to_contain_text("nacked")
    expect(rows.nth(1)).to_contain_text(HOSTILE)  # the reason, as text
    expect(rows.nth(3)).to_contain_text("delivered")
    expect(rows.nth(3)).to_contain_text("client id=")
    expect(rows.nth(3)).to_contain_text("ago")  # its time
    expect(page.locator("#job-history h2")).to_contain_text("this node's view")
    no_injected_markup(page)


def test_every_figure_carries_its_unit(start_node: Callable[..., DisqProcess],
                                       page: Page) -> None:
    node, url = http_node(start_node)
    job_id = call(node, "ADDJOB", "units", "work", 0, "RETRY", 60)
    assert isinstance(job_id, bytes)
    page.goto(url)
    row = page.locator("#nodes tbody tr[data-node]")
    expect(row).to_have_count(1)
    memory = row.locator("td.num").first  # Memory used: in B / KiB / MiB
    expect(memory).to_have_text(re.compile(r"^[\d.]+ (B|KiB|MiB|GiB)$"))
    expect(row).to_contain_text("1 job")
    expect(page.locator("#cards")).to_contain_text("/s")  # Ops/s: a rate
    page.click('nav a[data-nav="queues"]')
    queue = page.locator('#queues tr[data-queue="units"]')
    expect(queue.locator("td.length")).to_have_text("1 job")
    expect(queue.locator("td.num").nth(1)).to_have_text(re.compile(r"/s$"))
    assert call(node, "GETJOB", "NOHANG", "FROM", "units")
    page.goto(job_url(url, job_id))  # its requeue within 60 s: "59.9 s" or "59s"
    requeue = page.locator("#job .fields tr", has_text="next_requeue_within").locator("td")
    expect(requeue).to_have_text(re.compile(r"^[\d.]+ ?(ms|s)$|^\dm \d+s$"))
    expect(page.locator("#job .fields tr", has_text="retry_ms").locator("td")).to_have_text(
        "1m 0s")
