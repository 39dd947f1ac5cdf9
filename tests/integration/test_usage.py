"""Usage per ACL user across the cluster (the SQS-style design's usage data): each node
counts its users' commands, jobs added, consumed and acked, and the bytes their
connections read and wrote; GET /api/v1/usage on any node sums every node's."""

from __future__ import annotations

from collections.abc import Callable

from support import DisqProcess, form_cluster, free_port, wait_for
from test_acl import client_as
from test_http import Http


def test_usage_is_summed_over_every_node(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    nodes = form_cluster([start_node("--cluster-node-timeout", "2000", "--http-port",
                                     str(port)), start_node("--cluster-node-timeout", "2000")])
    admin = client_as(nodes[0])
    admin.execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~a:*", "+@all")
    wait_for(lambda: b"alice" in client_as(nodes[1]).execute_command("ACL", "USERS"), 10)
    clients = [client_as(n, "alice", "pw") for n in nodes]
    body = "x" * 1000
    for i, client in enumerate(clients):
        for _ in range(2 + i):  # 2 jobs on node 0, 3 on node 1
            client.execute_command("ADDJOB", "a:q", body, 0, "REPLICATE", 1)
    for client in clients:
        for _queue, job_id, _body in client.execute_command("GETJOB", "NOHANG", "COUNT", 10,
                                                            "FROM", "a:q") or []:
            client.execute_command("ACKJOB", job_id)
    http = Http(port)
    status, answer = http.get("/api/v1/usage")
    assert status == 200, answer
    assert len(answer["reporting"]) == 2
    alice = answer["users"]["alice"]
    assert (alice["jobs_added"], alice["jobs_consumed"], alice["jobs_acked"]) == (5, 5, 5)
    assert alice["bytes_in"] > 5 * len(body) and alice["bytes_out"] > 5 * len(body)
    per_node = [int(client_as(n).execute_command("INFO", "users").decode()
                    .split("user_alice:")[1].split("jobs_added=")[1].split(",")[0])
                for n in nodes]
    assert per_node == [2, 3]  # INFO users: one node's own
    status, text = http.get("/metrics")
    assert status == 200 and b'disq_user_bytes_in_total{user="alice"}' in text
    for client in (*clients, admin):
        client.close()
