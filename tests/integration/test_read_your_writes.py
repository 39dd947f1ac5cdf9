"""Tables every node holds (CRON schedules, QPOLICY policies, ACL users): a change is
answered once every reachable node holds it, so the next command on any node sees it;
a reachable node that does not confirm in time makes the change answer -NOREPL
(made here, and spread to it later by the periodic sync)."""

from __future__ import annotations

import signal
from pathlib import Path

import redis
from support import DisqProcess, running_cluster, wait_for

ROUNDS = 20  # an answer that raced its bus messages lost this often enough to be seen


def has_schedule(node: DisqProcess, name: str) -> bool:
    return any(item[1] == name.encode()
               for item in node.client().execute_command("CRON", "LIST"))


def has_policy(node: DisqProcess, queue: str) -> bool:
    return node.client().execute_command("QPOLICY", queue, "GET") is not None


def can_auth(node: DisqProcess, name: str) -> bool:
    return node.client().execute_command("ACL", "GETUSER", name) is not None


def test_a_change_is_seen_on_every_node_once_answered(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as nodes:
        first, others = nodes[0].client(), nodes[1:]
        for i in range(ROUNDS):
            assert first.execute_command("CRON", "ADD", f"s{i}", "q", "0 3 * * *",
                                         "x") == b"OK"
            assert first.execute_command("QPOLICY", f"q{i}", "SET",
                                         "MAXDELIVERIES", 3) == b"OK"
            assert first.execute_command("ACL", "SETUSER", f"u{i}", "on", ">pw",
                                         "+@all", "~*") == b"OK"
            for node in others:
                assert has_schedule(node, f"s{i}"), (i, node.port)
                assert has_policy(node, f"q{i}"), (i, node.port)
                assert can_auth(node, f"u{i}"), (i, node.port)
        for i in range(ROUNDS):
            assert first.execute_command("CRON", "DEL", f"s{i}") == 1
            assert first.execute_command("QPOLICY", f"q{i}", "DEL") == 1
            assert first.execute_command("ACL", "DELUSER", f"u{i}") == 1
            for node in others:
                assert not has_schedule(node, f"s{i}"), (i, node.port)
                assert not has_policy(node, f"q{i}"), (i, node.port)
                assert not can_auth(node, f"u{i}"), (i, node.port)


def test_a_change_a_reachable_node_does_not_confirm_is_an_error(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as nodes:
        first, stopped = nodes[0].client(), nodes[2]
        stopped.proc.send_signal(signal.SIGSTOP)  # reachable until flagged: no answer
        try:
            pipe = first.pipeline(transaction=False)  # at once, before C is flagged
            pipe.execute_command("CRON", "ADD", "s", "q", "0 3 * * *", "x")
            pipe.execute_command("QPOLICY", "q", "SET", "MAXDELIVERIES", 3)
            pipe.execute_command("ACL", "SETUSER", "u", "on", ">pw", "+@all", "~*")
            for outcome in pipe.execute(raise_on_error=False):
                assert isinstance(outcome, redis.ResponseError), outcome
                assert str(outcome).startswith("NOREPL") and "did not confirm" in str(
                    outcome), outcome
        finally:
            stopped.proc.send_signal(signal.SIGCONT)
        # made where it was asked, and on every node in the end
        for node in nodes:
            wait_for(lambda n=node: has_schedule(n, "s") and has_policy(n, "q")
                     and can_auth(n, "u"), 20, message="the changes everywhere")
