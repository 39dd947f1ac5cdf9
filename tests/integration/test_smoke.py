"""The five-line session from README.md, against a real node."""

from __future__ import annotations


def test_addjob_getjob_ackjob(r):
    job_id = r.execute_command("ADDJOB", "myqueue", "hello", 0).decode()
    assert len(job_id) == 40 and job_id.startswith("D-")
    got = r.execute_command("GETJOB", "FROM", "myqueue")
    assert got == [[b"myqueue", job_id.encode(), b"hello"]]
    assert r.execute_command("ACKJOB", job_id) == 1
    assert r.execute_command("SHOW", job_id) is None
    assert r.execute_command("QLEN", "myqueue") == 0
