"""The queue, cron and user routes of the HTTP API for a user restricted to some
queues: each route is refused (403 NOPERM) where the RESP command would be, for
the queue its URL names and the ones its body names (a policy's dead-letter queue),
and lists only what the user may see, as QSCAN and CRON LIST do."""

from __future__ import annotations

import base64
from collections.abc import Callable

from support import DisqProcess, free_port
from test_acl import NOPERM_KEY, client_as, info
from test_http import Http, resp


def test_a_restricted_user_reaches_only_its_queues(
        start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    admin = client_as(node)
    admin.execute_command("ACL", "SETUSER", "carl", "on", ">carl-pw", "~c:*", "+@all")
    token = base64.b64encode(b"carl:carl-pw").decode()
    carl = Http(port, auth=f"Basic {token}")
    for queue in ("c:q", "other"):
        resp(node, "ADDJOB", queue, "job", 0)
    resp(node, "CRON", "ADD", "mine", "c:q", "0 2 * * *", "r")
    resp(node, "CRON", "ADD", "theirs", "other", "0 2 * * *", "r")
    denied = int(info(admin)["acl_access_denied_key"])

    status, problem = carl.request("PUT", "/api/v1/queues/c:q",
                                   {"policy": {"deadletter": "other"}})
    assert (status, problem["code"], problem["detail"]) == (403, "NOPERM", NOPERM_KEY)
    assert resp(node, "QPOLICY", "c:q", "GET") is None  # nothing changed
    status, queue = carl.request("PUT", "/api/v1/queues/c:q",
                                 {"policy": {"deadletter": "c:dead"}})
    assert status == 200 and queue["policy"]["deadletter"] == "c:dead", queue
    for method, path, body in (("PUT", "/api/v1/queues/other", {"pause": "all"}),
                               ("GET", "/api/v1/queues/other/peek", None),
                               ("POST", "/api/v1/queues/other/requeue-dead", {})):
        status, problem = carl.request(method, path, body)
        assert (status, problem["code"]) == (403, "NOPERM"), (method, path, problem)
    assert resp(node, "PAUSE", "other", "state") == b"none"
    # a queue it may not see reads as missing, as its QSTAT is refused
    assert carl.get("/api/v1/queues/other")[0] == 404
    assert int(info(admin)["acl_access_denied_key"]) == denied + 1 + 3 + 3
    status, listed = carl.get("/api/v1/queues")
    assert status == 200 and [q["name"] for q in listed["queues"]] == ["c:q"]
    status, cron = carl.get("/api/v1/cron")
    assert status == 200 and [s["name"] for s in cron["schedules"]] == ["mine"]
    admin.close()
