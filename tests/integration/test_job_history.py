"""A job's delivery history on the node that handles it (history.py), against a real
server: none for a plain job; from its first failed delivery on, its events with their
times, in SHOW's `history` and the HTTP API's job object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobutil import RawClient
from support import DisqProcess, free_port, wait_for
from test_job_errors import shown, taken


def events(fields: dict[bytes, Any]) -> list[bytes]:
    return [event for _, event, _ in fields.get(b"history", [])]


def test_a_jobs_history_from_its_first_failure(start_node: Callable[..., DisqProcess]) -> None:
    from test_http import Http

    http_port = free_port()
    node = start_node("--http-port", str(http_port))
    with RawClient(node.port) as c:
        plain = c.add("q", "plain", "RETRY", 60)
        job_id = c.add("q", "work", "RETRY", 1)
        assert taken(c) == plain and c.call("ACKJOB", plain) == 1
        assert b"history" not in shown(c, job_id)  # a plain job has none
        assert taken(c) == job_id
        assert b"history" not in shown(c, job_id)
        assert c.call("NACK", "ERROR", "it broke", job_id) == 1
        fields = shown(c, job_id)
        assert events(fields) == [b"added", b"nacked", b"queued"]
        assert b"priority" in fields  # (the error made it a job with disq's fields)
        added, nacked, queued = fields[b"history"]
        assert added[2] == b"by node " + job_id[2:10] and added[0] > 1_600_000_000_000
        assert nacked[2] == b"delivery 1: it broke"
        assert added[0] <= nacked[0] <= queued[0]
        assert taken(c) == job_id  # then not acked within its RETRY (1 s): requeued
        wait_for(lambda: events(shown(c, job_id))[-2:] == [b"requeued", b"queued"],
                 timeout=10, message="the requeue after RETRY")
        history = shown(c, job_id)[b"history"]
        delivered = history[3]
        assert delivered[1] == b"delivered" and b" to client id=" in delivered[2]
        assert history[4][2] == b"no ACK within its RETRY (1 s)"
        assert taken(c) == job_id and c.call("NACK", job_id) == 1
        assert events(shown(c, job_id))[-3:] == [b"delivered", b"nacked", b"queued"]
        reply = c.call("SHOW", job_id)

    # the HTTP API's job object: the same
    status, job = Http(http_port).get(f"/api/v1/jobs/{job_id.decode()}")
    assert status == 200
    assert job["history"][-3:] == [[when, event.decode(), detail.decode()]
                                   for when, event, detail in reply[-1][-3:]]
    assert isinstance(job["history"][0][0], int)


def test_a_dead_letter_and_a_plain_nack(start_node: Callable[..., DisqProcess]) -> None:
    node = start_node()
    with RawClient(node.port) as c:
        job_id = c.add("q", "work", "RETRY", 60, "MAXDELIVERIES", 2)
        assert taken(c) == job_id and c.call("NACK", job_id) == 1
        assert taken(c) == job_id and c.call("NACK", "ERROR", "again", job_id) == 1
        history = shown(c, job_id)[b"history"]
        assert [e for _, e, _ in history] == [
            b"added", b"nacked", b"queued", b"delivered", b"nacked", b"dead-lettered"]
        assert history[-1][2] == b"max-deliveries to dead:q"
        # a plain NACK (no error) of a Disque job: Disque's fields, then the history
        other = c.add("q", "plain", "RETRY", 60)
        assert taken(c) == other and c.call("NACK", other) == 1
        reply = c.call("SHOW", other)
        assert reply[30] == b"history" and len(reply) == 32
        # ... and GETJOB WITHCOUNTERS / QPEEK give it as Disque's entry
        [peeked] = c.call("QPEEK", "q", 1)
        assert peeked[1] == other and len(peeked) == 3
        [entry] = c.call("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "q")
        assert entry[1] == other and entry[3:] == [b"nacks", 1, b"additional-deliveries", 0]


def test_the_history_is_not_stored(start_node: Callable[..., DisqProcess]) -> None:
    """In memory only: a rewritten AOF keeps a NACKed Disque job as Disque's record
    (no extended fields), and a restart starts it without a history."""
    node = start_node("--appendonly", "yes")
    with RawClient(node.port) as c:
        job_id = c.add("q", "work", "RETRY", 60)
        assert taken(c) == job_id and c.call("NACK", job_id) == 1
        assert events(shown(c, job_id)) == [b"added", b"nacked", b"queued"]
        assert c.call("BGREWRITEAOF") == b"Background append only file rewriting started"
        wait_for(lambda: c.info_field("aof_rewrite_in_progress") == "0", 10)
    node.stop()
    node.start()
    with RawClient(node.port) as c:
        fields = shown(c, job_id)
        assert fields[b"nacks"] == 1 and len(fields) == 15  # Disque's fields alone
