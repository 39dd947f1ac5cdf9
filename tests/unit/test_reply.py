"""GETJOB WITHCOUNTERS's entry of a job (server/reply.py), built with joins and a
constant for the usual counters: the same RESP as formatting every field, whatever
the counters and extended fields."""

from __future__ import annotations

import hiredis
import pytest

from disq.job import ACTIVE, Job, JobExt
from disq.server import reply

JOB_ID = b"D-a6abfdb1-MSPrSMV7TybjzS/lG8Y2VaHH-05a1"


@pytest.mark.parametrize(("nacks", "deliveries"), [(0, 0), (1, 0), (0, 3), (12, 1025)])
@pytest.mark.parametrize("ext", [None, JobExt(7, b"g", 1_700_000_000_000)])
def test_an_entry_with_counters_is_each_field_formatted(nacks: int, deliveries: int,
                                                        ext: JobExt | None) -> None:
    job = Job(JOB_ID, b"queue", b"b" * 300, ACTIVE, 1, 2, 0, 300, 2)
    job.nacks, job.deliveries, job.ext = nacks, deliveries, ext
    expected = (b"*%d\r\n$5\r\nqueue\r\n$40\r\n%s\r\n$300\r\n%s\r\n$5\r\nnacks\r\n:%d\r\n"
                b"$21\r\nadditional-deliveries\r\n:%d\r\n" % (
                    7 if ext is None else 15, JOB_ID, b"b" * 300, nacks, deliveries))
    if ext is not None:  # (and its attributes: none)
        expected += b"$8\r\npriority\r\n:7\r\n$5\r\ngroup\r\n$1\r\ng\r\n$6\r\ndue-ms\r\n" \
            b":1700000000000\r\n$5\r\nattrs\r\n*0\r\n"
    entry = reply.job_entry_with_counters(job)
    assert entry == expected
    parsed = hiredis.Reader()
    parsed.feed(entry)
    assert parsed.gets()[3:7] == [b"nacks", nacks, b"additional-deliveries", deliveries]
