"""What a client without the password can do to a node that asks for one: guess it
(failed authentications are throttled per source address, across connections and
across the RESP and HTTP ports)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest
from support import DisqProcess, free_port, raw_command, wait_for
from test_acl import client_as, info
from test_http import Http

PASSWORD = b"s3cret"
WRONG = b"-ERR invalid password\r\n"
THROTTLED = b"-ERR too many failed authentications from this address: wait a second\r\n"
PAUSE_S = 1.0  # (disq/server/auth_throttle.py) how long a source is refused, unchecked
MAX_FAILURES = 10  # failures from one source before it is


@pytest.fixture
def guarded(start_node: Callable[..., DisqProcess]) -> DisqProcess:
    return start_node("--requirepass", PASSWORD.decode(),
                      client_kwargs={"password": PASSWORD.decode()})


def auth_on_new_connection(node: DisqProcess, password: bytes) -> bytes:
    with node.connect() as sock:
        return raw_command(sock, b"AUTH " + password + b"\r\n")


# -- failed authentications, per source address -----------------------------------------------

def test_reconnecting_brute_force_is_throttled_across_connections(guarded: DisqProcess
                                                                   ) -> None:
    admin = client_as(guarded)  # authenticated before the guesses (same address)
    admin.execute_command("PING")
    # 50 guesses over 10 connections: 5 on each, under the old per-connection limit
    checked = refused = 0
    start = time.monotonic()
    for _ in range(10):
        with guarded.connect() as sock:
            for _ in range(5):
                answer = raw_command(sock, b"AUTH guess\r\n")
                assert answer in (WRONG, THROTTLED), answer
                checked += answer == WRONG
                refused += answer == THROTTLED
    elapsed = time.monotonic() - start
    # 10 checked, then a pause; a new 10 only after each pause (however slow the host)
    assert refused > 0
    assert checked <= MAX_FAILURES * (1 + math.ceil(elapsed / PAUSE_S)), (checked, elapsed)
    stats = info(admin)
    assert int(stats["acl_access_denied_auth"]) == checked
    assert int(stats["acl_access_denied_auth_throttled"]) == refused
    assert int(stats["acl_auth_pauses"]) >= 1
    assert int(stats["acl_auth_failing_sources"]) == 1

    def right_password_refused() -> bool:
        # guesses until the address is paused, then the right password
        for _ in range(MAX_FAILURES + 1):
            if auth_on_new_connection(guarded, b"guess") == THROTTLED:
                return auth_on_new_connection(guarded, PASSWORD) == THROTTLED
        return False

    wait_for(right_password_refused, timeout=30, message="the right password refused")
    # once the pause has passed, the right password lets the client in
    wait_for(lambda: auth_on_new_connection(guarded, PASSWORD) == b"+OK\r\n",
             timeout=10, message="the pause to end")
    admin.close()


def test_the_resp_and_http_ports_share_an_address_failures(
        start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--requirepass", PASSWORD.decode(), "--http-port", str(port),
                      client_kwargs={"password": PASSWORD.decode()})
    admin = client_as(node)
    admin.execute_command("PING")

    def http_guesses_pause_resp() -> bool:
        wrong = Http(port, auth="Bearer nope")
        for _ in range(MAX_FAILURES):
            if wrong.get("/api/v1/queues")[0] == 429:
                break
        return auth_on_new_connection(node, PASSWORD) == THROTTLED

    wait_for(http_guesses_pause_resp, timeout=30, message="RESP paused by HTTP guesses")
    wait_for(lambda: Http(port, auth="Bearer " + PASSWORD.decode()).get(
        "/api/v1/queues")[0] == 200, timeout=10, message="the pause to end")
    # the counters, in /metrics too
    status, text = Http(port, auth="Bearer " + PASSWORD.decode()).get("/metrics")
    assert status == 200
    assert b"disq_acl_auth_pauses_total " in text
    assert b'disq_acl_access_denied_total{reason="auth_throttled"} ' in text
    assert b"disq_acl_auth_failing_sources 1.0" in text
    stats = info(admin)
    assert int(stats["acl_auth_pauses"]) >= 1
    assert int(stats["acl_access_denied_auth_throttled"]) >= 1
    admin.close()
