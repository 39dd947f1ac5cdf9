"""The AOF writer on a real event loop and a real file: what `commit` promises, group
commit under `appendfsync always`, write errors and their recovery. fsync and write
failures are injected by replacing the functions the writer calls (a disk that fails
on demand is not available to an unprivileged test; the integration tests provoke a
real EFBIG with RLIMIT_FSIZE)."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from disq.aof import writer as writer_module
from disq.aof.frames import reader_for
from disq.aof.writer import ON, AppendOnlyFile
from disq.config import Config
from disq.node import Node
from disq.ports import NO_PERSISTENCE
from disq.requests import AddJob

ME = "a" * 40


def make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str) -> AppendOnlyFile:
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.apply("appendfsync", [fsync])
    node = Node(config, ME)
    node.arm_timer = lambda when: None
    aof = AppendOnlyFile(config, node, asyncio.get_running_loop())
    aof.open()
    assert aof.state == ON and node.persistence is aof
    return aof


def add(aof: AppendOnlyFile, body: bytes = b"x") -> bytes:
    return aof.node.admission.add_job(AddJob(b"q", body, ttl=3600)).id


def ids_in_file(path: str = "disque.aof") -> list[bytes]:
    data = Path(path).read_bytes()
    out = []
    for _, args in reader_for(data, None):
        out.append(args[1][4:44] if args[0] == b"LOADJOB" else b"DEL " + args[1])
    return out


async def wait_until(condition, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def test_the_writer_is_the_node_persistence_while_it_records(
        tmp_path, monkeypatch) -> None:
    """The AOF on: the core logs to it; DEBUG LOADAOF logs nothing while it loads;
    turned off: to nothing; a BGREWRITEAOF with the AOF off: to it until it ends."""
    aof = make(tmp_path, monkeypatch, "everysec")
    node = aof.node
    with aof.not_recording():
        assert node.persistence is NO_PERSISTENCE
    assert node.persistence is aof and aof.recording and node.recording
    aof.turn_off()
    assert node.persistence is NO_PERSISTENCE and not (aof.recording or node.recording)
    add(aof)
    assert aof.appended == 0
    assert aof.start_rewrite()
    assert node.persistence is aof and node.recording
    add(aof)
    assert aof.appended == 1
    await wait_until(lambda: aof.rewrite is None)
    assert node.persistence is NO_PERSISTENCE and aof.last_rewrite_ok


async def test_commit_writes_before_the_reply(tmp_path, monkeypatch) -> None:
    aof = make(tmp_path, monkeypatch, "everysec")
    job_id = add(aof)
    assert aof.commit() is True  # everysec: written is what replies count on
    assert ids_in_file() == [job_id]
    aof.node.ack([job_id])
    assert aof.commit() is True
    assert ids_in_file() == [job_id, b"DEL " + job_id]
    aof.shutdown()


async def test_end_of_turn_writes_what_no_request_committed(tmp_path, monkeypatch) -> None:
    aof = make(tmp_path, monkeypatch, "no")
    job_id = add(aof)  # as a bus message or a timer would: nobody calls commit
    await asyncio.sleep(0)
    assert ids_in_file() == [job_id]
    aof.shutdown()


async def test_always_answers_after_the_fsync_that_covers_it(tmp_path, monkeypatch) -> None:
    aof = make(tmp_path, monkeypatch, "always")
    gate = threading.Event()
    calls: list[int] = []
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        calls.append(fd)
        gate.wait(5)
        real_fdatasync(fd)

    monkeypatch.setattr(writer_module.os, "fdatasync", slow_fdatasync)
    answered: list[str] = []
    add(aof, b"first")
    assert aof.commit() is False
    aof.on_durable(lambda: answered.append("first"))
    await wait_until(lambda: len(calls) == 1)  # the fsync started at the end of the turn
    # while it runs, two more "turns" log and wait: one later fsync covers both
    add(aof, b"second")
    assert aof.commit() is False
    aof.on_durable(lambda: answered.append("second"))
    await asyncio.sleep(0)
    add(aof, b"third")
    assert aof.commit() is False
    aof.on_durable(lambda: answered.append("third"))
    await asyncio.sleep(0.05)
    assert answered == [] and len(calls) == 1  # nothing answered before its fsync
    gate.set()
    await wait_until(lambda: len(answered) == 3)
    assert answered == ["first", "second", "third"]
    assert len(calls) == 2  # group commit: the second fsync covered two turns
    assert aof.synced == aof.written == aof.appended == 3
    aof.shutdown()


async def test_write_error_holds_replies_and_recovers(tmp_path, monkeypatch) -> None:
    aof = make(tmp_path, monkeypatch, "everysec")
    changes: list[int] = []
    aof.on_status_change = lambda: changes.append(aof.write_errno)
    first = add(aof)
    assert aof.commit()
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer_module.os, "write", full_disk)
    second = add(aof)
    assert aof.commit() is False
    answered: list[bool] = []
    aof.on_durable(lambda: answered.append(True))
    assert aof.write_errno == errno.ENOSPC and changes == [errno.ENOSPC]
    assert aof.misconf is not None and aof.misconf().reply() == (
        b"-MISCONF Errors writing to the AOF file: No space left on device\r\n")
    await asyncio.sleep(0.01)
    aof.cron()
    assert answered == [] and ids_in_file() == [first]
    monkeypatch.setattr(writer_module.os, "write", real_write)
    monkeypatch.setattr(writer_module, "RETRY_PERIOD", 0.0)
    aof.cron()  # the retry, once a second in the server
    assert answered == [True] and changes == [errno.ENOSPC, 0]
    assert aof.misconf is None
    assert ids_in_file() == [first, second]
    aof.shutdown()


async def test_short_write_is_completed_or_taken_back(tmp_path, monkeypatch) -> None:
    aof = make(tmp_path, monkeypatch, "everysec")
    first = add(aof)
    aof.commit()
    real_write = os.write
    calls: list[int] = []

    def half_then_full_disk(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) % 2:
            return real_write(fd, bytes(data[:len(data) // 2]))
        if fail[0]:
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
        return real_write(fd, data)

    fail = [False]
    monkeypatch.setattr(writer_module.os, "write", half_then_full_disk)
    second = add(aof)
    assert aof.commit() is True  # the rest went in a second write
    assert ids_in_file() == [first, second]
    fail[0] = True
    third = add(aof)
    assert aof.commit() is False and aof.write_errno == errno.EFBIG  # the real cause
    assert ids_in_file() == [first, second]  # the half record was truncated away
    monkeypatch.setattr(writer_module.os, "write", real_write)
    assert aof.commit() is True and aof.write_errno == 0
    assert ids_in_file() == [first, second, third]
    assert aof.current_size == os.path.getsize("disque.aof")
    aof.shutdown()


async def test_failed_fsync_rewrites_the_file(tmp_path, monkeypatch) -> None:
    """After a failed fsync the kernel may have dropped the written pages: the
    writer does not trust a later fsync, it rewrites the file from memory."""
    aof = make(tmp_path, monkeypatch, "always")
    real_fdatasync = os.fdatasync
    failures = [errno.EIO]

    def failing_fdatasync(fd: int) -> None:
        if failures:
            raise OSError(failures.pop(), "injected")
        real_fdatasync(fd)

    monkeypatch.setattr(writer_module.os, "fdatasync", failing_fdatasync)
    monkeypatch.setattr(writer_module, "REWRITE_RETRY_PERIOD", 0.0)
    job_id = add(aof)
    assert aof.commit() is False
    answered: list[bool] = []
    aof.on_durable(lambda: answered.append(True))
    await wait_until(lambda: aof.write_errno == errno.EIO)
    assert answered == []
    aof.cron()  # starts the rewrite
    assert aof.rewrite is not None
    await wait_until(lambda: answered == [True])
    assert aof.write_errno == 0 and ids_in_file() == [job_id]
    aof.shutdown()


async def test_rewrite_under_always_traffic_keeps_every_answered_job(
        tmp_path, monkeypatch) -> None:
    """A rewrite while jobs are added and acked under appendfsync always: the new file
    replaces the old one, every job answered and not acked is in it, every job acked
    is not, and the replies waiting for an fsync are all answered."""
    from disq.aof.loader import AofLoader

    aof = make(tmp_path, monkeypatch, "always")
    node = aof.node
    answered: list[bytes] = []
    for _ in range(3000):
        answered.append(add(aof))
    aof.commit()
    await wait_until(lambda: aof.synced == aof.appended)
    acked: set[bytes] = set()
    assert aof.start_rewrite()
    turns = 0
    while aof.rewrite is not None:
        ids = [add(aof) for _ in range(20)]
        to_ack = answered[turns * 5:turns * 5 + 5]
        node.ack(to_ack)
        acked.update(to_ack)
        if aof.commit():
            answered.extend(ids)
        else:
            aof.on_durable(lambda ids=ids: answered.extend(ids))
        turns += 1
        await asyncio.sleep(0)
    assert turns > 3 and aof.generation == 1 and aof.last_rewrite_ok
    await wait_until(lambda: not aof.waiters and aof.synced == aof.appended)
    aof.shutdown()
    fresh = Node(Config(), ME)
    fresh.arm_timer = lambda when: None
    loader = AofLoader(fresh, "disque.aof", enqueue_jobs=False, load_truncated=False,
                       known_ids={ME: ME})
    for _ in loader.run():
        pass
    loaded = {job.id for job in fresh.jobs.values()}
    assert loaded == set(answered) - acked
