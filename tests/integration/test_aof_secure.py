"""The AOF's checksums and encryption at rest (disq/aof/frames.py) with real
disq-server processes: a damaged record found at start (refused, or truncated there
with aof-load-corrupt truncate), Disque's plain file still loading (and rewritten
into frames), an encrypted file across restarts and a BGREWRITEAOF that rotates the
key, wrong and bad key files refused, and disq-check-aof on all of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from jobutil import RawClient
from support import DisqProcess, call, wait_for

from disq.aof.fileformat import loadjob_record
from disq.aof.frames import FRAME, FRAME_SIZE, HEADER_SIZE, reader_for
from disq.aof.serialize import JobEncoder

AOF = ("--appendonly", "yes")


def info(node: DisqProcess) -> dict[str, str]:
    text = call(node, "INFO", "persistence").decode()  # type: ignore[union-attr]
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def job_ids(node: DisqProcess) -> set[bytes]:
    cursor, ids = call(node, "JSCAN", "0", "BUSYLOOP")  # type: ignore[misc]
    assert cursor == b"0"
    return set(ids)


def wait_rewritten(node: DisqProcess) -> None:
    wait_for(lambda: info(node)["aof_rewrite_in_progress"] == "0", 30, 0.02,
             "the AOF rewrite to end")
    assert info(node)["aof_last_bgrewrite_status"] == "ok", node.log()


def frame_starts(data: bytes) -> list[int]:
    starts, at = [], HEADER_SIZE
    while at < len(data):
        starts.append(at)
        at += FRAME_SIZE + FRAME.unpack(data[at:at + FRAME_SIZE])[0]
    return starts


def check_aof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "disq.aof.check", *args],
                          capture_output=True, text=True, timeout=60)


def key_file(path: Path, fill: int) -> Path:
    path.write_text(bytes([fill]) .hex() * 32 + "\n")
    return path


def add_jobs(node: DisqProcess, count: int, prefix: str = "body") -> list[bytes]:
    with RawClient(node.port) as c:  # one ADDJOB at a time: one frame each
        return [c.add("q", f"{prefix} {i}") for i in range(count)]


# -- checksums -------------------------------------------------------------------------------

def test_a_damaged_record_is_found_refused_or_truncated(start_node) -> None:
    node = start_node(*AOF, name="n")
    ids = add_jobs(node, 20)
    assert node.stop() == 0
    path = node.dir / "disque.aof"
    data = path.read_bytes()
    assert data.startswith(b"DISQAOF\x01") and reader_for(data, None).cut_off is None
    body = data.index(b"body 7")  # a flipped byte in a job's body: loaded silently before
    frame = max(s for s in frame_starts(data) if s < body)
    damaged = bytearray(data)
    damaged[body + 5] ^= 0x10  # "body 7" -> "body '"
    path.write_bytes(bytes(damaged))

    with pytest.raises(RuntimeError, match=f"at offset {frame}: checksum mismatch.*"
                       "aof-load-corrupt truncate"):
        start_node(*AOF, name="n")
    assert path.read_bytes() == bytes(damaged)  # refused: untouched
    out = check_aof(str(path))
    assert out.returncode == 1, out.stdout
    assert f"0x{frame:016x}: checksum mismatch" in out.stdout
    assert f"ok_up_to={frame}" in out.stdout

    node = start_node(*AOF, "--aof-load-corrupt", "truncate", name="n")
    assert job_ids(node) == set(ids[:7])
    assert f"truncated at offset {frame}" in node.log()
    assert path.stat().st_size == frame
    more = add_jobs(node, 1, "after")  # and it appends whole frames after them
    assert node.stop() == 0
    node = start_node(*AOF, name="n")
    assert job_ids(node) == set(ids[:7] + more)


def test_a_cut_off_last_frame_loads_the_whole_ones(start_node) -> None:
    node = start_node(*AOF, name="n")
    ids = add_jobs(node, 5)
    assert node.stop() == 0
    path = node.dir / "disque.aof"
    last = frame_starts(path.read_bytes())[-1]
    with open(path, "r+b") as fh:
        fh.truncate(last + 30)  # a crash while the last frame was written
    node = start_node(*AOF, name="n")
    assert job_ids(node) == set(ids[:-1])
    assert f"Truncating the AOF at offset {last}" in node.log()


def test_disques_plain_file_still_loads_and_is_rewritten_in_frames(start_node,
                                                                  tmp_path: Path) -> None:
    from disq.job import QUEUED, Job
    workdir = tmp_path / "n"
    workdir.mkdir()
    encoder = JobEncoder("0123456789abcdef0123456789abcdef01234567")  # as Disque wrote it
    job = Job(b"D-01234567-" + b"A" * 24 + b"-05a1", b"q", b"from disque", QUEUED, 1,
              2_000_000_000_000, 0, 300, 1)
    (workdir / "disque.aof").write_bytes(loadjob_record(encoder.serialize(job)))
    node = start_node(*AOF, name="n")
    assert job_ids(node) == {job.id}
    wait_for(lambda: "Background AOF rewrite finished" in node.log(), 30, 0.02,
             "the rewrite into frames")
    wait_rewritten(node)
    assert "in another format (plain records) than the configured one" in node.log()
    added = add_jobs(node, 1)
    assert node.stop() == 0
    data = (workdir / "disque.aof").read_bytes()
    assert data.startswith(b"DISQAOF\x01")
    assert {args[1][4:44] for _, args in reader_for(data, None)} == {job.id, *added}
    # and aof-checksum no writes Disque's file again
    node = start_node(*AOF, "--aof-checksum", "no", name="n")
    wait_for(lambda: data != (workdir / "disque.aof").read_bytes()
             and "Background AOF rewrite finished" in node.log(), 30, 0.02, "the rewrite")
    wait_rewritten(node)
    assert (workdir / "disque.aof").read_bytes().startswith(b"*2\r\n$7\r\nLOADJOB")
    assert job_ids(node) == {job.id, *added}


# -- encryption at rest ----------------------------------------------------------------------

def test_encrypted_aof_round_trips_and_a_rewrite_rotates_the_key(start_node,
                                                                tmp_path: Path) -> None:
    key = key_file(tmp_path / "aof.key", 1)
    old = key_file(tmp_path / "old.key", 1)
    node = start_node(*AOF, "--aof-encryption-key-file", str(key), name="n")
    first = add_jobs(node, 10, "secret")
    assert node.stop() == 0
    path = node.dir / "disque.aof"
    data = path.read_bytes()
    assert b"secret" not in data and b"LOADJOB" not in data
    out = check_aof("--key-file", str(key), str(path))
    assert out.returncode == 0 and "AOF is valid (10 records)" in out.stdout, out.stdout
    out = check_aof(str(path))  # without the key: the frames' checksums only
    assert out.returncode == 0 and "the records are encrypted" in out.stdout, out.stdout

    node = start_node(*AOF, "--aof-encryption-key-file", str(key), name="n")
    assert job_ids(node) == set(first)
    key_file(key, 2)  # a new key in the file, then the rewrite takes it
    with RawClient(node.port) as c:
        assert c.call("BGREWRITEAOF") == b"Background append only file rewriting started"
    wait_rewritten(node)
    second = add_jobs(node, 3, "secret")
    assert node.stop() == 0
    out = check_aof("--key-file", str(key), str(path))
    assert out.returncode == 0 and "AOF is valid (13 records)" in out.stdout, out.stdout
    out = check_aof("--key-file", str(old), str(path))
    assert out.returncode == 1 and "written with another key" in out.stdout, out.stdout

    node = start_node(*AOF, "--aof-encryption-key-file", str(key), name="n")
    assert job_ids(node) == set(first + second)


def test_a_wrong_key_is_refused_and_the_file_left(start_node, tmp_path: Path) -> None:
    node = start_node(*AOF, "--aof-encryption-key-file",
                      str(key_file(tmp_path / "a.key", 1)), name="n")
    add_jobs(node, 3)
    assert node.stop() == 0
    path = node.dir / "disque.aof"
    data = path.read_bytes()
    with pytest.raises(RuntimeError, match="written with another key") as refused:
        start_node(*AOF, "--aof-encryption-key-file", str(key_file(tmp_path / "b.key", 2)),
                   name="n")
    assert "Traceback" not in str(refused.value)
    with pytest.raises(RuntimeError, match="is encrypted .*set aof-encryption-key-file"):
        start_node(*AOF, name="n")
    assert path.read_bytes() == data


@pytest.mark.parametrize(("content", "message"), [
    (None, "can't read aof-encryption-key-file .*No such file"),
    ("abcd\n", "must hold a 32-byte key as 64 hex digits .*it holds 4 characters"),
    ("z" * 64, "not all hex digits"),
])
def test_a_bad_key_file_stops_the_start_before_anything_is_written(
        start_node, tmp_path: Path, content: str | None, message: str) -> None:
    key = tmp_path / "aof.key"
    if content is not None:
        key.write_text(content)
    with pytest.raises(RuntimeError, match=f"(?s)FATAL CONFIG FILE ERROR.*{message}") as refused:
        start_node(*AOF, "--aof-encryption-key-file", str(key), name="n")
    assert "Traceback" not in str(refused.value)
    assert not (tmp_path / "n" / "disque.aof").exists()


def test_a_rewrite_without_a_readable_key_is_refused_and_the_node_goes_on(
        start_node, tmp_path: Path) -> None:
    key = key_file(tmp_path / "aof.key", 1)
    node = start_node(*AOF, "--aof-encryption-key-file", str(key), name="n")
    ids = add_jobs(node, 2)
    key.write_text("short")
    with RawClient(node.port) as c:
        reply = c.call("BGREWRITEAOF")
        assert reply.startswith(b"ERR Can't rewrite the append only file: "
                                b"aof-encryption-key-file"), reply
        more = c.add("q", "still appended with the key the file has")
    key_file(key, 1)
    assert node.stop() == 0
    node = start_node(*AOF, "--aof-encryption-key-file", str(key), name="n")
    assert job_ids(node) == {*ids, more}
