"""Users and permissions on real nodes: ACL SETUSER / AUTH, queue patterns
in every command that names a queue or a job, over RESP and HTTP; the bad-input
cases; the aclfile; users replicated across a cluster."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from support import DisqProcess, free_port, raw_command, wait_for
from test_directives import error_of as error
from test_http import Http

from disq.server.commands import load_commands

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NOPERM_KEY = "No permissions to access a key"
# A deleted user's client, closed: redis-py reconnects and its AUTHs fail (WRONGPASS, a
# ConnectionError), or, after its 10 retries, are refused as its address is paused.
GONE = (redis.ConnectionError, redis.ResponseError)


def client_as(node: DisqProcess, user: str | None = None, password: str | None = None
              ) -> redis.Redis:
    """A raw RESP2 client (replies as they come), authenticated as `user`."""
    creds = {"username": user, "password": password} if user is not None else {}
    client = node.client(protocol=2, **creds)
    client.response_callbacks.clear()
    return client


def info(client: redis.Redis, section: str | None = None) -> dict[str, str]:
    text = client.execute_command("INFO", *([section] if section else [])).decode()
    return dict(line.split(":", 1) for line in text.split("\r\n")
                if line and not line.startswith("#"))


@pytest.fixture
def two_teams(start_node: Callable[..., DisqProcess]) -> Iterator[tuple[DisqProcess, Any]]:
    """A node with users alice (queues a:*) and bob (queues b:*), both producers and
    consumers; the default user is the admin."""
    node = start_node()
    admin = client_as(node)
    for name, pattern in (("alice", "a:*"), ("bob", "b:*")):
        assert admin.execute_command(
            "ACL", "SETUSER", name, "on", f">{name}-pw", f"~{pattern}", "+@produce",
            "+@consume", "+@read", "+deljob", "+pause", "+qpolicy") == b"OK"
    alice = client_as(node, "alice", "alice-pw")
    bob = client_as(node, "bob", "bob-pw")
    yield node, (admin, alice, bob)
    for client in (admin, alice, bob):
        client.close()


def test_disjoint_queue_patterns_over_resp(two_teams: tuple[DisqProcess, Any]) -> None:
    node, (admin, alice, bob) = two_teams
    job = alice.execute_command("ADDJOB", "a:orders", "secret", 0)
    other = alice.execute_command("ADDJOB", "a:orders", "second", 0)
    mine = bob.execute_command("ADDJOB", "b:mail", "bob's", 0)
    assert job.startswith(b"D-") and mine.startswith(b"D-")
    # bob can neither add to, see, take, ack nor delete alice's jobs or queues
    for args in (("ADDJOB", "a:orders", "x", 0), ("GETJOB", "NOHANG", "FROM", "a:orders"),
                 ("GETJOB", "NOHANG", "FROM", "b:mail", "a:orders"), ("SHOW", job),
                 ("ACKJOB", job), ("FASTACK", mine, job), ("NACK", job), ("ENQUEUE", job),
                 ("DEQUEUE", job), ("DELJOB", job), ("WORKING", job), ("QLEN", "a:orders"),
                 ("QPEEK", "a:orders", 5), ("QSTAT", "a:orders"), ("GLOBALQLEN", "a:orders"),
                 ("PAUSE", "a:orders", "all"), ("QPOLICY", "a:orders", "GET"),
                 ("JOBSET", job, "PRIORITY", 1),
                 ("QPOLICY", "b:mail", "SET", "DEADLETTER", "a:dead"),
                 ("CRON", "ADD", "c1", "a:orders", "* * * * *", "x"),
                 ("DEADLETTER", "REQUEUE-JOB", mine, job)):
        assert error(bob, *args) == NOPERM_KEY, args
    # the whole multi-ID command was refused: bob's own job is still there
    assert bob.execute_command("QLEN", "b:mail") == 1
    # listings only show what the user may see
    _, jobs = bob.execute_command("JSCAN", 0, "COUNT", 1000, "BUSYLOOP")
    assert jobs == [mine]
    _, queues = bob.execute_command("QSCAN", 0, "COUNT", 1000, "BUSYLOOP")
    assert queues == [b"b:mail"]
    _, jobs = bob.execute_command("JSCAN", 0, "BUSYLOOP", "QUEUE", "a:orders")
    assert jobs == []
    # an ID this node does not know is left out for a restricted user (no cluster-wide ack)
    unknown = job[:-4] + (b"0000" if not job.endswith(b"0000") else b"1111")
    assert bob.execute_command("ACKJOB", unknown) == 0
    assert admin.execute_command("SHOW", unknown) is None
    # commands outside the user's categories: Redis's NOPERM text
    assert error(bob, "CONFIG", "GET", "port") == (
        "User bob has no permissions to run the 'config' command")
    assert error(bob, "DEBUG", "FLUSHALL").startswith("User bob has no permissions")
    # nothing of alice's changed; alice does all of it on her own queue
    assert admin.execute_command("QLEN", "a:orders") == 2
    taken = alice.execute_command("GETJOB", "NOHANG", "COUNT", 2, "FROM", "a:orders")
    assert {entry[1] for entry in taken} == {job, other}
    assert alice.execute_command("ACKJOB", job) == 1
    assert alice.execute_command("FASTACK", other) == 1
    stats = info(admin)
    assert int(stats["acl_access_denied_key"]) >= 20
    assert int(stats["acl_access_denied_cmd"]) == 2  # (redis-py's CLIENT SETINFO: allowed)
    users = info(admin, "users")
    # 5 commands and redis-py's CLIENT SETINFO x2 on connecting (its AUTH: the default's)
    alice_usage = dict(item.split("=") for item in users["user_alice"].split(","))
    assert {k: v for k, v in alice_usage.items() if not k.startswith("bytes")} == {
        "commands": "7", "jobs_added": "2", "jobs_consumed": "2", "jobs_acked": "2"}
    assert int(alice_usage["bytes_in"]) > 0 and int(alice_usage["bytes_out"]) > 0
    assert users["user_bob"].startswith("commands=") and "jobs_added=1," in users["user_bob"]


def test_a_blocked_getjob_counts_for_its_user(two_teams: tuple[DisqProcess, Any]) -> None:
    node, (admin, alice, _) = two_teams
    waiting = client_as(node, "alice", "alice-pw")
    with node.connect() as sock:
        assert raw_command(sock, b"AUTH alice alice-pw\r\n") == b"+OK\r\n"
        sock.sendall(b"GETJOB TIMEOUT 10000 FROM a:q\r\n")
        wait_for(lambda: int(info(admin, "clients")["blocked_clients"]) == 1)
        alice.execute_command("ADDJOB", "a:q", "x", 0)
        assert raw_command(sock, b"").startswith(b"*1\r\n*3\r\n")
    waiting.close()
    assert "jobs_consumed=1," in info(admin, "users")["user_alice"]


def test_auth_paths_and_bad_input(two_teams: tuple[DisqProcess, Any]) -> None:
    node, (admin, alice, bob) = two_teams
    assert alice.execute_command("ACL", "WHOAMI") == b"alice"
    assert admin.execute_command("ACL", "WHOAMI") == b"default"
    assert b"produce" in alice.execute_command("ACL", "CAT")  # allowed to every user
    with node.connect() as sock:
        # the default user has no password: the one-argument AUTH is Disque's
        assert raw_command(sock, b"AUTH x\r\n") == (
            b"-ERR Client sent AUTH, but no password is set\r\n")
        for line in (b"AUTH alice wrong\r\n", b"AUTH nobody x\r\n", b"AUTH alice\r\n"):
            reply = raw_command(sock, line)
            assert reply in (b"-" + WRONGPASS.encode() + b"\r\n",
                             b"-ERR Client sent AUTH, but no password is set\r\n"), line
        assert raw_command(sock, b"AUTH a b c\r\n") == b"-ERR syntax error\r\n"
        assert raw_command(sock, b"AUTH alice alice-pw\r\n") == b"+OK\r\n"
        assert raw_command(sock, b"ACL WHOAMI\r\n") == b"$5\r\nalice\r\n"
        # HELLO 3 AUTH as Redis 6
        reply = raw_command(sock, b"HELLO 3 AUTH bob bob-pw\r\n")
        assert reply.startswith(b"%7")
        assert raw_command(sock, b"HELLO 2 AUTH bob nope\r\n") == (
            b"-" + WRONGPASS.encode() + b"\r\n")
    # a disabled user cannot authenticate
    admin.execute_command("ACL", "SETUSER", "alice", "off")
    with node.connect() as sock:
        assert raw_command(sock, b"AUTH alice alice-pw\r\n") == (
            b"-" + WRONGPASS.encode() + b"\r\n")
    admin.execute_command("ACL", "SETUSER", "alice", "on")
    # a malformed rule: Redis's text, nothing changed
    before = admin.execute_command("ACL", "LIST")
    for rules, text in (
            (("on", "+nosuch"), "Error in ACL SETUSER modifier '+nosuch': Unknown command "
                                "or category name in ACL"),
            (("bogus",), "Error in ACL SETUSER modifier 'bogus': Syntax error"),
            (("+@nope",), "Error in ACL SETUSER modifier '+@nope': Unknown command or "
                          "category name in ACL"),
            (("#123",), "Error in ACL SETUSER modifier '#123': The password hash must be "
                        "exactly 64 characters and contain only lowercase hexadecimal "
                        "characters"),
            (("<notmine",), "Error in ACL SETUSER modifier '<notmine': The password you "
                            "are trying to remove from the user does not exist")):
        assert error(admin, "ACL", "SETUSER", "alice", "off", *rules) == text
    assert error(admin, "ACL", "SETUSER", "bad name", "on").startswith("Usernames can't")
    assert error(admin, "ACL", "DELUSER", "default") == "The 'default' user cannot be removed"
    assert error(admin, "ACL", "CAT", "nope") == "Unknown category 'nope'"
    assert error(admin, "ACL", "NOPE").startswith("Unknown subcommand")
    assert error(admin, "ACL", "SAVE").startswith("This Disque instance is not configured")
    assert admin.execute_command("ACL", "LIST") == before
    assert alice.execute_command("QLEN", "a:x") == 0  # still alice, still allowed
    # failed AUTHs counted; after 10 from an address, AUTH waits (even a right one;
    # test_auth_limits.py: across connections)
    denied = int(info(admin)["acl_access_denied_auth"])
    assert denied == 4  # (AUTH x, AUTH alice: no password is set, not counted)
    with node.connect() as sock:  # (the 4 above count: the same address)
        for _ in range(10 - denied):
            raw_command(sock, b"AUTH bob wrong\r\n")
        assert raw_command(sock, b"AUTH bob bob-pw\r\n") == (
            b"-ERR too many failed authentications from this address: wait a second\r\n")
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"  # not closed
    stats = info(admin)
    assert int(stats["acl_access_denied_auth"]) == 10
    assert int(stats["acl_access_denied_auth_throttled"]) == 1
    # ACL DELUSER closes the user's connections
    assert admin.execute_command("ACL", "DELUSER", "bob", "nobody") == 1
    with pytest.raises(GONE):
        bob.execute_command("PING")
    assert admin.execute_command("ACL", "USERS") == [b"alice", b"default"]
    user = admin.execute_command("ACL", "GETUSER", "alice")
    assert user[0] == b"flags" and b"on" in user[1] and user[6] == b"keys"
    assert admin.execute_command("ACL", "GETUSER", "bob") is None
    # a user deleting itself gets its reply, then the connection closes
    admin.execute_command("ACL", "SETUSER", "temp", "on", ">t", "~*", "+@all")
    with node.connect() as sock:  # (once bob's failed reconnections no longer pause)
        wait_for(lambda: raw_command(sock, b"AUTH temp t\r\n") == b"+OK\r\n")
        assert raw_command(sock, b"ACL DELUSER temp\r\n", expect_close=True) == b":1\r\n"


def test_requirepass_is_the_default_users_password(start_node: Callable[..., DisqProcess]
                                                   ) -> None:
    node = start_node("--requirepass", "s3cret", client_kwargs={"password": "s3cret"})
    admin = client_as(node)
    admin.execute_command("ACL", "SETUSER", "reader", "on", ">r", "~*", "+@read")
    with node.connect() as sock:
        assert raw_command(sock, b"QLEN q\r\n") == b"-NOAUTH Authentication required.\r\n"
        assert raw_command(sock, b"AUTH default s3cret\r\n") == b"+OK\r\n"
        assert raw_command(sock, b"AUTH reader r\r\n") == b"+OK\r\n"
        assert raw_command(sock, b"QLEN q\r\n") == b":0\r\n"
        assert raw_command(sock, b"ADDJOB q x 0\r\n") == (
            b"-NOPERM User reader has no permissions to run the 'addjob' command\r\n")
        # a wrong password de-authenticates, as in Disque
        assert raw_command(sock, b"AUTH wrong\r\n") == b"-ERR invalid password\r\n"
        assert raw_command(sock, b"QLEN q\r\n") == b"-NOAUTH Authentication required.\r\n"
    admin.close()


def test_users_over_http(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port))
    admin = client_as(node)
    for name, pattern in (("alice", "a:*"), ("bob", "b:*")):
        admin.execute_command("ACL", "SETUSER", name, "on", f">{name}-pw", f"~{pattern}",
                              "+@produce", "+@consume", "+@read", "+deljob")

    def as_user(name: str, password: str) -> Http:
        token = base64.b64encode(f"{name}:{password}".encode()).decode()
        return Http(port, auth=f"Basic {token}")

    alice, bob = as_user("alice", "alice-pw"), as_user("bob", "bob-pw")
    status, added = alice.post("/api/v1/queues/a:q/jobs", {"body": "hers"})
    assert status == 201
    job = added["id"]
    assert bob.post("/api/v1/queues/b:q/jobs", {"body": "his"})[0] == 201
    for method, path in (("POST", "/api/v1/queues/a:q/jobs"),
                         ("GET", "/api/v1/queues/a:q/jobs?nohang=true"),
                         ("GET", f"/api/v1/jobs/{job}"), ("DELETE", f"/api/v1/jobs/{job}"),
                         ("POST", f"/api/v1/jobs/{job}/ack"),
                         ("POST", f"/api/v1/jobs/{job}/fastack"),
                         ("POST", f"/api/v1/jobs/{job}/nack"),
                         ("GET", "/api/v1/queues/a:q/peek")):
        body = {"body": "x"} if method == "POST" and path.endswith("jobs") else (
            {} if method == "POST" else None)
        status, problem = bob.request(method, path, body)
        assert status == 403 and problem["code"] == "NOPERM", (method, path, problem)
        assert problem["detail"] == NOPERM_KEY
    status, page = bob.get("/api/v1/jobs?count=100")
    assert status == 200 and [j["queue"] for j in page["jobs"]] == ["b:q"]
    status, queues = bob.get("/api/v1/queues")
    assert [q["name"] for q in queues["queues"]] == ["b:q"]
    # commands outside the user's categories: 403 with Redis's text
    status, problem = bob.get("/api/v1/users")
    assert status == 403 and "has no permissions to run the 'acl' command" in problem["detail"]
    assert bob.get("/api/v1/cluster/stats")[0] == 403
    assert bob.get("/metrics")[0] == 403
    # wrong credentials: 401 WRONGPASS; the job is untouched, alice takes it
    status, problem = as_user("alice", "nope").get("/api/v1/queues")
    assert status == 401 and problem["code"] == "WRONGPASS"
    status, taken = alice.get("/api/v1/queues/a:q/jobs?nohang=true")
    assert status == 200 and [j["id"] for j in taken["jobs"]] == [job]
    assert alice.post(f"/api/v1/jobs/{job}/ack")[0] == 200
    # /api/v1/users: the default user is the admin here
    http = Http(port)
    status, user = http.request("PUT", "/api/v1/users/carol",
                                {"rules": "on >c-pw ~c:* +@produce"})
    assert status == 200 and user["name"] == "carol" and user["enabled"], user
    assert "~c:* -@all +@produce" in user["rules"]
    assert as_user("carol", "c-pw").post("/api/v1/queues/c:1/jobs", {"body": "x"})[0] == 201
    status, problem = http.request("PUT", "/api/v1/users/carol", {"rules": ["off", "+nope"]})
    assert status == 400 and "+nope" in problem["detail"]
    assert http.get("/api/v1/users/carol")[1]["enabled"]  # unchanged
    assert http.request("PUT", "/api/v1/users/carol", {"rules": 5})[0] == 400
    assert http.request("PUT", "/api/v1/users/carol", {"rules": "x", "more": 1})[0] == 400
    status, listed = http.get("/api/v1/users")
    assert [u["name"] for u in listed["users"]] == ["alice", "bob", "carol", "default"]
    assert http.request("DELETE", "/api/v1/users/carol") == (200, {"deleted": 1})
    assert http.get("/api/v1/users/carol")[0] == 404
    assert as_user("carol", "c-pw").get("/api/v1/queues")[0] == 401
    # usage per user and the refusals, in the Prometheus metrics
    status, text = http.get("/metrics")
    assert status == 200
    assert b'disq_user_jobs_added_total{user="alice"} 1.0' in text
    assert b'disq_user_jobs_consumed_total{user="alice"} 1.0' in text
    assert b'disq_user_jobs_acked_total{user="alice"} 1.0' in text
    assert b'disq_user_commands_total{user="bob"}' in text
    assert b'disq_acl_access_denied_total{reason="key"}' in text
    assert b'disq_acl_access_denied_total{reason="auth"} 2.0' in text
    admin.close()


def test_http_failures_are_rate_limited_per_ip(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--http-port", str(port), "--requirepass", "pw",
                      client_kwargs={"password": "pw"})
    admin = client_as(node)  # authenticated before the address is paused
    admin.execute_command("PING")
    wrong = Http(port, auth="Bearer nope")
    for _ in range(10):
        assert wrong.get("/api/v1/queues")[0] == 401
    assert Http(port, auth="Bearer pw").get("/api/v1/queues")[0] == 429
    stats = info(admin)
    assert int(stats["acl_access_denied_auth"]) == 10
    assert int(stats["acl_access_denied_auth_throttled"]) == 1
    admin.close()


def test_aclfile_load_and_save(start_node: Callable[..., DisqProcess], tmp_path: Path) -> None:
    aclfile = tmp_path / "users.acl"
    aclfile.write_text("user default on nopass ~* +@all\n"
                       "user worker on >w ~jobs:* +@consume +@read\n")
    node = start_node("--aclfile", str(aclfile))
    admin = client_as(node)
    worker = client_as(node, "worker", "w")
    assert worker.execute_command("QLEN", "jobs:1") == 0
    assert error(worker, "QLEN", "other") == NOPERM_KEY
    admin.execute_command("ACL", "SETUSER", "maker", "on", ">m", "~jobs:*", "+@produce")
    assert admin.execute_command("ACL", "SAVE") == b"OK"
    text = aclfile.read_text()
    assert "user maker on #" in text and "user worker on #" in text
    # ACL LOAD: a broken file changes nothing
    aclfile.write_text(text + "user broken on +nosuch\n")
    assert error(admin, "ACL", "LOAD").startswith(f"{aclfile}:4: Error in ACL SETUSER")
    assert admin.execute_command("ACL", "USERS") == [b"default", b"maker", b"worker"]
    # a good one replaces every user; the deleted one's connections close
    aclfile.write_text("user default on nopass ~* +@all\nuser maker on >m2 ~* +@all\n")
    assert admin.execute_command("ACL", "LOAD") == b"OK"
    assert admin.execute_command("ACL", "USERS") == [b"default", b"maker"]
    with pytest.raises(GONE):
        worker.execute_command("PING")
    admin.execute_command("ACL", "SETUSER", "late", "on", ">l", "~*", "+@read")
    admin.execute_command("ACL", "SAVE")
    admin.close()
    # the saved users survive a restart
    node.stop()
    node.start()
    again = client_as(node, "late", "l")
    assert again.execute_command("ACL", "WHOAMI") == b"late"
    again.close()


def test_a_bad_aclfile_stops_the_start(start_node: Callable[..., DisqProcess],
                                       tmp_path: Path) -> None:
    missing = tmp_path / "none.acl"
    with pytest.raises(RuntimeError, match="Aborting disq startup because of ACL errors"):
        start_node("--aclfile", str(missing))
    broken = tmp_path / "broken.acl"
    broken.write_text("user x on ~* +@all bogus\n")
    with pytest.raises(RuntimeError, match="broken.acl:1: Error in ACL SETUSER modifier"):
        start_node("--aclfile", str(broken))


def test_users_spread_across_the_cluster(make_cluster: Callable[..., list[DisqProcess]]
                                         ) -> None:
    nodes = make_cluster(3)
    admins = [client_as(n) for n in nodes]
    admins[0].execute_command("ACL", "SETUSER", "svc", "on", ">pw", "~svc:*", "+@all")

    def rules(i: int) -> list[bytes]:
        return [line for line in admins[i].execute_command("ACL", "LIST")
                if line.startswith(b"user svc ")]

    wait_for(lambda: all(rules(i) == rules(0) for i in (1, 2)), timeout=10)
    svc = client_as(nodes[2], "svc", "pw")
    assert svc.execute_command("QLEN", "svc:1") == 0
    assert error(svc, "QLEN", "other") == NOPERM_KEY
    # a change on another node wins everywhere (the newest version)
    admins[1].execute_command("ACL", "SETUSER", "svc", "~other")
    wait_for(lambda: all(b"~other" in (rules(i) or [b""])[0] for i in range(3)), timeout=10)
    assert svc.execute_command("QLEN", "other") == 0
    # a deletion spreads, and closes the user's connections everywhere
    admins[2].execute_command("ACL", "DELUSER", "svc")
    wait_for(lambda: all(rules(i) == [] for i in range(3)), timeout=10)
    with pytest.raises(GONE):
        svc.execute_command("PING")
    # a node that was down catches up (ACL_SYNC)
    nodes[1].stop()
    admins[1].close()
    # (flagged first: a change answers once every node not flagged holds it)
    wait_for(lambda: b"fail" in admins[0].execute_command("CLUSTER", "NODES"), timeout=10)
    admins[0].execute_command("ACL", "SETUSER", "late", "on", "nopass", "~*", "+@read")
    nodes[1].start()
    admins[1] = client_as(nodes[1])
    wait_for(lambda: admins[1].execute_command("ACL", "USERS") == [b"default", b"late"],
             timeout=15)
    for admin in admins:
        admin.close()


def test_passwords_stay_out_of_slowlog_and_monitor(two_teams: tuple[DisqProcess, Any]) -> None:
    node, (admin, alice, _) = two_teams
    admin.execute_command("CONFIG", "SET", "slowlog-log-slower-than", 0)
    with node.connect() as monitor:
        assert raw_command(monitor, b"MONITOR\r\n") == b"+OK\r\n"
        admin.execute_command("ACL", "SETUSER", "carol", "on", ">top-secret")
        with node.connect() as carol:
            assert raw_command(carol, b"AUTH carol top-secret\r\n") == b"+OK\r\n"
        seen = raw_command(monitor, b"")
        while b'"auth"' not in seen.lower():
            more = raw_command(monitor, b"")
            assert more, seen
            seen += more
    assert b"top-secret" not in seen
    entries = admin.execute_command("SLOWLOG", "GET", 100)
    assert entries and b"top-secret" not in repr(entries).encode()
    alice.execute_command("QLEN", "a:x")  # (connected)
    assert b"user=alice" in admin.execute_command("CLIENT", "LIST")


# One invocation of each command whose declaration says where it names queues, naming
# b:* queues only where the declaration says (the rest is alice's own or no queue).
DECLARED_QUEUE_USES = {
    "addjob": ("ADDJOB", "b:q", "x", 0),
    "addjobs": ("ADDJOBS", "b:q", 0, "JOBS", "x"),
    "getjob": ("GETJOB", "NOHANG", "FROM", "a:q", "b:q"),
    "qlen": ("QLEN", "b:q"),
    "globalqlen": ("GLOBALQLEN", "b:q"),
    "qpeek": ("QPEEK", "b:q", 1),
    "qstat": ("QSTAT", "b:q"),
    "pause": ("PAUSE", "b:q", "state"),
    "qpolicy": ("QPOLICY", "a:q", "SET", "DEADLETTER", "b:dead"),
    "cron": ("CRON", "ADD", "tick", "b:q", "* * * * *", "x"),
    "batch": ("BATCH", "NEW", "acl-batch", "ONDONE", "a:q", "x", "ONSUCCESS", "b:q", "y"),
    "topic": ("TOPIC", "SUBSCRIBE", "a:topic", "b:q"),
    "deadletter": ("DEADLETTER", "REQUEUE", "b:dead"),
    "replay": ("REPLAY", "a:q", "FROM", 0, "INTO", "b:q"),
    "retained": ("RETAINED", "b:q", "FROM", 0),
    "qdel": ("QDEL", "b:q"),
    "qpurge": ("QPURGE", "b:q"),
}


def test_every_declared_queue_argument_is_checked(start_node: Callable[..., DisqProcess]
                                                   ) -> None:
    """Driven by the declarations: each command that names queues refuses a user those
    queues are not allowed to, wherever in its arguments they are."""
    declared = {spec.name for spec in load_commands().values() if spec.queues is not None}
    assert declared == set(DECLARED_QUEUE_USES)
    node = start_node()
    admin = client_as(node)
    assert admin.execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~a:*",
                                 "+@all") == b"OK"
    alice = client_as(node, "alice", "pw")
    try:
        for name, command in DECLARED_QUEUE_USES.items():
            with pytest.raises(redis.ResponseError, match=NOPERM_KEY):
                alice.execute_command(*command)
            # ... and the same command naming alice's own queues runs
            allowed = [str(a).replace("b:", "a:") for a in command]
            try:
                alice.execute_command(*allowed)
            except redis.ResponseError as exc:
                assert NOPERM_KEY not in str(exc), (name, exc)
    finally:
        alice.close()
        admin.close()
