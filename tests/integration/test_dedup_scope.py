"""A DEDUP key is scoped to its queue: the same key in two queues makes two jobs, and
nothing about one queue's keys is answered to an ADDJOB on another. A user allowed
some queues neither learns the job IDs of another queue by sending its keys (a leak),
nor takes a key first so that another queue's ADDJOB of it is answered with the
user's job and never added (squatting). Over RESP, ADDJOBS, HTTP, CRON's ticks, and
across nodes (keys checked by the copies, and asked for over the bus)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from support import DisqProcess, free_port, wait_for
from test_http import Http

TIMEOUT = 5000


def client_as(node: DisqProcess, user: str | None = None,
              password: str | None = None) -> redis.Redis:
    creds = {"username": user, "password": password} if user is not None else {}
    client = node.client(protocol=2, **creds)
    client.response_callbacks.clear()
    return client


def queue_of(client: redis.Redis, job_id: bytes) -> bytes:
    shown = client.execute_command("SHOW", job_id)
    assert shown is not None, job_id
    return dict(zip(shown[::2], shown[1::2], strict=True))[b"queue"]  # type: ignore[no-any-return]


@pytest.fixture
def admin_and_user(start_node: Callable[..., DisqProcess]
                   ) -> Iterator[tuple[DisqProcess, redis.Redis, redis.Redis]]:
    """A node with the admin (default) and `qa-user`, who may produce to and read
    `qa*` only."""
    node = start_node()
    admin = client_as(node)
    assert admin.execute_command("ACL", "SETUSER", "qa-user", "on", ">pw", "~qa*",
                                 "+@produce", "+@read") == b"OK"
    user = client_as(node, "qa-user", "pw")
    yield node, admin, user
    admin.close()
    user.close()


def test_a_restricted_user_gets_no_job_id_of_another_queue(
        admin_and_user: tuple[DisqProcess, redis.Redis, redis.Redis]) -> None:
    _, admin, user = admin_and_user
    theirs = admin.execute_command("ADDJOB", "qb", "invoice", 0, "DEDUP", "order-42")
    mine = user.execute_command("ADDJOB", "qa", "x", 0, "DEDUP", "order-42")
    assert mine != theirs
    assert queue_of(admin, mine) == b"qa"
    assert user.execute_command("QLEN", "qa") == 1
    # Within its queue the key still names its job.
    assert user.execute_command("ADDJOB", "qa", "again", 0, "DEDUP", "order-42") == mine
    assert admin.execute_command("ADDJOB", "qb", "again", 0, "DEDUP", "order-42") == theirs


def test_a_key_taken_first_in_one_queue_does_not_stop_another_queues_job(
        admin_and_user: tuple[DisqProcess, redis.Redis, redis.Redis]) -> None:
    _, admin, user = admin_and_user
    squatted = user.execute_command("ADDJOB", "qa", "x", 0, "DEDUP", "invoice-77")
    job = admin.execute_command("ADDJOB", "qb", "invoice", 0, "DEDUP", "invoice-77")
    assert job != squatted
    assert queue_of(admin, job) == b"qb" and admin.execute_command("QLEN", "qb") == 1


def test_addjobs_dedup_jobs_keys_are_scoped_to_the_batchs_queue(
        admin_and_user: tuple[DisqProcess, redis.Redis, redis.Redis]) -> None:
    _, admin, user = admin_and_user
    theirs = admin.execute_command("ADDJOB", "qb", "invoice", 0, "DEDUP", "k1")
    mine = user.execute_command("ADDJOBS", "qa", 0, "DEDUP-JOBS", "k1", "a1", "k2", "a2")
    assert theirs not in mine and len(set(mine)) == 2
    assert user.execute_command("QLEN", "qa") == 2
    again = admin.execute_command("ADDJOBS", "qb", 0, "DEDUP-JOBS", "k1", "b1", "k2", "b2")
    assert again[0] == theirs  # qb's own k1
    assert again[1] not in mine and queue_of(admin, again[1]) == b"qb"
    assert admin.execute_command("QLEN", "qb") == 2


def test_over_http_a_key_is_scoped_to_its_queue(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    admin = client_as(node)
    try:
        admin.execute_command("ACL", "SETUSER", "qa-user", "on", ">pw", "~qa*",
                              "+@produce", "+@read")
    finally:
        admin.close()
    token = base64.b64encode(b"qa-user:pw").decode()
    user, root = Http(port, auth=f"Basic {token}"), Http(port)

    def add(http: Http, queue: str, key: str) -> str:
        status, added = http.post(f"/api/v1/queues/{queue}/jobs",
                                  {"body": "x", "dedup": key})
        assert status == 201, added
        return added["id"]  # type: ignore[no-any-return]

    theirs = add(root, "qb", "order-42")
    leaked = add(user, "qa", "order-42")
    assert leaked != theirs
    squatted = add(user, "qa", "invoice-77")
    job = add(root, "qb", "invoice-77")
    assert job != squatted
    status, shown = root.get(f"/api/v1/jobs/{job}")
    assert status == 200 and shown["queue"] == "qb"
    assert add(root, "qb", "order-42") == theirs and add(user, "qa", "order-42") == leaked


@pytest.fixture
def three(make_cluster: Callable[..., list[DisqProcess]]) -> list[DisqProcess]:
    return make_cluster(3)


def add_on(node: DisqProcess, queue: str, key: str, *options: Any) -> bytes:
    client = client_as(node)
    try:
        reply = client.execute_command("ADDJOB", queue, "body", TIMEOUT, *options,
                                       "DEDUP", key)
    finally:
        client.close()
    assert isinstance(reply, bytes) and reply.startswith(b"D-"), reply
    return reply


def queue_on(nodes: list[DisqProcess], job_id: bytes) -> bytes:
    for node in nodes:
        client = client_as(node)
        try:
            if client.execute_command("SHOW", job_id) is not None:
                return queue_of(client, job_id)
        finally:
            client.close()
    raise AssertionError(f"{job_id!r} held nowhere")


@pytest.mark.parametrize("repl", ["3", "1"], ids=["checked-by-copies", "asked-over-the-bus"])
def test_cluster_keys_are_scoped_to_their_queue(three: list[DisqProcess], repl: str) -> None:
    """REPLICATE 3: every node holds the key with a copy, and a copy checks it;
    REPLICATE 1: only the origin knows the key, the others ask it (DEDUP_QUERY)."""
    a, b, c = three
    theirs = add_on(a, "qb", "order-42", "REPLICATE", repl)
    leaked = add_on(b, "qa", "order-42", "REPLICATE", repl)
    assert leaked != theirs and queue_on(three, leaked) == b"qa"
    squatted = add_on(b, "qa", "invoice-77", "REPLICATE", repl)
    job = add_on(c, "qb", "invoice-77", "REPLICATE", repl)
    assert job != squatted and queue_on(three, job) == b"qb"
    # Each queue's key still names its one job, whichever node is asked.
    for node in three:
        assert add_on(node, "qb", "order-42", "REPLICATE", repl) == theirs
        assert add_on(node, "qa", "order-42", "REPLICATE", repl) == leaked
        assert add_on(node, "qb", "invoice-77", "REPLICATE", repl) == job


def test_a_cron_tick_is_not_taken_by_the_same_key_in_another_queue(
        admin_and_user: tuple[DisqProcess, redis.Redis, redis.Redis]) -> None:
    """CRON's tick key (`cron:<name>:<tick ms>`) is guessable: a user of qa who sends
    the coming ticks' keys to qa first does not stop the schedule's jobs on qb."""
    _, admin, user = admin_and_user
    first = (int(time.time()) + 2) * 1000
    ticks = range(first, first + 8000, 1000)
    squatted = {user.execute_command("ADDJOB", "qa", "x", 0, "DEDUP", f"cron:beat:{tick}")
                for tick in ticks}
    assert admin.execute_command("CRON", "ADD", "beat", "qb", "* * * * * *", "tick",
                                 "TTL", "600") == b"OK"

    def fired() -> dict[bytes, Any] | None:
        (entry,) = admin.execute_command("CRON", "LIST")
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        last = fields[b"last-fire"]
        return fields if last is not None and first + 1000 <= last < first + 8000 else None

    fields = wait_for(fired, 15, message="a squatted tick fired")
    assert fields[b"last-job"] not in squatted
    assert queue_of(admin, fields[b"last-job"]) == b"qb"
    assert admin.execute_command("QLEN", "qb") >= 2
