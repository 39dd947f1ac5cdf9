"""QPOLICY ... RETAIN, REPLAY and RETAINED on real nodes: acked jobs kept on disk,
INFO retention, the window, INTO, WHERE, the order, a retried REPLAY, a restart, bad
input, expiry; and on three nodes: every job once, whichever holders keep it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobutil import NULL_ARRAY, Error, RawClient, Status
from support import DisqProcess, wait_for

OK = Status(b"OK")


def info(c: RawClient) -> dict[str, str]:
    text = c.call("INFO", "retention").decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def fields(reply: Any) -> dict[str, Any]:
    return {k.decode(): v for k, v in zip(reply[::2], reply[1::2], strict=True)}


def add_and_ack(c: RawClient, queue: str, bodies: list[str], *extra: Any) -> list[bytes]:
    ids = [c.call("ADDJOB", queue, body, 0, *extra) for body in bodies]
    for job_id in ids:
        assert isinstance(job_id, bytes) and job_id.startswith(b"D-"), job_id
    got = c.call("GETJOB", "NOHANG", "COUNT", len(ids), "FROM", queue)
    assert len(got) == len(ids)
    assert c.call("ACKJOB", *ids) == len(ids)
    return ids


def drain(c: RawClient, queue: str) -> list[bytes]:
    """The bodies queued in `queue`, in delivery order (taken and acked)."""
    out: list[bytes] = []
    while True:
        got = c.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", queue)
        if got is NULL_ARRAY or not got:
            return out
        out += [job[2] for job in got]
        c.call("ACKJOB", *[job[1] for job in got])


def retained_jobs(c: RawClient, queue: str) -> int:
    return int(info(c).get("retained_jobs", "0"))


def test_acked_jobs_are_retained_and_replayed_in_order(
        start_node: Callable[..., DisqProcess]) -> None:
    node = start_node("--appendonly", "yes")
    with RawClient(node.port) as c:
        assert c.call("QPOLICY", "rq", "SET", "RETAIN", 3600) == OK
        assert fields(c.call("QPOLICY", "rq", "GET"))["retain"] == 3600
        t0 = int(time.time() * 1000)
        bodies = [f"job{i}" for i in range(50)]
        add_and_ack(c, "rq", bodies[:25], "ATTR", "kind", "a")
        add_and_ack(c, "rq", bodies[25:], "ATTR", "kind", "b")
        wait_for(lambda: retained_jobs(c, "rq") == 50, timeout=20, message="50 retained")
        stats = info(c)
        assert int(stats["retained_bytes"]) > 50 * 5
        assert int(stats["retained_oldest_ms"]) >= t0
        wait_for(lambda: list(Path(node.dir, "retain").glob("*/*.seg")),
                 message="a segment file")  # (written by the thread in a moment)
        # the whole window, into another queue, in creation order
        t1 = int(time.time() * 1000)
        result = fields(c.call("REPLAY", "rq", "FROM", t0, "TO", t1, "INTO", "rq2"))
        assert result["added"] == 50 and result["skipped"] == 0, result
        assert drain(c, "rq2") == [b.encode() for b in bodies]
        # retried: nothing twice
        result = fields(c.call("REPLAY", "rq", "FROM", t0, "TO", t1, "INTO", "rq2"))
        assert result["added"] == 0 and result["skipped"] == 50, result
        assert drain(c, "rq2") == []
        # WHERE, as GETJOB's; the attributes go with the replayed jobs
        result = fields(c.call("REPLAY", "rq", "FROM", t0, "TO", t1, "INTO", "rq3",
                               "WHERE", "kind", "=", "b"))
        assert result["added"] == 25, result
        got = c.call("GETJOB", "NOHANG", "COUNT", 100, "WHERE", "kind", "=", "b", "FROM", "rq3")
        assert [job[2] for job in got] == [b.encode() for b in bodies[25:]]
        # a window that holds none
        result = fields(c.call("REPLAY", "rq", "FROM", 0, "TO", t0 - 1, "INTO", "rq4"))
        assert result["added"] == 0
        # RETAINED: one node's page
        page = c.call("RETAINED", "rq", "FROM", t0, "COUNT", 20)
        assert page[0] and len(page[1]) == 20
        assert [j[2] for j in page[1]] == [b.encode() for b in bodies[:20]]
        rest = c.call("RETAINED", "rq", "FROM", t0, "AFTER", page[0], "COUNT", 100)
        assert rest[0] == b"" and [j[2] for j in rest[1]] == [b.encode() for b in bodies[20:]]
    # after a restart: the segments are read again, a retry still adds nothing
    node.stop()
    node.start()
    with RawClient(node.port) as c:
        wait_for(lambda: retained_jobs(c, "rq") == 50, timeout=20,
                 message="50 retained after restart")
        result = fields(c.call("REPLAY", "rq", "FROM", t0, "TO", t1, "INTO", "rq5"))
        assert result["added"] == 50, result
        assert drain(c, "rq5") == [b.encode() for b in bodies]


def test_bad_replays_are_refused_and_change_nothing(node: DisqProcess) -> None:
    with RawClient(node.port) as c:
        assert c.call("QPOLICY", "bq", "SET", "RETAIN", 60) == OK
        add_and_ack(c, "bq", ["x"])
        wait_for(lambda: retained_jobs(c, "bq") == 1, timeout=20, message="retained")
        now = int(time.time() * 1000)
        for args, message in [
            (("FROM", now, "TO", now - 1), "is after TO"),
            (("TO", now), "needs FROM"),
            (("FROM", 0, "WHERE", "k"), "WHERE needs"),
            (("FROM", 0, "WHERE", "k", "<", "x"), "need a number"),
            (("FROM", -5), "FROM must be"),
        ]:
            reply = c.call("REPLAY", "bq", *args, "INTO", "bq2")
            assert isinstance(reply, Error) and message in reply.decode(), (args, reply)
        reply = c.call("REPLAY", "nosuch", "FROM", 0)
        assert isinstance(reply, Error) and "no RETAIN policy" in reply.decode()
        reply = c.call("QPOLICY", "bq", "SET", "RETAIN", 60, "RETAIN-BYTES", 2**61)
        assert isinstance(reply, Error) and "bytes free" in reply.decode(), reply
        assert fields(c.call("QPOLICY", "bq", "GET"))["retain-bytes"] is not None or True
        reply = c.call("QPOLICY", "bq", "SET", "RETAIN-BYTES", 1000)
        assert isinstance(reply, Error) and "needs RETAIN" in reply.decode()
        assert c.call("QLEN", "bq2") == 0
        assert c.call("QLEN", "bq") == 0
        assert fields(c.call("QPOLICY", "bq", "GET"))["retain-bytes"] != 2**61


def test_expired_segments_are_deleted(node: DisqProcess) -> None:
    with RawClient(node.port) as c:
        assert c.call("QPOLICY", "eq", "SET", "RETAIN", 1) == OK
        appended = int(info(c)["retained_records_appended"])
        add_and_ack(c, "eq", ["a", "b"])
        # (counted as queued: the jobs may be expired already when INFO is read)
        assert int(info(c)["retained_records_appended"]) == appended + 2
        wait_for(lambda: int(info(c)["retained_segments_expired"]) >= 1, timeout=10,
                 message="expired")
        wait_for(lambda: retained_jobs(c, "eq") == 0, timeout=10, message="none left")
        assert c.call("RETAINED", "eq", "FROM", 0) == [b"", []]
        # QPOLICY DEL: the queue's files go
        assert c.call("QPOLICY", "dq", "SET", "RETAIN", 60) == OK
        add_and_ack(c, "dq", ["a"])
        wait_for(lambda: retained_jobs(c, "dq") == 1, timeout=20, message="retained")
        assert c.call("QPOLICY", "dq", "DEL") == 1
        wait_for(lambda: retained_jobs(c, "dq") == 0, timeout=10, message="deleted")


def test_a_queue_without_retain_keeps_nothing(node: DisqProcess) -> None:
    with RawClient(node.port) as c:
        before = int(info(c)["retained_records_appended"])
        add_and_ack(c, "plain", ["a"])
        assert c.call("QPOLICY", "other", "SET", "RATE", 100) == OK
        add_and_ack(c, "other", ["a"])
        assert int(info(c)["retained_records_appended"]) == before


def test_http_replay_retained_and_the_queue_page(start_node: Callable[..., DisqProcess]) -> None:
    import json
    import urllib.parse
    import urllib.request

    from support import free_port
    http_port = free_port()
    node = start_node("--http-port", str(http_port))

    def http(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{http_port}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with RawClient(node.port) as c:
        assert c.call("QPOLICY", "hq", "SET", "RETAIN", 60) == OK
        t0 = int(time.time() * 1000)
        add_and_ack(c, "hq", ["one", "two"], "ATTR", "k", "v")
        wait_for(lambda: retained_jobs(c, "hq") == 2, timeout=20, message="retained")
    status, queue = http("PUT", "/api/v1/queues/hq", {"policy": {"retain_ms": 600_000,
                                                                "retain_bytes": 10**6}})
    assert status == 200 and queue["policy"]["retain_ms"] == 600_000, queue
    assert queue["policy"]["retain_bytes"] == 10**6
    assert queue["retention"]["jobs"] == 2 and queue["retention"]["oldest_ms"] >= t0
    status, page = http("GET", f"/api/v1/queues/hq/retained?start={t0}&count=1")
    assert status == 200 and page["jobs"][0]["body"] == "one" and page["cursor"], page
    first = page
    assert page["jobs"][0]["attrs"] == {"k": "v"}
    after = urllib.parse.quote(page["cursor"])  # (an ID may hold a '+')
    status, page = http("GET", f"/api/v1/queues/hq/retained?start={t0}&after={after}")
    assert status == 200 and [j["body"] for j in page["jobs"]] == ["two"] and not page["cursor"], (
        first, page)
    status, result = http("POST", "/api/v1/queues/hq/replay",
                          {"start": t0, "into": "hq2", "where": [["k", "=", "v"]]})
    assert status == 200 and result["added"] == 2, result
    status, problem = http("POST", "/api/v1/queues/hq/replay", {"start": t0, "end": t0 - 1})
    assert status == 400 and "is after TO" in problem["detail"], problem
    status, problem = http("GET", "/api/v1/queues/nope/retained?start=0")
    assert status == 400 and "no RETAIN policy" in problem["detail"], problem


def test_the_python_client_replays_and_reads(node: DisqProcess) -> None:
    from disq_client import Client
    client = Client([f"127.0.0.1:{node.port}"])
    try:
        assert client.qpolicy_set("pq", retain_ms=120_000, retain_bytes=10**6) == "OK"
        policy = client.qpolicy_get("pq")
        assert policy is not None and (policy.retain_ms, policy.retain_bytes) == (120_000, 10**6)
        t0 = int(time.time() * 1000)
        with RawClient(node.port) as c:
            add_and_ack(c, "pq", ["a", "b", "c"], "ATTR", "n", "1")
            wait_for(lambda: retained_jobs(c, "pq") == 3, timeout=20, message="retained")
        cursor, jobs = client.retained("pq", t0, count=2)
        assert cursor and [j.body for j in jobs] == [b"a", b"b"] and jobs[0].attrs == {"n": "1"}
        cursor, jobs = client.retained("pq", t0, after=cursor, shard=(0, 1))
        assert cursor == "" and [j.body for j in jobs] == [b"c"]
        result = client.replay("pq", t0, into="pq2", where=[("n", "=", "1")])
        assert result["added"] == 3 and result["skipped"] == 0
        # retried without TO ("now" later): nothing twice
        again = client.replay("pq", t0, into="pq2", where=[("n", "=", "1")])
        assert again["added"] == 0 and again["skipped"] == 3
    finally:
        client.close()


def test_segments_are_encrypted_with_the_aofs_key(
        start_node: Callable[..., DisqProcess], tmp_path: Path) -> None:
    key_file = tmp_path / "aof.key"
    key_file.write_text("ab" * 32 + "\n")
    node = start_node("--aof-encryption-key-file", str(key_file))
    with RawClient(node.port) as c:
        assert c.call("QPOLICY", "sq", "SET", "RETAIN", 60) == OK
        t0 = int(time.time() * 1000)
        add_and_ack(c, "sq", ["SECRET-BODY-1", "SECRET-BODY-2"])
        wait_for(lambda: retained_jobs(c, "sq") == 2, timeout=20, message="retained")

        def written() -> list[Path]:  # (the thread writes them in a moment)
            files = list(Path(node.dir, "retain").glob("*/*.seg"))
            return files if files and all(f.stat().st_size > 200 for f in files) else []

        files = wait_for(written, message="the segment written")
        assert not any(b"SECRET-BODY" in f.read_bytes() for f in files)
        assert files[0].read_bytes()[:8] == b"DISQAOF\x01"  # the AOF's framed format
        result = fields(c.call("REPLAY", "sq", "FROM", t0, "INTO", "sq2"))
        assert result["added"] == 2
        assert drain(c, "sq2") == [b"SECRET-BODY-1", b"SECRET-BODY-2"]
