"""Properties of the AOF loader (disq/aof/loader.py) and disq-check-aof
(disq/aof/check.py) over generated files: valid files of real records, then cut
short, with bytes flipped, or with garbage inserted.

The loader either loads (a cut-off tail is truncated, and the log says where) or
refuses with AofLoadError naming the offset; nothing else escapes. A job it loads is
one that was written: Disque's format has no checksum, so a flipped byte inside a
record that still decodes (a body byte, a counter) cannot be told from the original;
the property allows that one record to differ, and only when the flip lies in it.
disq-check-aof finds the damage at the offset the loader names."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from disq.aof.check import analyze
from disq.aof.fileformat import DELJOB_HEAD, deljob_record, loadjob_record
from disq.aof.loader import AofLoader, AofLoadError
from disq.aof.serialize import JobEncoder
from disq.config import Config
from disq.job import ACKED, ACTIVE, QUEUED, Job
from disq.node import Node, now_ms

ME = "a" * 40
OTHER = "b" * 40
ETIME = (now_ms() // 1000 + 3600) * 1000  # whole seconds: stored exactly
ID_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ/+"


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    serial = draw(st.text(ID_CHARS, min_size=24, max_size=24))
    job = Job(b"D-aaaaaaaa-" + serial.encode() + b"-05a1",
              draw(st.binary(max_size=12)), draw(st.binary(max_size=40)),
              draw(st.sampled_from([ACTIVE, QUEUED])), draw(st.integers(0, 2**63 - 1)),
              ETIME, draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**32 - 1)),
              draw(st.integers(1, 65535)))
    job.nacks = draw(st.integers(0, 65535))
    job.deliveries = draw(st.integers(0, 65535))
    job.nodes_delivered = frozenset(draw(st.sets(st.sampled_from([ME, OTHER, "c" * 40]))))
    return job


@st.composite
def aof_files(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int, Job | None]]]:
    """A valid file and its records: (start, end, job or None for a DELJOB)."""
    data = b""
    records: list[tuple[int, int, Job | None]] = []
    written: list[Job] = []
    encoder = JobEncoder(ME)
    for _ in range(draw(st.integers(1, 6))):
        if written and draw(st.integers(0, 4)) == 0:
            record, job = deljob_record(draw(st.sampled_from(written)).id), None
        else:
            job = draw(jobs())
            if any(job.id == other.id for other in written):
                continue  # one record per job (the first one wins, as in Disque)
            written.append(job)
            record = loadjob_record(encoder.serialize(job))
        records.append((len(data), len(data) + len(record), job))
        data += record
    return data, records


def same_job(loaded: Job, written: Job) -> bool:
    return ((loaded.id, loaded.queue, loaded.body, loaded.repl, loaded.ctime, loaded.etime,
             loaded.delay, loaded.retry, loaded.nacks, loaded.deliveries)
            == (written.id, written.queue, written.body, written.repl, written.ctime,
                written.etime, written.delay, written.retry, written.nacks,
                written.deliveries))


def load(path: Path) -> tuple[Node, AofLoader | None, str | None]:
    node = Node(Config(), ME)
    node.arm_timer = lambda when: None
    loader = AofLoader(node, str(path), enqueue_jobs=False, load_truncated=True,
                       known_ids={ME: ME, OTHER: OTHER})
    try:
        for _ in loader.run():
            pass
    except AofLoadError as exc:
        return node, None, str(exc)
    return node, loader, None


def check(tmp_path: Path, data: bytes, records: list[tuple[int, int, Job | None]],
          damaged: tuple[int, int] | None) -> None:
    """Load `data`; `damaged` is the byte range changed in place (flips), if any."""
    path = tmp_path / "disque.aof"
    path.write_bytes(data)
    copy = tmp_path / "copy.aof"
    shutil.copyfile(path, copy)
    size, ok_up_to, problem, _ = analyze(str(copy)) if data else (0, 0, None, 0)
    node, loader, error = load(path)
    if error is not None:
        found = re.search(r"offset (\d+)", error)
        assert found, error
        assert problem is not None and ok_up_to == int(found[1]), (error, problem)
        assert "the file ends inside a record" not in problem, (error, problem)
        return
    assert loader is not None
    if loader.size_after < len(data):  # truncated after its last whole record
        assert problem is not None and "the file ends inside a record" in problem, problem
        assert ok_up_to == loader.size_after == path.stat().st_size
    else:
        assert problem is None, problem
    written = {job.id: job for _, _, job in records if job is not None}
    suspects = {job.id for start, end, job in records if job is not None
                and damaged is not None and start < damaged[1] and damaged[0] < end}
    odd = [job for job in node.jobs.values()
           if job.id not in written or not same_job(job, written[job.id])]
    assert len(odd) <= len(suspects) <= 1, (odd, suspects)


@fuzz_settings(200)
@given(aof_files())
def test_a_valid_file_loads_every_job(tmp_path_factory, file) -> None:
    data, records = file
    tmp = tmp_path_factory.mktemp("aof")
    check(tmp, data, records, None)
    node, _, _ = load(tmp / "copy.aof")
    live = {job.id for _, _, job in records if job is not None}
    for start, _, job in records:  # a DELJOB removes what came before it
        if job is None:
            live.discard(data[start + len(DELJOB_HEAD):start + len(DELJOB_HEAD) + 40])
    assert {job.id for job in node.jobs.values()} == live


@fuzz_settings(200)
@given(aof_files(), st.integers(0, 10_000))
def test_a_cut_file_loads_its_whole_records(tmp_path_factory, file, cut: int) -> None:
    data, records = file
    check(tmp_path_factory.mktemp("aof"), data[:cut % (len(data) + 1)], records, None)


@fuzz_settings(300)
@given(aof_files(), st.lists(st.tuples(st.integers(0, 100_000), st.integers(1, 255)),
                             min_size=1, max_size=3))
def test_flipped_bytes_never_load_a_job_that_was_not_written(tmp_path_factory, file,
                                                             flips) -> None:
    data, records = file
    out = bytearray(data)
    first = last = None
    for pos, mask in flips[:1]:  # one flip: the property knows which record it is in
        pos %= len(out)
        out[pos] ^= mask
        first, last = pos, pos + 1
    check(tmp_path_factory.mktemp("aof"), bytes(out), records,
          (first, last) if first is not None else None)


@fuzz_settings(300)
@given(aof_files(), st.integers(0, 100_000),
       st.binary(min_size=1, max_size=30) | st.sampled_from(
           [b"\r\n", b"*2\r\n", b"$7\r\nLOADJOB\r\n", b"*2\r\n$6\r\nDELJOB\r\n$40\r\n",
            b"\x00" * 16, b"*1\r\n$4\r\nPING\r\n"]))
def test_inserted_garbage_is_refused_or_a_cut_off_tail(tmp_path_factory, file, at: int,
                                                       garbage: bytes) -> None:
    data, records = file
    at %= len(data) + 1
    damaged = (at, at + len(garbage))
    # the records after the insertion moved: they may only load as they were written
    check(tmp_path_factory.mktemp("aof"), data[:at] + garbage + data[at:], records, damaged)


def test_check_aof_refuses_a_record_state_the_loader_refuses(tmp_path: Path) -> None:
    """Found by the property: disq-check-aof called a file with an ACKED LOADJOB valid,
    while the node refused to start on it."""
    good = Job(b"D-aaaaaaaa-" + b"0" * 24 + b"-05a1", b"q", b"b", QUEUED, 1, ETIME, 0, 60, 1)
    acked = Job(b"D-aaaaaaaa-" + b"1" * 24 + b"-05a1", b"q", b"b", ACKED, 1, ETIME, 0, 60, 1)
    first = loadjob_record(JobEncoder(ME).serialize(good))
    data = first + loadjob_record(JobEncoder(ME).serialize(acked))
    (tmp_path / "disque.aof").write_bytes(data)
    _, ok_up_to, problem, _ = analyze(str(tmp_path / "disque.aof"))
    assert ok_up_to == len(first) and problem is not None and "state" in problem
    _, _, error = load(tmp_path / "disque.aof")
    assert error is not None and f"offset {len(first)}" in error
