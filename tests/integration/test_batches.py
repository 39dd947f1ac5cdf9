"""BATCH NEW / CLOSE / STATUS and ADDJOB ... BATCH (a disq extension) against real
servers: members counted at CLOSE, the callbacks added once every member ended, once
in the cluster, never before."""

from __future__ import annotations

import time
from collections.abc import Callable

import jobutil
from disq_client import Client
from jobutil import NULL_ARRAY, RawClient, assert_error
from support import DisqProcess, form_cluster, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def status(client: RawClient, bid: str) -> dict[bytes, object]:
    reply = client.call("BATCH", "STATUS", bid)
    return dict(zip(reply[::2], reply[1::2], strict=True))


def consume_all(client: RawClient, queue: str, nack: bool = False) -> list[bytes]:
    """Take every job of `queue` here and ack it (or NACK it); their IDs."""
    taken = []
    while True:
        got = client.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", queue)
        if got is NULL_ARRAY or not got:
            return taken
        ids = [entry[1] for entry in got]
        client.call("NACK" if nack else "ACKJOB", *ids)
        taken += ids


def test_a_batch_fires_its_callbacks_once_every_member_ended(c: RawClient) -> None:
    assert c.call("BATCH", "NEW", "b-ok", "ONDONE", "done-q", "all done",
                  "ONSUCCESS", "ok-q", "all fine") == b"OK"
    ids = [c.call("ADDJOB", "work-ok", f"job{i}", 0, "BATCH", "b-ok") for i in range(5)]
    assert status(c, "b-ok")[b"state"] == b"open"
    assert status(c, "b-ok")[b"members"] == 5
    assert c.call("BATCH", "CLOSE", "b-ok") == 5
    assert_error(c, "BATCHCLOSED batch 'b-ok' is closed", "ADDJOB", "work-ok", "late", 0,
                 "BATCH", "b-ok")
    assert_error(c, "BATCHCLOSED batch 'b-ok' is closed already", "BATCH", "CLOSE", "b-ok")
    first = c.call("GETJOB", "COUNT", 4, "FROM", "work-ok")
    c.call("ACKJOB", *[entry[1] for entry in first])
    st = status(c, "b-ok")
    assert (st[b"state"], st[b"pending"], st[b"acked"]) == (b"closed", 1, 4)
    assert c.call("QLEN", "done-q") == 0  # one member is still running: nothing yet
    assert consume_all(c, "work-ok") == [ids[4]]
    wait_for(lambda: c.call("QLEN", "done-q") == 1 and c.call("QLEN", "ok-q") == 1, 5)
    st = status(c, "b-ok")
    assert (st[b"state"], st[b"members"], st[b"pending"], st[b"acked"], st[b"dead"]) == (
        b"done", 5, 0, 5, 0)
    assert len(st[b"callbacks"]) == 2  # type: ignore[arg-type]
    (_, job_id, body), = c.call("GETJOB", "FROM", "done-q")
    assert body == b"all done" and job_id in st[b"callbacks"]  # type: ignore[operator]
    info = c.call("INFO", "batches").decode()
    assert "batches_done:" in info and "batch_member_ids:" in info
    assert int(info.split("batches_done:")[1].split()[0]) >= 1


def test_a_dead_member_fires_ondone_but_not_onsuccess(c: RawClient) -> None:
    assert c.call("BATCH", "NEW", "b-dead", "ONDONE", "done-d", "x",
                  "ONSUCCESS", "ok-d", "y") == b"OK"
    c.call("ADDJOB", "work-d", "fine", 0, "BATCH", "b-dead")
    c.call("ADDJOB", "work-d", "fails", 0, "BATCH", "b-dead", "MAXDELIVERIES", 1)
    assert c.call("BATCH", "CLOSE", "b-dead") == 2
    for _, job_id, body in c.call("GETJOB", "COUNT", 2, "FROM", "work-d"):
        c.call("NACK" if body == b"fails" else "ACKJOB", job_id)
    wait_for(lambda: c.call("QLEN", "done-d") == 1, 5)
    st = status(c, "b-dead")
    assert (st[b"state"], st[b"acked"], st[b"dead"]) == (b"done", 1, 1)
    assert c.call("QLEN", "ok-d") == 0


def test_addjobs_adds_members_and_an_empty_batch_is_done_at_close(c: RawClient) -> None:
    assert c.call("BATCH", "NEW", "b-many", "ONDONE", "done-m", "x") == b"OK"
    ids = c.call("ADDJOBS", "work-m", 0, "BATCH", "b-many", "JOBS", "a", "b", "c")
    assert len(ids) == 3 and all(isinstance(i, bytes) for i in ids)
    assert c.call("BATCH", "CLOSE", "b-many") == 3
    assert sorted(consume_all(c, "work-m")) == sorted(ids)
    wait_for(lambda: c.call("QLEN", "done-m") == 1, 5)
    assert c.call("BATCH", "NEW", "b-empty", "ONDONE", "done-e", "x") == b"OK"
    assert c.call("BATCH", "CLOSE", "b-empty") == 0
    wait_for(lambda: c.call("QLEN", "done-e") == 1, 5)


def test_bad_batch_requests_get_clear_errors_and_change_nothing(c: RawClient) -> None:
    assert_error(c, "NOBATCH no batch 'nope'", "ADDJOB", "q-bad", "x", 0, "BATCH", "nope")
    assert_error(c, "NOBATCH no batch 'nope'", "BATCH", "CLOSE", "nope")
    assert_error(c, "NOBATCH no batch 'nope'", "BATCH", "STATUS", "nope")
    assert c.call("QLEN", "q-bad") == 0
    assert c.call("BATCH", "NEW", "b-twice") == b"OK"
    assert_error(c, "BATCHEXISTS batch 'b-twice' already exists", "BATCH", "NEW", "b-twice")
    assert_error(c, "ERR ONDONE needs a queue name and a job body", "BATCH", "NEW", "b-x",
                 "ONDONE", "", "body")
    assert_error(c, "ERR syntax error", "BATCH", "NEW", "b-x", "ONDONE", "q")
    assert_error(c, "ERR TTL must be between 1 and 7776000 seconds", "BATCH", "NEW", "b-x",
                 "TTL", 0)
    assert_error(c, "ERR a batch ID must be 1 to 256 bytes", "BATCH", "NEW", "x" * 257)
    assert_error(c, "ERR unknown BATCH subcommand, try NEW, CLOSE, STATUS or LIST", "BATCH",
                 "DROP", "b-twice")
    assert_error(c, "ERR wrong number of arguments for 'batch new'", "BATCH", "NEW")
    assert_error(c, "ERR wrong number of arguments for 'batch status'", "BATCH", "STATUS")
    assert_error(c, "ERR wrong number of arguments for 'batch' command", "BATCH")
    assert_error(c, "ERR wrong number of arguments for 'batch close'", "BATCH", "CLOSE",
                 "a", "b")
    assert_error(c, "ERR BATCH needs a synchronous ADDJOB (no ASYNC): its copies are "
                    "counted by CLOSE", "ADDJOB", "q-bad", "x", 0, "ASYNC", "BATCH", "b-twice")
    assert_error(c, "NOBATCH no batch 'b-x'", "BATCH", "STATUS", "b-x")  # none was made


def test_the_python_client_runs_a_batch(node: DisqProcess) -> None:
    with Client([f"127.0.0.1:{node.port}"]) as client:
        assert client.batch_new("b-client", ondone=("done-c", b"finished"), ttl_ms=60_000) == "OK"
        ids = [client.add_job("work-c", f"j{i}", batch="b-client") for i in range(2)]
        ids += client.add_jobs("work-c", ["j2", "j3"], batch="b-client")
        assert client.batch_close("b-client") == 4
        for job in client.get_jobs("work-c", count=4):
            client.ack(job.id)
        wait_for(lambda: client.batch_status("b-client").state == "done", 5)
        done = client.batch_status("b-client")
        assert (done.members, done.acked, done.dead, len(done.callbacks)) == (4, 4, 0, 1)
        assert sorted(ids) == sorted(set(ids))


def test_three_nodes_fire_once_and_never_before_the_last_ack(
        start_node: Callable[..., DisqProcess]) -> None:
    """Members added on every node of three and consumed on each: the callback is added
    once in the whole cluster, and not while one member is still running."""
    nodes = form_cluster([start_node("--cluster-node-timeout", "2000") for _ in range(3)])
    clients = [RawClient(n.port) for n in nodes]
    try:
        assert clients[0].call("BATCH", "NEW", "b3", "ONDONE", "done3", "x") == b"OK"
        ids = [clients[i % 3].call("ADDJOB", "work3", f"j{i}", 0, "BATCH", "b3")
               for i in range(60)]
        assert all(isinstance(i, bytes) for i in ids)
        assert clients[1].call("BATCH", "CLOSE", "b3") == 60
        held_back: list[tuple[RawClient, bytes]] = []

        def consume() -> bool:
            for client in clients:
                got = client.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "work3")
                for _, job_id, _ in [] if got is NULL_ARRAY else got:
                    if not held_back:
                        held_back.append((client, job_id))  # running, not acked yet
                    else:
                        client.call("ACKJOB", job_id)
            return all(status(cl, "b3")[b"pending"] == 1 for cl in clients)

        wait_for(consume, 20, message="every member but one acked, on every node")
        assert sum(cl.call("QLEN", "done3") for cl in clients) == 0
        client, last = held_back[0]
        assert client.call("ACKJOB", last) == 1
        wait_for(lambda: sum(cl.call("QLEN", "done3") for cl in clients) == 1, 10)
        wait_for(lambda: all(status(cl, "b3")[b"state"] == b"done" for cl in clients), 10)
        assert sum(cl.call("QLEN", "done3") for cl in clients) == 1
        callbacks = {tuple(status(cl, "b3")[b"callbacks"]) for cl in clients}  # type: ignore[arg-type]
        assert len(callbacks) == 1
        for cl in clients:  # every node holds (and lists) every batch
            assert [e[b"id"] for e in entries(cl.call("BATCH", "LIST", "STATE", "done"))] == [b"b3"]
    finally:
        for client in clients:
            client.close()


def entries(reply: list[list[object]]) -> list[dict[bytes, object]]:
    return [dict(zip(item[::2], item[1::2], strict=True)) for item in reply]


def test_batch_list_shows_the_batches_newest_first_by_state(
        start_node: Callable[..., DisqProcess]) -> None:
    with RawClient(start_node().port) as client:
        assert client.call("BATCH", "LIST") == []
        # made in this order, a millisecond apart (the IDs' own order is the other way)
        for bid in ("l-c", "l-b", "l-a"):
            made = time.time()
            assert client.call("BATCH", "NEW", bid, "ONDONE", "l-done", bid) == b"OK"
            wait_for(lambda: time.time() >= made + 0.002, 1)  # noqa: B023
        member = client.call("ADDJOB", "l-work", "x", 0, "BATCH", "l-b")
        assert client.call("BATCH", "CLOSE", "l-a") == 0
        wait_for(lambda: status(client, "l-a")[b"state"] == b"done", 5)
        assert client.call("BATCH", "CLOSE", "l-b") == 1
        listed = entries(client.call("BATCH", "LIST"))
        assert [e[b"id"] for e in listed] == [b"l-a", b"l-b", b"l-c"]
        assert listed[1] == status(client, "l-b")  # each entry: BATCH STATUS's fields
        assert (listed[1][b"state"], listed[1][b"members"], listed[1][b"pending"]) == (
            b"closed", 1, 1)
        for state, expected in (("open", [b"l-c"]), ("CLOSED", [b"l-b"]), ("done", [b"l-a"])):
            assert [e[b"id"] for e in entries(client.call("BATCH", "LIST", "STATE", state))
                    ] == expected, state
        assert_error(client, "ERR STATE must be open, closed or done", "BATCH", "LIST",
                     "STATE", "gone")
        assert_error(client, "ERR syntax error", "BATCH", "LIST", "STATE")
        # a member's SHOW names its batch; a plain job's SHOW has no such field
        shown = client.call("SHOW", member)
        assert shown[shown.index(b"batch") + 1] == b"l-b"
        assert b"batch" not in client.call("SHOW", client.call("ADDJOB", "l-work", "y", 0))


def test_batch_list_shows_a_user_only_the_batches_of_its_queues(
        start_node: Callable[..., DisqProcess]) -> None:
    node = start_node()
    with RawClient(node.port) as admin:
        assert admin.call("ACL", "SETUSER", "ann", "on", ">ann-pw", "~a:*", "+@all") == b"OK"
        admin.call("BATCH", "NEW", "mine", "ONDONE", "a:done", "x", "ONSUCCESS", "a:ok", "y")
        admin.call("BATCH", "NEW", "half", "ONDONE", "a:done", "x", "ONSUCCESS", "b:ok", "y")
        admin.call("BATCH", "NEW", "theirs", "ONDONE", "b:done", "x")
        admin.call("BATCH", "NEW", "no-callback")
    with Client([f"127.0.0.1:{node.port}"]) as client:  # a user of every queue: all
        assert {b.id for b in client.batch_list()} == {"mine", "half", "theirs", "no-callback"}
        listed = {b.id: b for b in client.batch_list(state="open")}
        assert listed["mine"] == client.batch_status("mine")
        assert client.batch_list(state="done") == []
    with RawClient(node.port) as ann:
        assert ann.call("AUTH", "ann", "ann-pw") == b"OK"
        assert [e[b"id"] for e in entries(ann.call("BATCH", "LIST"))] == [b"mine"]
        assert_error(ann, "NOPERM No permissions to access a key", "BATCH", "STATUS", "half")
