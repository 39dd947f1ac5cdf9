"""A node's /metrics is what Prometheus expects: `promtool check metrics` finds nothing
to say where promtool is installed (Debian's prometheus package), and elsewhere the
client library's parser reads every family, counters named `_total`. With queues,
results, batches and users in it, so that every family has samples."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families
from support import DisqProcess, call, free_port
from test_http import Http


def test_the_metrics_are_clean(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    call(node, "ADDJOB", "lint-q", "x", 0)
    job = call(node, "ADDJOB", "lint-done", "y", 0)
    time.sleep(0.02)  # its delivery lag: a measurable figure (whole ms)
    call(node, "GETJOB", "FROM", "lint-done")
    call(node, "ACKJOB", job, "RESULT", "42")
    call(node, "BATCH", "NEW", "lint-batch")
    time.sleep(0.05)  # the oldest job's age: a positive figure (a negative check below)
    status, text = Http(port).get("/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    for name in ("disq_queue_oldest_job_age_seconds", "disq_results_kept", "disq_batches",
                 "disq_addjob_duration_seconds",
                 "disq_user_bytes_in", "disq_jobs_added"):
        assert name in families, sorted(families)
    ages = {s.labels["queue"]: s.value for s in families[
        "disq_queue_oldest_job_age_seconds"].samples}
    assert ages["lint-q"] > 0 and "lint-done" not in ages  # (emptied: no age)
    assert families["disq_results_kept"].samples[0].value == 1
    assert {s.labels["phase"]: s.value for s in families["disq_batches"].samples}["open"] == 1
    # ADDJOB and GETJOB timed until answered, the first delivery's lag after due
    for name, count in (("disq_addjob_duration_seconds", 2), ("disq_getjob_duration_seconds", 1),
                        ("disq_job_delivery_lag_seconds", 1)):
        samples = {s.name: s.value for s in families[name].samples
                   if s.labels.get("le") in (None, "+Inf")}
        assert samples[name + "_count"] == count, (name, samples)
        assert samples[name + "_sum"] > 0, (name, samples)
    for family in families.values():
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), (
                family.name)
    promtool = shutil.which("promtool")
    if promtool is not None:
        done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                              timeout=60)
        assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
            done.stdout.decode() + done.stderr.decode())
