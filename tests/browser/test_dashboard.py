"""The dashboard in a real browser: Debian's Chromium, headless, driven by
Playwright, against real nodes. On a 3-node cluster: every node shown ok, a queue
appearing after an ADDJOB, paused and resumed from the page, a dead letter requeued,
a job added, shown, requeued and deleted, a killed node turning fail. On one node with
requirepass: the login form, a wrong password, signing out; QPEEK's pages. How jobs
end: a job's progress, errors and result (text, binary), a dead letter's reason and
errors, the finished jobs (a user of some queues sees only theirs); values a consumer
gave, hostile markup included, shown as text.

`make test` installs Chromium where it is missing (as root, with apt-get); elsewhere
these tests are skipped, saying why."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from browsing import (
    HOSTILE,
    Page,
    expect,
    http_node,
    job_url,
    no_injected_markup,
    queue_row,
)
from support import DisqProcess, call, form_cluster, myid, wait_for


def test_the_dashboard_shows_and_acts_on_a_cluster(
        start_node: Callable[..., DisqProcess], page: Page) -> None:
    started = [http_node(start_node) for _ in range(3)]
    nodes = form_cluster([node for node, _ in started])
    url = started[0][1]
    ids = [myid(node) for node in nodes]

    # the cluster: three nodes, ok, this node first
    page.goto(url)
    rows = page.locator("#nodes tbody tr[data-node]")
    expect(rows).to_have_count(3)
    for node_id in ids:
        expect(page.locator(f'tr[data-node="{node_id}"] td.state')).to_have_text("ok")
    expect(rows.first).to_contain_text("this node")
    expect(page.locator("#cards")).to_contain_text("3 / 3 ok")

    # a queue appears after an ADDJOB on another node, with its cluster-wide length
    call(nodes[1], "ADDJOB", "browser-q", "from node 1", 0)
    page.click('nav a[data-nav="queues"]')
    expect(queue_row(page, "browser-q").locator("td.length")).to_have_text("1 job")

    # paused from the page, on every node (PAUSE ... BCAST); then resumed
    queue_row(page, "browser-q").get_by_role("button", name="Pause").click()
    expect(queue_row(page, "browser-q").locator("td.status")).to_contain_text("paused")
    for node in nodes:
        wait_for(lambda node=node: call(node, "PAUSE", "browser-q", "state") == b"all", 5,
                 message="the pause on every node")
    expect(page.locator(".toast").last).to_contain_text("paused")
    queue_row(page, "browser-q").get_by_role("button", name="Resume").click()
    expect(queue_row(page, "browser-q").locator("td.status")).not_to_contain_text("paused")
    assert wait_for(lambda: call(nodes[2], "PAUSE", "browser-q", "state") == b"none", 5)

    # a dead letter, requeued from its dead-letter queue's row
    call(nodes[0], "QPOLICY", "work", "SET", "MAXDELIVERIES", 1)
    dead_id = call(nodes[0], "ADDJOB", "work", "fails once", 0)
    (job,) = call(nodes[0], "GETJOB", "FROM", "work")
    call(nodes[0], "NACK", job[1])
    assert call(nodes[0], "QLEN", "dead:work") == 1
    dead_row = queue_row(page, "dead:work")
    expect(dead_row.locator("td.status")).to_contain_text("dead letters")
    expect(dead_row.locator("td.length")).to_have_text("1 job")
    dead_row.get_by_role("button", name="Requeue dead letters").click()
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="1 dead letter requeued")).to_be_visible()
    assert call(nodes[0], "QLEN", "dead:work") == 0
    assert [entry[1] for entry in call(nodes[0], "QPEEK", "work", 10)] == [dead_id]
    expect(dead_row.locator("td.length")).to_have_text("0 jobs")
    expect(queue_row(page, "work").locator("td.length")).to_have_text("1 job")

    # the queue page: a job added with the form, next to deliver (QPEEK), then SHOW
    page.click('#queues a:text-is("browser-q")')
    expect(page.locator("#qname")).to_have_text("browser-q")
    page.get_by_role("button", name="Add job").last.click()
    page.fill("#add-form textarea[name=body]", "added from the page")
    page.fill("#add-form input[name=priority]", "7")
    page.fill("#add-form input[name=retry]", "90")  # seconds, sent as retry_ms
    page.click('#add-form button[type=submit]')
    toast = page.locator(".toast", has_text="added to browser-q")
    expect(toast).to_be_visible()
    added = re.search(r"Job (D-\S+) added", toast.inner_text())
    assert added is not None
    job_id = added[1]
    assert call(nodes[0], "QLEN", "browser-q") == 1
    shown = call(nodes[0], "SHOW", job_id)
    assert shown[shown.index(b"retry") + 1] == 90
    job_row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(job_row).to_contain_text("added from the page")
    page.click('[data-tab="scan"]')  # every job held here: the one of node 1 too (a copy)
    expect(page.locator("#jobs tbody tr[data-job]")).to_have_count(2)
    page.locator(f'#jobs tr[data-job="{job_id}"] a').click()  # (its ID has '/' or '+')
    expect(page.locator("#job")).to_contain_text("added from the page")
    expect(page.locator("#job table.fields")).to_contain_text("priority")
    retry = page.locator("#job .fields tr", has_text="retry_ms").locator("td")
    expect(retry).to_have_text("1m 30s")
    expect(page.locator("#job a", has_text="browser-q")).to_be_visible()

    # requeued: taken by a consumer, then queued again from the page
    assert call(nodes[0], "GETJOB", "NOHANG", "FROM", "browser-q")
    assert call(nodes[0], "QLEN", "browser-q") == 0
    page.get_by_role("button", name="Requeue").click()
    expect(page.locator(".toast", has_text="Job queued again")).to_be_visible()
    assert call(nodes[0], "QLEN", "browser-q") == 1

    # deleted everywhere (FASTACK), after a confirmation
    page.get_by_role("button", name="Delete", exact=True).click()
    page.click("#confirm-yes")
    expect(page.locator(".toast", has_text="Job deleted")).to_be_visible()
    for node in nodes:
        wait_for(lambda node=node: call(node, "SHOW", job_id) is None, 5,
                 message="the job gone from every node")
    expect(page.locator("#job")).to_contain_text("does not hold this job")

    # a killed node turns fail, its figures gone
    page.click('nav a[data-nav="cluster"]')
    nodes[2].kill()
    expect(page.locator(f'tr[data-node="{ids[2]}"] td.state')).to_have_text(
        "fail", timeout=20_000)
    expect(page.locator(f'tr[data-node="{ids[2]}"]')).to_contain_text("no answer")
    expect(page.locator("#cards")).to_contain_text("2 / 3 ok")


def test_login_paging_and_sign_out(start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node, "--requirepass", "s3cret",
                          client_kwargs={"password": "s3cret"})
    for i in range(45):
        call(node, "ADDJOB", "paged", f"job {i:02}", 0)
    page.goto(url + "#/queue/paged")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#login-password", "wrong")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("Wrong password.")
    page.fill("#login-password", "s3cret")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#login")).to_be_hidden()

    # QPEEK a page at a time: the delivery order, 20 a page
    rows = page.locator("#jobs tbody tr[data-job]")
    expect(rows).to_have_count(20)
    expect(rows.first).to_contain_text("job 00")
    expect(page.locator("#page-label")).to_have_text("1–20")
    page.click('[data-step="1"]')
    expect(page.locator("#page-label")).to_have_text("21–40")
    expect(rows.first).to_contain_text("job 20")
    page.click('[data-step="1"]')
    expect(rows).to_have_count(5)
    expect(page.locator('[data-step="1"]')).to_be_disabled()
    page.click('[data-step="-1"]')
    expect(page.locator("#page-label")).to_have_text("21–40")

    # the password stays for the tab (sessionStorage), until signing out
    page.reload()
    expect(page.locator("#qname")).to_have_text("paged")
    expect(page.locator("#login")).to_be_hidden()
    expect(page.locator("#cards")).to_contain_text("45")
    page.click("#sign-out")
    expect(page.locator("#login")).to_be_visible()
    page.reload()
    expect(page.locator("#login")).to_be_visible()


# -- how jobs end ----------------------------------------------------------------------------
def test_a_job_s_progress_errors_and_result(start_node: Callable[..., DisqProcess],
                                            page: Page, tmp_path: Path) -> None:
    node, url = http_node(start_node)
    job_id = call(node, "ADDJOB", "ends", "work", 0)
    assert isinstance(job_id, bytes)
    for reason in ("first failure", HOSTILE):
        assert call(node, "GETJOB", "NOHANG", "FROM", "ends")
        assert call(node, "NACK", "ERROR", reason, job_id) == 1
    assert call(node, "GETJOB", "NOHANG", "FROM", "ends")
    call(node, "WORKING", job_id, "PROGRESS", 40, "DATA", "<b>page 4</b>")

    page.goto(job_url(url, job_id))
    expect(page.locator("#job-progress .progress-value")).to_have_text("40 %")
    expect(page.locator("#job-progress [role=progressbar]")).to_have_attribute(
        "aria-valuenow", "40")
    expect(page.locator("#job-progress .progress-data")).to_have_text("<b>page 4</b>")
    errors = page.locator("#job-errors tbody tr")
    expect(errors).to_have_count(2)
    expect(errors.first).to_contain_text("#2")  # the newest first, its delivery and text
    expect(errors.first.locator("td.reason")).to_have_text(HOSTILE)
    expect(errors.last).to_contain_text("#1")
    expect(errors.last).to_contain_text("first failure")
    expect(errors.first).to_contain_text("ago")  # its time
    expect(page.locator("#job-end .end-state")).to_contain_text("active")
    no_injected_markup(page)

    # a new report shows as the page polls; then the ACK with a result
    call(node, "WORKING", job_id, "PROGRESS", 80)
    expect(page.locator("#job-progress .progress-value")).to_have_text("80 %")
    assert call(node, "ACKJOB", job_id, "RESULT", HOSTILE) == 1
    expect(page.locator("#job-end .end-state")).to_contain_text("acked")
    expect(page.locator("#job-end pre.result")).to_have_text(HOSTILE)
    expect(page.locator("#job-progress")).to_be_hidden()  # (ended: no progress to show)
    no_injected_markup(page)

    # a binary result: its size, its base64, a download of its bytes
    binary_id = call(node, "ADDJOB", "ends", "binary", 0)
    assert isinstance(binary_id, bytes)
    assert call(node, "GETJOB", "NOHANG", "FROM", "ends")
    assert call(node, "ACKJOB", binary_id, "RESULT", b"\xff\x00\x01") == 1
    page.goto(job_url(url, binary_id))
    expect(page.locator("#job-end .binary-size")).to_have_text("binary, 3 B")
    expect(page.locator("#job-end pre.base64")).to_be_hidden()
    page.click("#job-end details summary")
    expect(page.locator("#job-end pre.base64")).to_have_text("/wAB")
    with page.expect_download() as download:
        page.click("#job-end a.download")
    saved = tmp_path / "result.bin"
    download.value.save_as(saved)
    assert saved.read_bytes() == b"\xff\x00\x01"


def test_a_dead_letter_shows_why(start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node)
    call(node, "QPOLICY", "work", "SET", "MAXDELIVERIES", 2)
    dead_id = call(node, "ADDJOB", "work", "fails twice", 0)
    assert isinstance(dead_id, bytes)
    for reason in ("timeout after 30 s", HOSTILE):
        assert call(node, "GETJOB", "NOHANG", "FROM", "work")
        call(node, "NACK", "ERROR", reason, dead_id)
    assert call(node, "QLEN", "dead:work") == 1

    page.goto(url + "#/queue/dead:work")
    row = page.locator(f'#jobs tr[data-job="{dead_id.decode()}"]')
    expect(row.locator(".dead-reason")).to_have_text("max-deliveries")
    expect(row.locator("td.failure")).to_contain_text("from work")
    last_errors = row.locator(".last-errors li")
    expect(last_errors).to_have_count(2)
    expect(last_errors.first.locator("code")).to_have_text(HOSTILE)  # the newest first
    expect(last_errors.first).to_contain_text("#2")
    expect(last_errors.last.locator("code")).to_have_text("timeout after 30 s")
    no_injected_markup(page)

    row.locator("a").click()  # its page: a dead letter, with its last error
    expect(page.locator("#job-end .end-state")).to_contain_text("dead")
    expect(page.locator("#job-end pre.end-error")).to_have_text(HOSTILE)
    expect(page.locator("#job-errors tbody tr")).to_have_count(2)
    no_injected_markup(page)


def test_the_finished_jobs_of_the_queues_a_user_may_read(
        start_node: Callable[..., DisqProcess], page: Page) -> None:
    node, url = http_node(start_node, "--requirepass", "s3cret",
                          client_kwargs={"password": "s3cret"})
    call(node, "ACL", "SETUSER", "carl", "on", ">carl-pw", "~c:*", "+@all")
    ended = {}
    for queue, result in (("c:mail", "sent: 3 messages"), ("c:mail", HOSTILE),
                          ("c:files", b"\x89PNG\xff"), ("other", "not carl's")):
        job_id = call(node, "ADDJOB", queue, "job", 0)
        assert isinstance(job_id, bytes)
        assert call(node, "GETJOB", "NOHANG", "FROM", queue)
        assert call(node, "ACKJOB", job_id, "RESULT", result) == 1
        ended[result] = job_id.decode()

    page.goto(url + "#/finished")
    page.fill("#login-user", "carl")
    page.fill("#login-password", "carl-pw")
    page.click("#login-form button[type=submit]")
    rows = page.locator("#results tbody tr[data-job]")
    expect(rows).to_have_count(3)  # not the result of "other"
    expect(rows.nth(0)).to_have_attribute("data-job", ended[b"\x89PNG\xff"])  # newest first
    expect(rows.nth(0).locator("td.result")).to_have_text("binary, 5 B")
    expect(rows.nth(1).locator("td.result")).to_have_text(HOSTILE)
    expect(rows.nth(2).locator("td.result")).to_have_text("sent: 3 messages")
    expect(rows.nth(2)).to_contain_text("16 B")  # its size
    expect(rows.nth(2)).to_contain_text("59m")  # kept for the hour of RESULT-TTL's default
    expect(page.locator("#results")).not_to_contain_text("not carl's")
    no_injected_markup(page)

    # one queue's; a queue carl may not read is refused, saying so
    page.fill("#results-queue", "c:mail")
    page.press("#results-queue", "Enter")
    expect(rows).to_have_count(2)
    page.fill("#results-queue", "other")
    page.press("#results-queue", "Enter")
    expect(page.locator(".toast.error")).to_contain_text("No permissions")
    expect(page.locator("#results-note")).to_contain_text("No permissions")
    expect(rows).to_have_count(0)  # (not the rows of c:mail, as if they were other's)
    for _ in range(2):  # said once, not again at each poll
        updated = page.locator("#status-text").inner_text()
        expect(page.locator("#status-text")).not_to_have_text(updated)
    expect(page.locator(".toast.error")).to_have_count(1)
    # a finished job's page, from the list
    page.fill("#results-queue", "")
    page.press("#results-queue", "Enter")
    expect(rows).to_have_count(3)
    rows.nth(2).locator("a").first.click()
    expect(page.locator("#job-end pre.result")).to_have_text("sent: 3 messages")
