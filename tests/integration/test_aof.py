"""The append-only file, with real disq-server processes: kill -9 and restart on the
same directory, rewrites under traffic, damaged files, run-time switches, write
errors (a real EFBIG: RLIMIT_FSIZE lowered on the running server, then raised)."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from jobutil import RawClient
from support import DisqProcess, call, form_cluster, wait_for

from disq.aof.fileformat import RecordReader
from disq.aof.frames import reader_for

AOF = ("--appendonly", "yes")
PLAIN = (*AOF, "--aof-checksum", "no")  # Disque's plain records
ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")


# -- helpers ---------------------------------------------------------------------------------

def info(node: DisqProcess, section: str = "persistence") -> dict[str, str]:
    text = call(node, "INFO", section).decode()  # type: ignore[union-attr]
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def job_ids(node: DisqProcess) -> set[bytes]:
    cursor, ids = call(node, "JSCAN", "0", "BUSYLOOP")  # type: ignore[misc]
    assert cursor == b"0"
    return set(ids)


def aof_records(node: DisqProcess) -> list[tuple[bytes, bytes]]:
    """(command, job ID) of each record of the node's AOF."""
    data = (node.dir / "disque.aof").read_bytes()
    reader = reader_for(data, None)
    records = [(args[0], args[1][4:44] if args[0] == b"LOADJOB" else args[1])
               for _, args in reader]
    assert reader.cut_off is None
    return records


def wait_rewritten(node: DisqProcess, timeout: float = 30) -> None:
    wait_for(lambda: info(node)["aof_rewrite_in_progress"] == "0", timeout, 0.02,
             "the AOF rewrite to end")
    assert info(node)["aof_last_bgrewrite_status"] == "ok", node.log()


def encode(*args: bytes | str | int) -> bytes:
    return RawClient.encode(*args)


class Producer:
    """Pipelined ADDJOBs, and ACKJOBs for some of the jobs answered, on one raw
    connection; remembers exactly what the node answered."""

    def __init__(self, port: int, queue: str = "q", body: bytes = b"body") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.queue = queue
        self.body = body
        self.answered: list[bytes] = []  # jobs whose ADDJOB got their ID back
        self.acked: set[bytes] = set()  # jobs whose ACKJOB replied :1
        self.maybe_acked: set[bytes] = set()  # ACKJOB sent, the node died before replying
        self._to_ack: list[bytes] = []
        self._expected: list[bytes | None] = []  # per request sent: the acked ID or None
        self._buf = b""

    def send_batch(self, adds: int, acks: int = 0) -> None:
        acks = min(acks, len(self._to_ack))
        ack_now, self._to_ack = self._to_ack[:acks], self._to_ack[acks:]
        parts = [encode("ADDJOB", self.queue, self.body, 0) for _ in range(adds)]
        parts += [encode("ACKJOB", job_id) for job_id in ack_now]
        self._expected += [None] * adds + ack_now
        self.sock.sendall(b"".join(parts))

    def read_replies(self, until_closed: bool = False) -> None:
        """Read the replies to what was sent (or what arrives before the connection
        drops, with `until_closed`)."""
        while self._expected:
            while b"\r\n" not in self._buf:
                try:
                    chunk = self.sock.recv(1 << 20)
                except ConnectionError:
                    chunk = b""
                if not chunk:
                    if until_closed:
                        self.maybe_acked.update(i for i in self._expected if i is not None)
                        self._expected = []
                        return
                    raise ConnectionError("the node closed the connection")
                self._buf += chunk
            line, self._buf = self._buf.split(b"\r\n", 1)
            acked = self._expected.pop(0)
            if acked is None:
                assert line.startswith(b"+D-"), line
                self.answered.append(line[1:])
                self._to_ack.append(line[1:])
            else:
                assert line in (b":0", b":1"), line
                if line == b":1":
                    self.acked.add(acked)

    def batch(self, adds: int, acks: int = 0) -> None:
        self.send_batch(adds, acks)
        self.read_replies()

    def close(self) -> None:
        self.sock.close()


# -- durability across kill -9 -----------------------------------------------------------

def test_always_keeps_every_answered_job_across_kill_9(start_node) -> None:
    """appendfsync always: each round adds thousands of jobs (and acks some), kills
    the node with requests in flight, restarts it on the same directory. Every job
    answered is there, every job acked is not."""
    answered: set[bytes] = set()
    acked: set[bytes] = set()
    maybe_acked: set[bytes] = set()
    for _ in range(3):
        node = start_node(*ALWAYS, name="n")
        present = job_ids(node)
        assert answered - acked - maybe_acked <= present
        assert not acked & present
        producer = Producer(node.port)
        while len(producer.answered) < 3000:
            producer.batch(200, acks=40)
        producer.send_batch(200, acks=40)  # in flight when the node dies
        node.kill()
        producer.read_replies(until_closed=True)
        producer.close()
        answered.update(producer.answered)
        acked.update(producer.acked)
        maybe_acked.update(producer.maybe_acked)
        assert len(producer.acked) > 100
    node = start_node(*ALWAYS, name="n")
    present = job_ids(node)
    assert answered - acked - maybe_acked <= present
    assert not acked & present
    assert info(node)["aof_state"] == "on"


def test_everysec_keeps_answered_jobs_across_kill_9(start_node) -> None:
    """everysec promises what the page cache has: the file is written before the
    replies leave, so killing the process loses nothing answered either."""
    node = start_node(*AOF, name="n")
    producer = Producer(node.port)
    for _ in range(10):
        producer.batch(300, acks=50)
    producer.send_batch(300)
    node.kill()
    producer.read_replies(until_closed=True)
    node = start_node(*AOF, name="n")
    present = job_ids(node)
    assert set(producer.answered) - producer.acked - producer.maybe_acked <= present
    assert not producer.acked & present


def test_restarted_jobs_are_requeued_after_their_retry(start_node) -> None:
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        queued = c.add("q", "waiting", "RETRY", 2)
        delivered = c.add("q", "delivered", "RETRY", 2)
        assert c.call("GETJOB", "FROM", "q") == [[b"q", queued, b"waiting"]]
        once = c.add("q", "at most once", "RETRY", 0)
    node.kill()
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        for job_id in (queued, delivered, once):
            assert c.show(job_id)["state"] == b"active"  # type: ignore[index]
        wait_for(lambda: c.call("QLEN", "q") == 2, 10, 0.05, "the requeue after RETRY")
        assert c.show(once)["state"] == b"active"  # type: ignore[index]  # never again


# -- rewrites --------------------------------------------------------------------------------

@pytest.mark.parametrize("fsync", ["everysec", "always"])
def test_rewrite_during_steady_traffic_loses_nothing(start_node, fsync: str) -> None:
    args = (*AOF, "--appendfsync", fsync)
    node = start_node(*args, name="n")
    filler = Producer(node.port, queue="filler", body=b"f" * 200)
    for _ in range(40):
        filler.batch(1000)  # enough jobs for a rewrite to take a while
    filler.close()
    producer = Producer(node.port)
    stop = threading.Event()
    errors: list[BaseException] = []

    def traffic() -> None:
        try:
            while not stop.is_set():
                producer.batch(50, acks=20)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=traffic)
    thread.start()
    during: list[int] = []
    try:
        for _ in range(3):
            before = len(producer.answered)
            assert call(node, "BGREWRITEAOF") == b"Background append only file rewriting started"
            assert info(node)["aof_rewrite_in_progress"] == "1"
            wait_rewritten(node)
            during.append(len(producer.answered) - before)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert min(during) > 0, during  # jobs were added while each rewrite ran
    # Without traffic, a rewrite leaves one LOADJOB per live job and nothing else.
    call(node, "BGREWRITEAOF")
    wait_rewritten(node)
    records = aof_records(node)
    live = job_ids(node)
    assert sorted(job_id for _, job_id in records) == sorted(live)
    assert {name for name, _ in records} == {b"LOADJOB"}
    expected = set(producer.answered) - producer.acked
    assert expected <= live and not producer.acked & live
    node.kill()
    node = start_node(*args, name="n")
    assert job_ids(node) == live


def test_automatic_rewrite_on_growth(start_node) -> None:
    node = start_node(*AOF, "--auto-aof-rewrite-min-size", "200kb",
                      "--auto-aof-rewrite-percentage", "100", name="n")
    producer = Producer(node.port, body=b"x" * 300)
    empty = info(node)["aof_base_size"]  # the file's header (frames.py)
    for _ in range(100):  # 100 x 100 jobs: 4 MB of AOF if nothing was rewritten
        producer.batch(100, acks=100)  # ack everything: the live set stays small
        if info(node)["aof_base_size"] != empty:
            break
    wait_rewritten(node)
    assert "Starting automatic rewriting of AOF" in node.log()
    assert int(info(node)["aof_base_size"]) > int(empty)
    # compacted: the jobs acked before the rewrite have no record left
    loadjobs = [job_id for name, job_id in aof_records(node) if name == b"LOADJOB"]
    assert len(loadjobs) < len(producer.answered)
    assert set(producer.answered) - producer.acked <= set(loadjobs)


def test_config_set_appendonly_yes_writes_the_jobs_held(start_node) -> None:
    node = start_node(name="n")
    producer = Producer(node.port)
    for _ in range(20):
        producer.batch(250, acks=25)
    assert info(node)["aof_state"] == "off"
    assert call(node, "CONFIG", "SET", "appendonly", "yes") == b"OK"
    producer.batch(100, acks=10)  # while the first file is written
    wait_for(lambda: info(node)["aof_state"] == "on", 20, 0.02, "aof_state:on")
    producer.batch(100, acks=10)  # appended to it
    node.kill()
    node = start_node(*AOF, name="n")
    present = job_ids(node)
    assert set(producer.answered) - producer.acked <= present
    assert not producer.acked & present
    assert len(present) == len(producer.answered) - len(producer.acked)


def test_config_set_appendonly_no_stops_logging(start_node) -> None:
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        kept = c.add("q")
        assert c.call("CONFIG", "SET", "appendonly", "no") == b"OK"
        c.add("q")  # not logged
    assert info(node)["aof_state"] == "off"
    assert aof_records(node) == [(b"LOADJOB", kept)]


def test_config_set_aof_parameters(start_node) -> None:
    """The AOF directives CONFIG SET takes in Disque, and those it does not."""
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        for name, value in (("appendfsync", "always"), ("appendfsync", "no"),
                            ("auto-aof-rewrite-percentage", "50"),
                            ("auto-aof-rewrite-min-size", "1mb"),
                            ("aof-rewrite-incremental-fsync", "no"),
                            ("aof-load-truncated", "no"), ("aof-enqueue-jobs-once", "no")):
            assert c.call("CONFIG", "SET", name, value) == b"OK", name
            assert c.call("CONFIG", "GET", name)[1] == (
                b"1048576" if value == "1mb" else value.encode())
        for name in ("appendfilename", "no-appendfsync-on-rewrite"):
            assert c.call("CONFIG", "SET", name, "x") == (
                f"ERR Unsupported CONFIG parameter: {name}".encode())
        assert c.call("CONFIG", "SET", "appendfsync", "sometimes") == (
            b"ERR Invalid argument 'sometimes' for CONFIG SET 'appendfsync'")
        job_id = c.add("q")  # appendfsync no: answered once written
    assert aof_records(node) == [(b"LOADJOB", job_id)]


def test_bgrewriteaof_replies(start_node) -> None:
    node = start_node(name="n")  # works with the AOF off too, as in Disque
    with RawClient(node.port) as c:
        job_id = c.add("q")
        assert c.call("BGREWRITEAOF") == b"Background append only file rewriting started"
        reply = c.call("BGREWRITEAOF")
        assert reply in (b"Background append only file rewriting started",
                         b"ERR Background append only file rewriting already in progress")
    wait_rewritten(node)
    assert aof_records(node) == [(b"LOADJOB", job_id)]


# -- damaged files -----------------------------------------------------------------------

def make_file(start_node, jobs: int = 50, flags: tuple[str, ...] = PLAIN
              ) -> tuple[DisqProcess, list[bytes], Path]:
    node = start_node(*flags, name="n")
    with RawClient(node.port) as c:
        ids = [c.add("q", f"body {i}") for i in range(jobs)]
    assert node.stop() == 0
    return node, ids, node.dir / "disque.aof"


def record_starts(path: Path) -> list[int]:
    return [offset for offset, _ in RecordReader(path.read_bytes())]


def test_cut_off_tail_loads_the_whole_records(start_node) -> None:
    _, ids, path = make_file(start_node)
    last = record_starts(path)[-1]
    cut = last + 60  # in the middle of the last LOADJOB
    with open(path, "r+b") as fh:
        fh.truncate(cut)
    node = start_node(*PLAIN, name="n")
    assert job_ids(node) == set(ids[:-1])
    log = node.log()
    assert "short read while loading the AOF" in log
    assert f"Truncating the AOF at offset {last}" in log
    assert path.stat().st_size == last
    with RawClient(node.port) as c:  # and it goes on appending whole records
        job_id = c.add("q")
    assert aof_records(node)[-1] == (b"LOADJOB", job_id)


def test_cut_off_tail_refused_with_aof_load_truncated_no(start_node) -> None:
    _, _, path = make_file(start_node, 5)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size - 7)
    with pytest.raises(RuntimeError, match="Unexpected end of file"):
        start_node(*PLAIN, "--aof-load-truncated", "no", name="n")
    assert path.stat().st_size == size - 7  # untouched


def test_damage_in_the_middle_stops_the_start(start_node) -> None:
    _, ids, path = make_file(start_node, 20)
    starts = record_starts(path)
    bad = starts[7]
    data = bytearray(path.read_bytes())
    data[bad] = ord("#")
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=f"Bad file format .* at offset {bad}"):
        start_node(*PLAIN, name="n")
    check = [sys.executable, "-m", "disq.aof.check"]
    out = subprocess.run([*check, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"ok_up_to={bad}" in out.stdout and "AOF is not valid" in out.stdout
    out = subprocess.run([*check, "--fix", str(path)], input="y\n", capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "Successfully truncated AOF" in out.stdout
    assert path.stat().st_size == bad
    node = start_node(*PLAIN, name="n")
    assert job_ids(node) == set(ids[:7])


def test_check_aof_on_a_good_file(start_node) -> None:
    node, _, path = make_file(start_node, 3)
    out = subprocess.run([sys.executable, "-m", "disq.aof.check", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        f"AOF analyzed: size={path.stat().st_size}, ok_up_to={path.stat().st_size}, diff=0",
        "AOF is valid (3 records)"]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_check_aof_help(flag: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "disq.aof.check", flag], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
    assert out.stdout.startswith("Usage: disq-check-aof [--fix] [--key-file <file>] <file.aof>")
    assert "Cannot open" not in out.stdout


def test_check_aof_unknown_option_is_not_a_file_name(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "disq.aof.check", "--verbose"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stdout.splitlines() == ["Invalid argument: --verbose",
                                       "Usage: disq-check-aof [--fix] [--key-file <file>] <file.aof>"]


# -- loading -----------------------------------------------------------------------------

def test_loading_answers_loading_then_serves(start_node, tmp_path: Path) -> None:
    """A big file: clients connected while it loads get -LOADING (INFO and PING
    work), then the jobs are there."""
    from disq.aof.fileformat import loadjob_record
    from disq.aof.serialize import JobEncoder
    from disq.job import QUEUED, Job

    workdir = tmp_path / "n"
    workdir.mkdir()
    encoder = JobEncoder("0123456789abcdef0123456789abcdef01234567")  # another node
    expire = int(time.time() * 1000) + 3_600_000
    count = 300_000
    with open(workdir / "disque.aof", "wb") as fh:
        for i in range(count):
            job_id = b"D-01234567-%024d-05a1" % i
            job = Job(job_id, b"q", b"x", QUEUED, i, expire, 0, 300, 1)
            fh.write(loadjob_record(encoder.serialize(job)))
    node = start_node(*AOF, name="n", loaded=False)
    with RawClient(node.port) as c:
        c.send_raw(encode("INFO", "persistence") + encode("ADDJOB", "q", "x", 0)
                   + encode("PING"))
        persistence, addjob, ping = c.read(), c.read(), c.read()
    assert b"loading:1" in persistence, "the file loaded too fast to see it loading"
    assert b"loading_total_bytes:" in persistence
    assert addjob == b"LOADING Disque is loading the dataset in memory"
    assert ping == b"PONG"
    wait_for(lambda: info(node)["loading"] == "0", 60, 0.1, "the end of loading")
    assert info(node, "jobs")["registered_jobs"] == str(count)


def test_debug_loadaof_and_loadjob(start_node) -> None:
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        a = c.add("q", "a")
        b = c.add("q", "b")
        assert c.call("ACKJOB", b) == 1
        assert c.call("DEBUG", "LOADAOF") == b"OK"
        assert c.show(a)["state"] == b"active"  # type: ignore[index]
        assert c.show(b) is None
        assert c.call("LOADJOB", "x") == b"ERR LOADJOB is a special command only processed from AOF"
    node.kill()  # DEBUG LOADAOF logged nothing: the file still has job a
    node = start_node(*AOF, name="n")
    assert job_ids(node) == {a}


def test_debug_loadaof_on_a_damaged_file_answers_an_error(start_node) -> None:
    node = start_node(*AOF, name="n")
    with RawClient(node.port) as c:
        c.add("q")
        size = (node.dir / "disque.aof").stat().st_size
        with open(node.dir / "disque.aof", "ab") as fh:
            fh.write(b"#not a record\r\n" + b"x" * 100)
        reply = c.call("DEBUG", "LOADAOF")
        expected = f"ERR Bad file format reading the append only file at offset {size}"
        assert reply.startswith(expected.encode()), reply
        assert c.call("PING") == b"PONG"  # Disque exits here; disq answers and goes on


def test_controlled_restart_requeues_jobs_once(start_node) -> None:
    """Disque's recipe: CONFIG SET aof-enqueue-jobs-once yes, CONFIG REWRITE,
    SHUTDOWN REWRITE-AOF; the option switches itself off at the next start. It
    works with the AOF off, too."""
    node = start_node(name="n", config_text="appendonly no\n")
    with RawClient(node.port) as c:
        ids = [c.add("q", f"job {i}") for i in range(10)]
        taken = c.call("GETJOB", "FROM", "q")[0][1]
        assert c.call("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
        assert c.call("CONFIG", "REWRITE") == b"OK"
        c.send("SHUTDOWN", "REWRITE-AOF")
        assert c.pending(5) == b""  # no reply: the connection closes
    wait_for(lambda: not node.alive(), 10, 0.05, "the node to exit")
    assert [r[0] for r in aof_records(node)] == [b"LOADJOB"] * 10
    node = start_node(name="n", config_text=(node.dir / "disq.conf").read_text())
    with RawClient(node.port) as c:
        assert c.call("QLEN", "q") == 9
        assert c.show(taken)["state"] == b"active"  # type: ignore[index]
    assert job_ids(node) == set(ids)
    assert "aof-enqueue-jobs-once yes" not in (node.dir / "disq.conf").read_text()


# -- write errors ----------------------------------------------------------------------------

def test_write_error_refuses_writes_with_misconf_and_recovers(start_node) -> None:
    """A real write error: the server's RLIMIT_FSIZE lowered to just above the AOF's
    size (EFBIG, "File too large"), then raised again."""
    node = start_node(*AOF, name="n")
    producer = Producer(node.port, queue="fill", body=b"b" * 1000)
    for _ in range(10):
        producer.batch(50)  # ~60 KB of AOF: far more than the log file
    size = int(info(node)["aof_current_size"])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (size + 3000, hard))
    try:
        with RawClient(node.port) as c:
            answered = []
            c.sock.settimeout(2)
            for _ in range(5):  # the third ADDJOB no longer fits
                c.send("ADDJOB", "q", "b" * 1000, 0)
                try:
                    answered.append(bytes(c.read()))
                except TimeoutError:
                    break
            assert len(answered) == 2, answered  # the one that failed waits
            with RawClient(node.port) as other:
                misconf = "MISCONF Errors writing to the AOF file: File too large"
                assert other.call("ADDJOB", "q", "x", 0) == misconf.encode()
                assert other.call("PING") == misconf.encode()
                assert other.call("ACKJOB", answered[0]) == misconf.encode()
                assert other.call("QLEN", "q") == 3  # reads still work
                assert info(node)["aof_last_write_status"] == "err"
            resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (soft, hard))
            c.sock.settimeout(10)
            held = bytes(c.read())  # answered once the retry succeeds
    finally:
        if node.alive():
            resource.prlimit(node.pid, resource.RLIMIT_FSIZE, (soft, hard))
    assert held.startswith(b"D-")
    wait_for(lambda: info(node)["aof_last_write_status"] == "ok", 5, 0.05, "recovery")
    assert call(node, "PING") == b"PONG"
    assert "Error writing to the AOF file" in node.log() or "Short write" in node.log()
    assert "AOF write error looks solved" in node.log()
    node.kill()
    node = start_node(*AOF, name="n")
    assert {*answered, held, *producer.answered} <= job_ids(node)


# -- a cluster -------------------------------------------------------------------------------

def test_replicated_job_delivered_after_mass_restart(start_node) -> None:
    """Disque's 07-persistence test: AOF on every node, a job replicated to 3 nodes,
    every node killed and restarted: the job is queued again somewhere and
    delivered."""
    args = ("--cluster-node-timeout", "1000", *AOF)
    nodes = form_cluster([start_node(*args, name=f"c{i}") for i in range(3)])
    job_id = call(nodes[1], "ADDJOB", "pq", "persistent body", 5000, "REPLICATE", 3,
                  "RETRY", 1)
    for node in nodes:
        node.kill()
    nodes = [start_node(*args, name=f"c{i}", port=node.port) for i, node in enumerate(nodes)]

    def queued_somewhere() -> DisqProcess | None:
        for node in nodes:
            if call(node, "QLEN", "pq"):
                return node
        return None

    def take() -> object:
        for node in nodes:
            taken = call(node, "GETJOB", "NOHANG", "FROM", "pq")
            if taken:
                return taken
        return None

    wait_for(queued_somewhere, 15, 0.05, "the job queued again after restart")
    assert wait_for(take, 15, 0.05, "the job") == [[b"pq", job_id, b"persistent body"]]
    assert os.path.exists(nodes[0].dir / "disque.aof")
