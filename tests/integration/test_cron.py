"""CRON ADD / DEL / LIST (a disq extension): recurring jobs, one job per tick in the
whole cluster, schedules on every node and across restarts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from support import DisqProcess, running_cluster, wait_for

EVERY_SECOND = "* * * * * *"  # six fields: the first is seconds


def entries(c: redis.Redis) -> dict[bytes, dict[bytes, object]]:
    out = {}
    for item in c.execute_command("CRON", "LIST"):
        fields = dict(zip(item[::2], item[1::2], strict=True))
        out[fields[b"name"]] = fields
    return out


def job_seconds(nodes: list[DisqProcess], queue: str) -> list[int]:
    """The creation second of every job queued in `queue` on any node (ctime: ms *
    1e6 + a counter): a tick's job is created within its second."""
    seconds = []
    for node in nodes:
        c = node.client()
        for _, job_id, _ in c.execute_command("QPEEK", queue, 100_000):
            show = c.execute_command("SHOW", job_id)
            ctime = dict(zip(show[::2], show[1::2], strict=True))[b"ctime"]
            seconds.append(ctime // 1_000_000_000)
    return sorted(seconds)


def cron_records(tmp_path: Path) -> list[str]:
    (conf,) = tmp_path.rglob("nodes.conf")
    return [line for line in conf.read_text().splitlines() if line.startswith("cron ")]


def strip_cron_records(tmp_path: Path) -> None:
    (conf,) = tmp_path.rglob("nodes.conf")
    lines = conf.read_text().splitlines(keepends=True)
    conf.write_text("".join(line for line in lines if not line.startswith("cron ")))


def test_a_schedule_adds_one_job_per_tick_and_stops_when_deleted(tmp_path: Path) -> None:
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        assert c.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND,
                                 "hello", "TTL", "600") == b"OK"
        listed = entries(c)[b"beat"]
        assert listed[b"queue"] == b"ticks" and listed[b"spec"] == EVERY_SECOND.encode()
        assert listed[b"tz"] == b"UTC" and listed[b"last-fire"] is None
        assert 0 <= listed[b"next-fire-in"] <= 1000
        wait_for(lambda: c.execute_command("QLEN", "ticks") >= 3, 6, message="3 ticks")
        seconds = job_seconds([node], "ticks")
        assert len(seconds) == len(set(seconds)), seconds  # one job per tick
        last = entries(c)[b"beat"]
        assert last[b"last-fire"] % 1000 == 0 and last[b"last-job"]
        job = c.execute_command("SHOW", last[b"last-job"])
        assert job[job.index(b"body") + 1] == b"hello"
        assert c.execute_command("CRON", "DEL", "beat") == 1
        assert c.execute_command("CRON", "DEL", "beat") == 0
        assert entries(c) == {}
        count = c.execute_command("QLEN", "ticks")
        time.sleep(1.5)  # a negative check: two ticks' time, nothing more may come
        assert c.execute_command("QLEN", "ticks") == count
    finally:
        node.stop()


def test_a_ticks_job_has_the_schedules_priority_and_group(tmp_path: Path) -> None:
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        c.execute_command("CRON", "ADD", "urgent", "work", EVERY_SECOND, "x",
                          "PRIORITY", "3", "GROUP", "tenant-7", "TTL", "60")
        wait_for(lambda: entries(c)[b"urgent"][b"last-job"], 3, message="a tick")
        show = c.execute_command("SHOW", entries(c)[b"urgent"][b"last-job"])
        fields = dict(zip(show[::2], show[1::2], strict=True))
        assert (fields[b"priority"], fields[b"group"]) == (3, b"tenant-7")
        assert 59 <= fields[b"ttl"] <= 60
    finally:
        node.stop()


@pytest.mark.parametrize(("args", "message"), [
    (["ADD", "x", "q", "* * *", "b"], "invalid cron spec"),
    (["ADD", "x", "q", "61 * * * *", "b"], "invalid cron spec"),
    (["ADD", "x", "q", "* * * * *", "b", "TZ", "Mars/Olympus"], "unknown time zone"),
    (["ADD", "x", "q", "* * * * *", "b", "PRIORITY", "256"], "PRIORITY must be"),
    (["ADD", "x", "q", "* * * * *", "b", "GROUP", "g" * 257], "GROUP must be"),
    (["ADD", "x", "q", "* * * * *", "b", "RETRY", "0"], "REPLICATE to 1"),
    (["ADD", "x", "q", "* * * * *", "b", "BOGUS"], "syntax error"),
    (["ADD", "x", "q", "* * * * *"], "wrong number of arguments"),
    (["DEL"], "wrong number of arguments"),
    (["NOPE"], "unknown CRON subcommand"),
])
def test_bad_cron_commands_get_clear_errors(tmp_path: Path, args: list[str],
                                            message: str) -> None:
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        with pytest.raises(redis.ResponseError, match=message):
            c.execute_command("CRON", *args)
        assert entries(c) == {} and c.ping()
    finally:
        node.stop()


def test_schedules_survive_a_restart_and_a_missed_tick_fires_once(tmp_path: Path) -> None:
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        c.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x")
        c.execute_command("CRON", "ADD", "gone", "other", EVERY_SECOND, "x")
        c.execute_command("CRON", "DEL", "gone")
        wait_for(lambda: entries(c)[b"beat"][b"last-fire"], 3, message="a first tick")
        node.stop()  # graceful: the file is saved
        time.sleep(3)  # three ticks pass while no node runs
        node.start()
        c = node.client()
        assert set(entries(c)) == {b"beat"}
        before = entries(c)[b"beat"][b"last-fire"]
        assert isinstance(before, int)
        wait_for(lambda: entries(c)[b"beat"][b"last-fire"] > before, 3, message="a tick")
        caught_up = entries(c)[b"beat"][b"last-fire"]
        jobs = [j for j in job_seconds([node], "ticks") if j > before // 1000]
        # the missed ticks fire once (the newest), then one per second: no burst of three
        assert len(jobs) <= 2 + (int(time.time()) - min(jobs)), jobs
        # and the ticks go on (the timer is armed for the loaded schedules)
        wait_for(lambda: entries(c)[b"beat"][b"last-fire"] >= caught_up + 2000, 4,
                 message="the ticks after the catch-up")
    finally:
        node.stop()


def test_schedules_are_kept_in_nodes_conf_across_a_kill(tmp_path: Path) -> None:
    """Without the AOF the schedules are records of the cluster config file, written
    within a second of a change: a node killed (no shutdown) restarts with them, and
    with its identity (the node lines are untouched)."""
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        my_id = c.execute_command("CLUSTER", "MYID")
        c.execute_command("CRON", "ADD", "nightly", "reports", "0 2 * * *", "r",
                          "TZ", "Europe/Paris", "PRIORITY", "7")
        c.execute_command("CRON", "ADD", "gone", "q", "0 3 * * *", "x")
        c.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x")
        wait_for(lambda: len(cron_records(tmp_path)) == 3, 5, message="saved")
        c.execute_command("CRON", "DEL", "gone")  # a tombstone: gone after the kill too
        wait_for(lambda: b"gone" not in entries(c), 5, message="deleted")
        wait_for(lambda: _deleted_saved(tmp_path), 5, message="the deletion saved")
        node.kill()
        node.start()
        c = node.client()
        assert c.execute_command("CLUSTER", "MYID") == my_id
        listed = entries(c)
        assert set(listed) == {b"nightly", b"beat"}
        assert (listed[b"nightly"][b"tz"], listed[b"nightly"][b"spec"]) == (
            b"Europe/Paris", b"0 2 * * *")
        restarted = int(time.time() * 1000)
        wait_for(lambda: (entries(c)[b"beat"][b"last-fire"] or 0) >= restarted + 2000, 6,
                 message="the ticks go on after the restart")
    finally:
        node.stop()


def _deleted_saved(tmp_path: Path) -> bool:
    """Whether nodes.conf's record of `gone` is its tombstone (msgpack: deleted True)."""
    import base64

    import msgpack
    for line in cron_records(tmp_path):
        item = msgpack.unpackb(base64.b64decode(line.split()[1]))
        if item[0] == b"gone":
            return bool(item[12])
    return False


def test_one_job_per_tick_in_a_cluster(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as nodes:
        a, b, c = (n.client() for n in nodes)
        a.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x",
                          "REPLICATE", "2")
        for other in (b, c):  # every node holds the schedule
            wait_for(lambda o=other: b"beat" in entries(o), 5, message="the schedule")
        wait_for(lambda: sum(n.client().execute_command("QLEN", "ticks")
                             for n in nodes) >= 4, 10, message="4 ticks")
        seconds = job_seconds(nodes, "ticks")
        assert len(seconds) == len(set(seconds)), seconds  # one job per tick
        assert seconds[-1] - seconds[0] + 1 - len(seconds) <= 1, seconds  # no gaps
        fired = {n.client().execute_command("CRON", "LIST")[0][11] for n in nodes}
        assert len(fired) <= 2  # every node heard of the newest tick (give or take one)
        b.execute_command("CRON", "DEL", "beat")
        for other in (a, c):
            wait_for(lambda o=other: entries(o) == {}, 5, message="deleted everywhere")


def test_the_next_node_fires_when_the_firer_dies(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as nodes:
        a = nodes[0].client()
        a.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x",
                          "REPLICATE", "1")
        wait_for(lambda: sum(n.client().execute_command("QLEN", "ticks")
                             for n in nodes) >= 2, 10, message="2 ticks")
        firer = max(nodes, key=lambda n: n.client().execute_command("QLEN", "ticks"))
        firer.kill()
        rest = [n for n in nodes if n is not firer]
        start = sum(n.client().execute_command("QLEN", "ticks") for n in rest)
        wait_for(lambda: sum(n.client().execute_command("QLEN", "ticks")
                             for n in rest) >= start + 3, 20, message="ticks go on")
        seconds = job_seconds(rest, "ticks")
        assert len(seconds) == len(set(seconds)), seconds


def test_the_python_client_defines_lists_and_deletes_schedules(tmp_path: Path) -> None:
    from disq_client import AsyncClient, Client

    node = DisqProcess(tmp_path).start()
    try:
        with Client(f"127.0.0.1:{node.port}") as client:
            assert client.cron_add("report", "reports", "0 9 * * 1-5", b"go",
                                   ttl_ms=3_600_000, tz="Europe/Paris") == "OK"
            (entry,) = client.cron_list()
            assert (entry.name, entry.queue, entry.spec, entry.tz) == (
                "report", "reports", "0 9 * * 1-5", "Europe/Paris")
            assert entry.last_fire is None and entry.next_fire_in > 0
            assert (entry.replicate, entry.tick_replicate) == (None, 1)

        async def remove() -> int:
            async with AsyncClient(f"127.0.0.1:{node.port}") as aclient:
                assert len(await aclient.cron_list()) == 1
                return await aclient.cron_del("report")

        assert asyncio.run(remove()) == 1
    finally:
        node.stop()


def test_schedules_are_kept_in_the_aof(tmp_path: Path) -> None:
    """With the AOF on, a schedule is logged there (CRONSET records, kept by a
    rewrite): the node restarts with it even without its records in nodes.conf."""
    node = DisqProcess(tmp_path, "--appendonly", "yes").start()
    try:
        c = node.client()
        c.execute_command("CRON", "ADD", "nightly", "reports", "0 2 * * *", "r", "TZ",
                          "Europe/Paris")
        c.execute_command("CRON", "ADD", "gone", "q", "0 3 * * *", "x")
        c.execute_command("CRON", "DEL", "gone")
        c.execute_command("BGREWRITEAOF")
        wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, 10,
                 message="the rewrite")
        c.execute_command("CRON", "ADD", "later", "q", "*/5 * * * *", "y")  # after it
        c.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x")
        node.kill()  # no shutdown: nothing saved on the way out
        strip_cron_records(tmp_path)
        node.start()
        c = node.client()
        listed = entries(c)
        assert set(listed) == {b"nightly", b"later", b"beat"}
        assert listed[b"nightly"][b"tz"] == b"Europe/Paris"
        restarted = int(time.time() * 1000)
        wait_for(lambda: (entries(c)[b"beat"][b"last-fire"] or 0) >= restarted + 2000, 6,
                 message="the ticks go on after the restart")
        (aof,) = tmp_path.rglob("*.aof")
        check = subprocess.run([sys.executable, "-m", "disq.aof.check", str(aof)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        node.stop()


def total_jobs(nodes: list[DisqProcess], queue: str) -> int:
    return sum(n.client().execute_command("QLEN", queue) for n in nodes)


def test_ticks_go_on_while_a_majority_is_up(tmp_path: Path) -> None:
    """Without REPLICATE a tick's job gets the default (3 copies of 3 nodes): with the
    firer killed, the two left fire on, their jobs replicated as two nodes can, and
    CRON LIST says how many copies a tick now gets."""
    with running_cluster(tmp_path, 3) as nodes:
        a = nodes[0].client()
        assert a.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x") == b"OK"
        wait_for(lambda: total_jobs(nodes, "ticks") >= 2, 10, message="2 ticks")
        assert entries(a)[b"beat"][b"replicate"] is None  # none given: the default
        assert entries(a)[b"beat"][b"tick-replicate"] == 3
        firer = max(nodes, key=lambda n: n.client().execute_command("QLEN", "ticks"))
        firer.kill()
        rest = [n for n in nodes if n is not firer]
        start = total_jobs(rest, "ticks")
        wait_for(lambda: total_jobs(rest, "ticks") >= start + 4, 20, message="ticks go on")
        for node in rest:
            wait_for(lambda n=node: entries(n.client())[b"beat"][b"tick-replicate"] == 2,
                     5, message="two copies a tick, as two nodes can hold")


def test_a_tick_that_keeps_failing_is_logged_now_and_then(tmp_path: Path) -> None:
    """A tick whose ADDJOB fails (its queue paused) is tried again at every cron run:
    its log line comes once, then a count of the repeats now and then, not 10 a second."""
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        c.execute_command("PAUSE", "ticks", "in")
        c.execute_command("CRON", "ADD", "beat", "ticks", EVERY_SECOND, "x")
        wait_for(lambda: "was not added" in node.log(), 5, message="the failure logged")
        time.sleep(2.5)  # a negative check: 25 cron runs, each one trying the tick again
        lines = [line for line in node.log().splitlines() if "was not added" in line]
        assert len(lines) <= 2, lines
        c.execute_command("PAUSE", "ticks", "none")
        wait_for(lambda: c.execute_command("QLEN", "ticks") >= 1, 5, message="the tick")
    finally:
        node.stop()


def test_six_fields_put_seconds_first(tmp_path: Path) -> None:
    """`*/2 * * * * *` is every 2 s (seconds first, as Quartz or BullMQ), not every
    second of every other minute."""
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        c.execute_command("CRON", "ADD", "two", "ticks", "*/2 * * * * *", "x")
        wait_for(lambda: c.execute_command("QLEN", "ticks") >= 3, 10, message="3 ticks")
        seconds = job_seconds([node], "ticks")
        assert all(s % 2 == 0 for s in seconds), seconds
        assert all(b - a >= 2 for a, b in zip(seconds, seconds[1:], strict=False)), seconds
    finally:
        node.stop()


def test_a_schedule_saved_with_seconds_last_keeps_its_meaning(tmp_path: Path) -> None:
    """A `cron` line of nodes.conf written before seconds came first (its wire form has
    no format field) is read with its seconds last, converted, and logged once."""
    import base64

    import msgpack
    node = DisqProcess(tmp_path).start()
    try:
        c = node.client()
        c.execute_command("CRON", "ADD", "old", "ticks", "0 3 * * *", "x")
        wait_for(lambda: len(cron_records(tmp_path)) == 1, 5, message="saved")
        node.stop()
        (conf,) = tmp_path.rglob("nodes.conf")
        lines = []
        for line in conf.read_text().splitlines(keepends=True):
            if line.startswith("cron "):
                item = msgpack.unpackb(base64.b64decode(line.split()[1]))[:15]
                item[2] = "* * * * * */2"  # seconds last: every 2 s
                line = "cron " + base64.b64encode(msgpack.packb(item)).decode() + "\n"
            lines.append(line)
        conf.write_text("".join(lines))
        node.start()
        c = node.client()
        assert entries(c)[b"old"][b"spec"] == b"*/2 * * * * *"
        assert node.log().count("seconds last") == 1
    finally:
        node.stop()
