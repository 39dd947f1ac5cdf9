"""Big jobs: a body over job-max-body (100 MB, what the bus carries) is refused at
ADDJOB (ADDJOBS, CRON ADD, HTTP alike) before the job exists."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from support import DisqProcess, call, free_port

MB = 1024 * 1024


def test_a_body_over_job_max_body_is_refused_before_the_job_exists(
        start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--job-max-body", "1mb", "--http-port", str(port))
    over, fits = b"x" * (MB + 1), b"x" * MB
    client = node.client(protocol=2)
    try:
        for command in (("ADDJOB", "q", over, 0), ("CRON", "ADD", "c", "q", "* * * * * *", over)):
            with pytest.raises(Exception, match="job-max-body") as refused:
                client.execute_command(*command)
            assert f"{MB + 1} bytes" in str(refused.value)
        replies = client.execute_command("ADDJOBS", "q", 0, "JOBS", fits, over)
        assert replies[0].startswith(b"D-")
        assert "job-max-body" in str(replies[1])
        assert client.execute_command("QLEN", "q") == 1
        assert client.execute_command("CRON", "LIST") == []
        with pytest.raises(Exception, match="Invalid argument"):  # over what the bus carries
            client.execute_command("CONFIG", "SET", "job-max-body", "200mb")
        assert client.execute_command("CONFIG", "SET", "job-max-body", "2mb") == b"OK"
        assert client.execute_command("ADDJOB", "q", over, 0).startswith(b"D-")
    finally:
        client.close()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/queues/q/jobs",
        data=json.dumps({"body": "y" * (2 * MB + 1)}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as http_refused:
        urllib.request.urlopen(request, timeout=30)
    assert http_refused.value.code == 400
    assert "job-max-body" in http_refused.value.read().decode()
    assert call(node, "QLEN", "q") == 2
