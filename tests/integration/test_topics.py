"""TOPIC SUBSCRIBE / UNSUBSCRIBE / LIST / PUBLISH (a disq extension) against real
servers: one job per subscribed queue, a MSGID adds nothing twice, subscriptions on
every node and across a restart."""

from __future__ import annotations

from collections.abc import Callable

import jobutil
from disq_client import Client
from jobutil import RawClient, assert_error
from support import DisqProcess, form_cluster, wait_for

shared_disq = jobutil.shared_disq
node = jobutil.node
c = jobutil.c


def test_a_publish_adds_one_job_to_each_subscribed_queue(c: RawClient) -> None:
    assert c.call("TOPIC", "SUBSCRIBE", "t-orders", "t-billing") == 1
    assert c.call("TOPIC", "SUBSCRIBE", "t-orders", "t-billing") == 0  # already
    assert c.call("TOPIC", "SUBSCRIBE", "t-orders", "t-shipping") == 1
    assert c.call("TOPIC", "LIST", "t-orders") == [[b"t-orders", [b"t-billing",
                                                                  b"t-shipping"], [b"", b""]]]
    published = c.call("TOPIC", "PUBLISH", "t-orders", "order 1", "PRIORITY", 3)
    assert published[0::2] == [b"t-billing", b"t-shipping"]
    for queue, job_id in zip(published[0::2], published[1::2], strict=True):
        ((got_queue, got_id, body),) = c.call("GETJOB", "FROM", queue)
        assert (got_queue, got_id, body) == (queue, job_id, b"order 1")
        shown = c.call("SHOW", job_id)
        assert shown[shown.index(b"priority") + 1] == 3
    assert c.call("TOPIC", "UNSUBSCRIBE", "t-orders", "t-billing") == 1
    assert c.call("TOPIC", "UNSUBSCRIBE", "t-orders", "t-billing") == 0
    assert c.call("TOPIC", "PUBLISH", "t-orders", "order 2")[0::2] == [b"t-shipping"]
    assert_error(c, "NOTOPIC no queue subscribes to topic 't-nobody' (that this node knows "
                    "of): nothing was added", "TOPIC", "PUBLISH", "t-nobody", "x")
    assert c.call("TOPIC", "UNSUBSCRIBE", "t-orders", "t-shipping") == 1
    assert_error(c, "NOTOPIC no queue subscribes to topic 't-orders' (that this node knows "
                    "of): nothing was added", "TOPIC", "PUBLISH", "t-orders", "x")


def test_a_subscription_s_filter_picks_the_publishes_it_gets(c: RawClient) -> None:
    assert c.call("TOPIC", "SUBSCRIBE", "t-f", "t-f-all") == 1
    assert c.call("TOPIC", "SUBSCRIBE", "t-f", "t-f-eu", "WHERE", "region", "=", "eu",
                  "WHERE", "amount", ">", "10") == 1
    assert c.call("TOPIC", "LIST", "t-f") == [
        [b"t-f", [b"t-f-all", b"t-f-eu"], [b"", b"region = eu AND amount > 10"]]]
    assert c.call("TOPIC", "PUBLISH", "t-f", "a", "ATTR", "region", "eu", "ATTR",
                  "amount", "12")[0::2] == [b"t-f-all", b"t-f-eu"]
    assert c.call("TOPIC", "PUBLISH", "t-f", "b", "ATTR", "region", "us", "ATTR",
                  "amount", "12")[0::2] == [b"t-f-all"]
    assert c.call("TOPIC", "PUBLISH", "t-f", "c")[0::2] == [b"t-f-all"]  # no attributes
    # the same subscription with another filter replaces it
    assert c.call("TOPIC", "SUBSCRIBE", "t-f", "t-f-eu", "WHERE", "region", "=", "us") == 1
    assert c.call("TOPIC", "PUBLISH", "t-f", "d", "ATTR", "region", "us")[0::2] == [
        b"t-f-all", b"t-f-eu"]
    assert_error(c, "ERR WHERE needs key = value, key != value, key PREFIX p, key < n, "
                    "key > n or key EXISTS (a key of 1 to 64 bytes, at most 16 WHEREs)",
                 "TOPIC", "SUBSCRIBE", "t-f", "t-f-x", "WHERE", "k", "~", "v")
    assert_error(c, "ERR TOPIC SUBSCRIBE takes WHERE key op value conditions after the "
                    "queue (at most 16)", "TOPIC", "SUBSCRIBE", "t-f", "t-f-x", "k", "=", "v")
    assert c.call("TOPIC", "LIST", "t-f")[0][1] == [b"t-f-all", b"t-f-eu"]  # nothing added


def test_a_msgid_adds_nothing_twice(c: RawClient) -> None:
    assert c.call("TOPIC", "SUBSCRIBE", "t-once", "t-once-q") == 1
    first = c.call("TOPIC", "PUBLISH", "t-once", "x", "MSGID", "m-1")
    again = c.call("TOPIC", "PUBLISH", "t-once", "x", "MSGID", "m-1")
    assert first == again and c.call("QLEN", "t-once-q") == 1
    c.call("TOPIC", "PUBLISH", "t-once", "x", "MSGID", "m-2")
    assert c.call("QLEN", "t-once-q") == 2


def test_bad_topic_requests_get_clear_errors(c: RawClient) -> None:
    assert_error(c, "ERR wrong number of arguments for 'topic publish'", "TOPIC", "PUBLISH",
                 "t")
    assert_error(c, "ERR TOPIC PUBLISH takes MSGID, not DEDUP or UNIQUE: a retried publish "
                    "with the same MSGID adds nothing twice",
                 "TOPIC", "PUBLISH", "t", "x", "DEDUP", "k")
    assert_error(c, "ERR syntax error", "TOPIC", "PUBLISH", "t", "x", "MSGID")
    assert_error(c, "ERR syntax error", "TOPIC", "PUBLISH", "t", "x", "NOPE", "1")
    assert_error(c, "ERR PRIORITY must be between 0 and 255", "TOPIC", "PUBLISH", "t", "x",
                 "PRIORITY", 300)
    assert_error(c, "ERR a topic's name must be 1 to 256 bytes", "TOPIC", "SUBSCRIBE",
                 "t" * 257, "q")
    assert_error(c, "ERR wrong number of arguments for 'topic subscribe'", "TOPIC",
                 "SUBSCRIBE", "t")
    assert_error(c, "ERR unknown TOPIC subcommand, try SUBSCRIBE, UNSUBSCRIBE, LIST or "
                    "PUBLISH", "TOPIC", "DROP", "t")


def test_the_python_client_publishes(node: DisqProcess) -> None:
    with Client([f"127.0.0.1:{node.port}"]) as client:
        assert client.topic_subscribe("t-py", "t-py-a") == 1
        assert client.topic_list("t-py") == {"t-py": ["t-py-a"]}
        ids = client.topic_publish("t-py", b"hello", msgid="one", priority=1)
        assert list(ids) == ["t-py-a"]
        assert client.get_jobs("t-py-a")[0].id == ids["t-py-a"]


def test_subscriptions_reach_every_node_and_survive_a_restart(
        start_node: Callable[..., DisqProcess]) -> None:
    nodes = form_cluster([start_node("--cluster-node-timeout", "2000") for _ in range(3)])
    with RawClient(nodes[0].port) as first:
        assert first.call("TOPIC", "SUBSCRIBE", "events", "audit") == 1
    for n in nodes[1:]:
        with RawClient(n.port) as other:
            assert other.call("TOPIC", "LIST") == [[b"events", [b"audit"], [b""]]]
            assert other.call("TOPIC", "PUBLISH", "events", "e", "MSGID", "x")[0] == b"audit"
    total = 0
    for n in nodes:
        with RawClient(n.port) as each:
            total += each.call("QLEN", "audit")
    assert total == 1  # one MSGID, published on two nodes: one job
    nodes[2].stop()
    nodes[2].start()
    with RawClient(nodes[2].port) as restarted:
        wait_for(lambda: restarted.call("TOPIC", "LIST") == [[b"events", [b"audit"], [b""]]],
                 10)


def test_topics_over_http(start_node: Callable[..., DisqProcess]) -> None:
    from support import free_port
    from test_http import Http

    port = free_port()
    start_node("--http-port", str(port))
    http = Http(port)
    status, answer = http.post("/api/v1/topics/h-t/subscriptions", {"queue": "h-q1"})
    assert (status, answer) == (201, {"changed": True}), answer
    assert http.post("/api/v1/topics/h-t/subscriptions", {"queue": "h-q2"})[0] == 201
    assert http.post("/api/v1/topics/h-t/subscriptions", {"queue": "h-q2"}) == (
        200, {"changed": False})
    assert http.get("/api/v1/topics") == (200, {"topics": {"h-t": ["h-q1", "h-q2"]},
                                                "filters": {"h-t": {}}})
    status, published = http.post("/api/v1/topics/h-t/publish",
                                  {"body": "hi", "msgid": "m", "priority": 7})
    assert status == 200 and set(published["jobs"]) == {"h-q1", "h-q2"}, published
    assert http.post("/api/v1/topics/h-t/publish", {"body": "hi", "msgid": "m"})[1] == (
        published)
    status, problem = http.post("/api/v1/topics/h-t/publish", {"body": "x", "dedup": "k"})
    assert status == 400, problem
    assert http.request("DELETE", "/api/v1/topics/h-t/subscriptions/h-q1") == (
        200, {"changed": True})
    assert http.get("/api/v1/topics") == (200, {"topics": {"h-t": ["h-q2"]},
                                                "filters": {"h-t": {}}})
