"""Results (ACKJOB ... RESULT) in the AOF, with real disq-server processes: kept across
kill -9 and a clean stop in every file format (plain, checksummed, encrypted), across
rewrites (live results kept, expired ones dropped, those kept meanwhile too) and
SHUTDOWN REWRITE-AOF; a result received from a peer (SETACK_RESULT) kept too; an
ACKJOB RESULT's reply held until its record is in the file; DEBUG FLUSHALL's forgetting
recorded; a file without results loading as before; a damaged record refused."""

from __future__ import annotations

import resource
import threading
import time
from pathlib import Path

import pytest
from jobutil import NULL_BULK, RawClient
from support import DisqProcess, call, form_cluster, free_port, wait_for
from test_aof import info, wait_rewritten
from test_aof_secure import key_file
from test_results import waitjob_in_thread, watched

from disq.aof.fileformat import deljob_record, loadjob_record, loadresult_record
from disq.aof.frames import reader_for
from disq.aof.serialize import JobEncoder, deserialize_end
from disq.job import QUEUED, Job
from disq.results import ACKED_END, JobEnd

AOF = ("--appendonly", "yes")


def file_args(fmt: str, tmp_path: Path) -> tuple[str, ...]:
    if fmt == "plain":  # Disque's records, no frames
        return (*AOF, "--aof-checksum", "no")
    if fmt == "encrypted":
        return (*AOF, "--aof-encryption-key-file", str(key_file(tmp_path / "key", 7)))
    return AOF  # checksummed frames, the default


def records(node: DisqProcess) -> list[list[bytes]]:
    reader = reader_for((node.dir / "disque.aof").read_bytes(), None)
    found = [args for _, args in reader]
    assert reader.cut_off is None
    return found


def kept_results(node: DisqProcess) -> dict[bytes, bytes | None]:
    """The LOADRESULT records of an unencrypted AOF: job ID -> result."""
    return {end.job_id: end.data for end in
            (deserialize_end(args[1]) for args in records(node) if args[0] == b"LOADRESULT")}


def results_kept(node: DisqProcess) -> int:
    return int(info(node, "results")["results_kept"])


def ends(node: DisqProcess, *ids: bytes) -> list[list[bytes]]:
    with RawClient(node.port) as c:
        reply: list[list[bytes]] = c.call("WAITJOB", "TIMEOUT", 1, *ids)
    return reply


def acked_with_results(node: DisqProcess, count: int, queue: str = "q",
                       prefix: bytes = b"result") -> dict[bytes, bytes]:
    """`count` jobs added then acked with a result each, pipelined: job ID -> result."""
    with RawClient(node.port) as c:
        ids = [c.add(queue, "work") for _ in range(count)]
        for i, job_id in enumerate(ids):
            c.send("ACKJOB", job_id, "RESULT", prefix + b" %d \x00\xff" % i)
        assert [c.read() for _ in ids] == [1] * count
    return {job_id: prefix + b" %d \x00\xff" % i for i, job_id in enumerate(ids)}


# -- across restarts ----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["frames", "plain", "encrypted"])
def test_results_survive_kill_9_and_a_clean_stop(start_node, tmp_path: Path, fmt: str) -> None:
    args = file_args(fmt, tmp_path)
    node = start_node(*args, name="n")
    results = acked_with_results(node, 20)
    with RawClient(node.port) as c:  # a plain ACK a WAITJOB watched: its end is kept
        watched_id = c.add("q", "watched")
        waiting, answers = waitjob_in_thread(node, "TIMEOUT", 10_000, watched_id)
        wait_for(lambda: watched(c) == 1, 5)
        assert c.call("ACKJOB", watched_id) == 1
        waiting.join(10)
        unacked = c.add("q", "not acked")
    assert answers == [[[watched_id, b"acked", NULL_BULK]]]
    expected = [[job_id, b"acked", result] for job_id, result in results.items()]
    expected.append([watched_id, b"acked", NULL_BULK])
    node.kill()  # the replies came: the records are in the file
    node = start_node(*args, name="n")
    assert ends(node, *results, watched_id) == expected
    assert results_kept(node) == 21
    assert "21 results" in node.log()
    assert node.stop() == 0
    node = start_node(*args, name="n")
    assert ends(node, *results, watched_id) == expected
    assert ends(node, unacked) == [[unacked, b"active", NULL_BULK]]  # (as AOF jobs come back)
    with RawClient(node.port) as c:  # the first result stays after a restart too
        assert c.call("ACKJOB", unacked, "RESULT", "first") == 1
        assert c.call("ACKJOB", unacked, "RESULT", "second") == 0
    node.kill()
    node = start_node(*args, name="n")
    assert ends(node, unacked) == [[unacked, b"acked", b"first"]]


def test_a_result_from_a_peer_is_recorded_too(start_node) -> None:
    """SETACK_RESULT: the holder that did not take the ACK keeps the result, and
    records it; restarted alone, it still has it."""
    cluster_args = ("--cluster-node-timeout", "1000", *AOF)
    nodes = form_cluster([start_node(*cluster_args, name=f"c{i}") for i in range(2)])
    job_id = call(nodes[0], "ADDJOB", "q", "work", 5000, "REPLICATE", 2)
    assert call(nodes[0], "ACKJOB", job_id, "RESULT", "from c0") == 1
    wait_for(lambda: results_kept(nodes[1]) == 1, 10, 0.05, "the result on the peer")
    for node in nodes:
        node.kill()
    alone = start_node(*cluster_args, name="c1", port=nodes[1].port)
    assert results_kept(alone) == 1
    assert ends(alone, job_id) == [[job_id, b"acked", b"from c0"]]


def test_debug_flushall_is_recorded(start_node) -> None:
    node = start_node(*AOF, name="n")
    old = acked_with_results(node, 3)
    assert call(node, "DEBUG", "FLUSHALL") == b"OK"
    new = acked_with_results(node, 2, prefix=b"after")
    node.kill()
    node = start_node(*AOF, name="n")
    assert [state for _, state, _ in ends(node, *old)] == [b"unknown"] * 3
    assert ends(node, *new) == [[job_id, b"acked", r] for job_id, r in new.items()]


# -- rewrites -------------------------------------------------------------------------------------

def test_a_rewrite_keeps_live_results_and_drops_expired_ones(start_node) -> None:
    """A rewrite writes a LOADRESULT per live result (those kept while it runs
    included) and none for a result past its time; SHUTDOWN REWRITE-AOF too."""
    node = start_node(*AOF, name="n")
    assert call(node, "QPOLICY", "brief", "SET", "RESULT-TTL", 1) == b"OK"
    brief = acked_with_results(node, 2, queue="brief")
    with RawClient(node.port) as c:  # enough jobs for the rewrite to take a few turns
        for _ in range(10):
            c.send_raw(RawClient.encode("ADDJOB", "filler", b"f" * 200, 0) * 1000)
            for _ in range(1000):
                c.read()
        live = acked_with_results(node, 50)
        wait_for(lambda: results_kept(node) == 50, 10, 0.05, "the brief results to expire")
        later = [c.add("q", "work") for _ in range(5)]
        # acked in the turn the rewrite starts in: their results go to it as it runs
        during = {job_id: b"during %d" % i for i, job_id in enumerate(later)}
        c.send_raw(RawClient.encode("BGREWRITEAOF") + b"".join(
            RawClient.encode("ACKJOB", job_id, "RESULT", result)
            for job_id, result in during.items()))
        assert c.read() == b"Background append only file rewriting started"
        assert [c.read() for _ in during] == [1] * 5
    wait_rewritten(node)
    in_file = kept_results(node)
    assert in_file == {**live, **during}
    assert not brief.keys() & in_file.keys()
    node.kill()
    node = start_node(*AOF, name="n")
    expected = [[job_id, b"acked", r] for job_id, r in {**live, **during}.items()]
    assert ends(node, *live, *during) == expected
    assert [state for _, state, _ in ends(node, *brief)] == [b"unknown"] * 2
    with RawClient(node.port) as c:
        c.send("SHUTDOWN", "REWRITE-AOF")
        assert node.proc is not None and node.proc.wait(30) == 0
    assert kept_results(node) == {**live, **during}
    node = start_node(*AOF, name="n")
    assert ends(node, *live, *during) == expected


# -- durability ------------------------------------------------------------------------------------

def acked_in_thread(node: DisqProcess, http_port: int, front: str, job_id: bytes,
                    result: bytes) -> tuple[threading.Thread, list[object]]:
    """ACKJOB job_id RESULT result (front: "resp" or "http") on its own connection, in
    a thread: the thread, and the list its answer goes to."""
    answers: list[object] = []

    def ack() -> None:
        if front == "resp":
            with RawClient(node.port) as c:
                answers.append(c.call("ACKJOB", job_id, "RESULT", result))
        else:
            from test_http import Http
            answers.append(Http(http_port).post(f"/api/v1/jobs/{job_id.decode()}/ack",
                                                {"result": result.decode()}))

    thread = threading.Thread(target=ack)
    thread.start()
    return thread, answers


@pytest.mark.parametrize("front", ["resp", "http"])
def test_the_reply_waits_for_the_result_record(start_node, front: str) -> None:
    """ACKJOB RESULT of a job acked already (only the result is logged): while the
    AOF cannot be written (a real EFBIG: the server's RLIMIT_FSIZE lowered), its
    reply waits; it comes once the record is written, and the result survives kill -9."""
    http_port = free_port()
    args = (*AOF, "--http-port", str(http_port))
    node = start_node(*args, name="n")
    with RawClient(node.port) as c:
        job_id = c.add("q", "work")
        assert c.call("ACKJOB", job_id) == 1  # acked and gone: no result kept
    size = int(info(node)["aof_current_size"])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (size + 10, hard))
    try:
        thread, answers = acked_in_thread(node, http_port, front, job_id, b"r" * 200)
        # the write fails once the request has reached the node (on a loaded machine,
        # not within any fixed time)
        wait_for(lambda: info(node)["aof_last_write_status"] == "err", 20)
        assert thread.is_alive() and not answers  # held: its record is not in the file
        resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (soft, hard))
        thread.join(10)
    finally:
        if node.alive():
            resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (soft, hard))
    # (the job is not known here any more)
    assert answers == [0 if front == "resp" else (200, {"acked": 0})]
    assert kept_results(node) == {job_id: b"r" * 200}
    node.kill()
    node = start_node(*args, name="n")
    assert ends(node, job_id) == [[job_id, b"acked", b"r" * 200]]


# -- files ----------------------------------------------------------------------------------------

def test_a_file_without_results_loads_as_before(start_node, tmp_path: Path) -> None:
    """A file written before results were recorded (Disque's plain records, another
    node's jobs): it loads as it did; results kept then are added to it, and load
    with it at the next start."""
    workdir = tmp_path / "n"
    workdir.mkdir()
    encoder = JobEncoder("0123456789abcdef0123456789abcdef01234567")
    expire = int(time.time() * 1000) + 3_600_000
    ids = [b"D-01234567-%024d-05a1" % i for i in range(3)]
    with open(workdir / "disque.aof", "wb") as fh:
        for job_id in ids:
            fh.write(loadjob_record(encoder.serialize(
                Job(job_id, b"q", b"body", QUEUED, 1, expire, 0, 300, 1))))
        fh.write(deljob_record(ids[1]))
    node = start_node(*AOF, name="n")
    assert set(call(node, "JSCAN", "0", "BUSYLOOP")[1]) == {ids[0], ids[2]}  # type: ignore
    assert results_kept(node) == 0
    assert call(node, "ACKJOB", ids[0], "RESULT", "after the upgrade") == 1
    node.kill()
    node = start_node(*AOF, name="n")
    assert ends(node, ids[0], ids[2]) == [[ids[0], b"acked", b"after the upgrade"],
                                          [ids[2], b"active", NULL_BULK]]


def test_a_damaged_result_record_stops_the_start_with_its_offset(start_node) -> None:
    args = (*AOF, "--aof-checksum", "no")  # no frames: the record itself is checked
    node = start_node(*args, name="n")
    results = acked_with_results(node, 2)
    assert node.stop() == 0
    path = node.dir / "disque.aof"
    good_size = path.stat().st_size
    job_id = next(iter(results))
    bad = bytearray(loadresult_record(JobEnd(job_id, ACKED_END, b"x", 2**40, 1000, b"q")))
    bad[bad.index(job_id) + 10] = ord("!")  # a separator of the job ID
    with open(path, "ab") as fh:
        fh.write(bytes(bad))
    with pytest.raises(RuntimeError, match=f"offset {good_size}: corrupted LOADRESULT data"):
        start_node(*args, name="n")
    node = start_node(*args, "--aof-load-corrupt", "truncate", name="n")
    assert ends(node, *results) == [[job_id, b"acked", r] for job_id, r in results.items()]
    assert path.stat().st_size == good_size
