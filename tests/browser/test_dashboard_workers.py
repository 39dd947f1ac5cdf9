"""The dashboard's Workers page in a real browser (conftest.py's Chromium and
fixtures): the node's consumers, what a blocked one waits on, the jobs each took and
still holds; every connection when asked (a client name of markup shown as text)."""

from __future__ import annotations

import socket
from collections.abc import Callable

from browsing import Page, expect, http_node, no_injected_markup
from support import DisqProcess, call, wait_for

MARKUP = "<i>idle</i>"  # (a client name has no spaces)


def _send(sock: socket.socket, *args: str) -> None:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    sock.sendall(b"".join(parts))


def test_the_workers_page_shows_the_consumers(start_node: Callable[..., DisqProcess],
                                              page: Page) -> None:
    node, url = http_node(start_node)
    for i in range(3):
        call(node, "ADDJOB", "w-q", f"job {i}", 0)
    holder = socket.create_connection(("127.0.0.1", node.port))
    waiter = socket.create_connection(("127.0.0.1", node.port))
    idle = socket.create_connection(("127.0.0.1", node.port))
    try:
        _send(idle, "CLIENT", "SETNAME", MARKUP)
        _send(holder, "CLIENT", "SETNAME", "holder")
        _send(holder, "GETJOB", "COUNT", "3", "FROM", "w-q")  # takes the 3 jobs
        _send(waiter, "CLIENT", "SETNAME", "waiter")
        wait_for(lambda: call(node, "QLEN", "w-q") == 0, 5)
        _send(waiter, "GETJOB", "TIMEOUT", "30000", "FROM", "w-idle", "w-q")
        wait_for(lambda: b"flags=b" in call(node, "CLIENT", "LIST"), 5)  # type: ignore[operator]
        page.goto(url + "#/workers")
        rows = page.locator("#clients tbody tr")
        expect(rows).to_have_count(2)  # the consumers only: not the page's own HTTP, not call()'s
        held = rows.first
        expect(held.locator("td").first).to_contain_text("holder")
        expect(held.locator("td.in-hand")).to_have_text("3 jobs")
        waiting = rows.nth(1)
        expect(waiting).to_contain_text("waiting on w-idle w-q")
        page.uncheck("#consumers-only")
        expect(page.locator("#clients tbody td code", has_text=MARKUP)).to_have_count(1)
        expect(page.locator("#clients tbody i")).to_have_count(0)  # text, not markup
        no_injected_markup(page)
    finally:
        for sock in (holder, waiter, idle):
            sock.close()
