"""ADDJOB ... DEDUP key (a disq extension): one job per key in the whole cluster, for
the job's life, its acknowledgement included; the key known on a replica only, with
the origin killed; an origin killed before answering, one copy left; a restarted node
that lost its keys; concurrent ADDJOBs with one key; bad keys."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest
import redis
from support import DisqProcess, call, myid, wait_for, wait_formed

from disq.dedup_table import scoped_key
from disq.replication.targets import key_order

TIMEOUT = "5000"


def add(node: DisqProcess, key: str, body: str = "body", *opts: str) -> str:
    reply = call(node, "ADDJOB", "q", body, TIMEOUT, *opts, "DEDUP", key)
    assert isinstance(reply, bytes), reply
    return reply.decode()


def holders(nodes: list[DisqProcess], job_id: str) -> list[DisqProcess]:
    return [n for n in nodes if call(n, "SHOW", job_id) is not None]


def total_qlen(nodes: list[DisqProcess]) -> int:
    return sum(int(call(n, "QLEN", "q")) for n in nodes)  # type: ignore[arg-type]


def test_single_node_same_key_same_job(node: DisqProcess) -> None:
    first = add(node, "k1")
    assert add(node, "k1", "another body") == first
    assert add(node, "k2") != first
    assert call(node, "QLEN", "q") == 2
    assert call(node, "ACKJOB", first) == 1
    assert add(node, "k1") == first  # acknowledged: still the same job, not a new one
    assert call(node, "QLEN", "q") == 1


def test_pipelined_same_key_adds_once(node: DisqProcess) -> None:
    client = node.client()
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(50):
            pipe.execute_command("ADDJOB", "q", f"b{i}", "0", "DEDUP", f"k{i % 5}")
        ids = pipe.execute()
    finally:
        client.close()
    assert len(set(ids)) == 5
    assert call(node, "QLEN", "q") == 5


def test_bad_keys_and_plain_addjob_unchanged(node: DisqProcess) -> None:
    with pytest.raises(redis.ResponseError, match="DEDUP key"):
        call(node, "ADDJOB", "q", "b", "0", "DEDUP", "")
    with pytest.raises(redis.ResponseError, match="DEDUP key"):
        call(node, "ADDJOB", "q", "b", "0", "DEDUP", "x" * 257)
    with pytest.raises(redis.ResponseError, match="syntax"):
        call(node, "ADDJOB", "q", "b", "0", "DEDUP")
    with pytest.raises(redis.ResponseError, match="TTL"):
        call(node, "ADDJOB", "q", "b", "0", "TTL", "0", "DEDUP", "k")
    assert call(node, "QLEN", "q") == 0
    assert call(node, "ADDJOB", "q", "b", "0") != call(node, "ADDJOB", "q", "b", "0")


@pytest.fixture
def three(make_cluster: Callable[..., list[DisqProcess]]) -> list[DisqProcess]:
    return make_cluster(3)


def test_cluster_key_known_on_the_holders_only(three: list[DisqProcess]) -> None:
    a, b, c = three
    job_id = add(a, "key", "body", "REPLICATE", "2")
    copies = holders(three, job_id)
    assert len(copies) == 2
    other = next(n for n in three if n not in copies)
    # the node without a copy asks the others; the replica knows the key itself
    assert add(other, "key") == job_id
    replica = next(n for n in copies if n is not a)
    assert add(replica, "key") == job_id
    assert total_qlen(three) == 1
    # ADDJOB's own errors come first, and leave the key unknown
    with pytest.raises(redis.ResponseError, match="DELAY is greater than TTL"):
        call(a, "ADDJOB", "q", "x", TIMEOUT, "DELAY", "20", "TTL", "10", "DEDUP", "new")
    assert add(a, "new") != job_id and total_qlen(three) == 2


def test_cluster_key_held_by_a_leaving_node_only(three: list[DisqProcess]) -> None:
    """A node that is leaving takes no new copies but keeps its jobs until they are
    acked: the only holder of a key's job (REPLICATE 1) is asked, though leaving."""
    a, b, c = three
    job_id = add(c, "key", "body", "REPLICATE", "1")
    assert call(c, "CLUSTER", "LEAVING", "yes") == b"OK"
    c_id = myid(c)

    def seen_leaving(node: DisqProcess) -> bool:
        nodes = call(node, "CLUSTER", "NODES").decode().splitlines()  # type: ignore[union-attr]
        return any(line.startswith(c_id) and "leaving" in line.split()[2] for line in nodes)

    wait_for(lambda: seen_leaving(a) and seen_leaving(b), timeout=10, interval=0.05,
             message="the others to see the node leaving")
    assert add(a, "key", "body", "REPLICATE", "1") == job_id
    assert add(b, "key", "body", "REPLICATE", "1") == job_id
    assert total_qlen(three) == 1


def test_cluster_origin_killed_replica_still_knows(three: list[DisqProcess]) -> None:
    a, b, c = three
    job_id = add(a, "key", "body", "REPLICATE", "2")
    replica = next(n for n in holders(three, job_id) if n is not a)
    third = next(n for n in three if n is not a and n is not replica)
    a.kill()
    wait_for(lambda: add(third, "key") == job_id, timeout=10, interval=0.1,
             message="the surviving replica to answer the dedup query")
    assert call(third, "QLEN", "q") == 0  # nothing new added there


def test_cluster_acked_job_still_deduped(three: list[DisqProcess]) -> None:
    a, b, c = three
    job_id = add(a, "key", "body", "REPLICATE", "3")
    assert call(b, "ACKJOB", job_id) == 1
    wait_for(lambda: not holders(three, job_id), timeout=10, interval=0.05,
             message="the acked job to be collected everywhere")
    for node in three:
        assert add(node, "key", "again") == job_id
    assert total_qlen(three) == 0


def info_field(node: DisqProcess, name: str) -> int:
    return int(node.client().info("dedup")[name])


def test_cluster_restarted_node_does_not_vouch_for_keys_it_lost(
        three: list[DisqProcess]) -> None:
    """Keys whose copies are on a and c; c restarts (no AOF: its copies and keys are
    gone). b adds them again: its one copy goes to a (who knows the key) or to c, who
    knows nothing but restarted within the keys' TTL, so refuses to vouch: either way
    b asks every node and a answers."""
    a, b, c = three
    ids = {f"k{i}": add(a, f"k{i}", "body", "REPLICATE", "2") for i in range(40)}
    on_c = [k for k, job_id in ids.items() if call(c, "SHOW", job_id) is not None]
    assert on_c  # 40 keys: about half went to c
    assert c.stop() == 0
    c.start()
    wait_formed(three)
    for key in on_c:
        assert add(b, key, "again", "REPLICATE", "2") == ids[key]
    assert info_field(b, "dedup_conflicts") == len(on_c)
    assert total_qlen(three) == 40


def pipelined_adds(node: DisqProcess, keys: int,
                   barrier: threading.Barrier | None = None) -> list[bytes]:
    """ADDJOB ... DEDUP k<i> for i < keys in one pipeline, sent once all the threads
    at `barrier` are ready; the IDs answered."""
    client = node.client()
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(keys):
            pipe.execute_command("ADDJOB", "q", f"b{i}", TIMEOUT, "REPLICATE", "2",
                                 "DEDUP", f"k{i}")
        if barrier is not None:
            barrier.wait(timeout=30)
        return pipe.execute()
    finally:
        client.close()


def test_cluster_pipelined_keys_over_nodes(three: list[DisqProcess]) -> None:
    """Many keys through every node in turn: one job per key in the cluster."""
    results = [pipelined_adds(node, 300) for node in three]
    assert all(len({r[i] for r in results}) == 1 for i in range(300))
    wait_for(lambda: total_qlen(three) == 300, timeout=10, message="300 queued jobs")


def test_cluster_pipelined_same_key_joins_the_waiting_add(three: list[DisqProcess]) -> None:
    """Each key five times in one pipeline to one node: the later ADDJOBs of a key come
    while its job waits for its copies, and answer that job's ID."""
    client = three[0].client()
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(200):
            pipe.execute_command("ADDJOB", "q", f"b{i}", TIMEOUT, "REPLICATE", "2",
                                 "DEDUP", f"k{i % 40}")
        ids = pipe.execute()
    finally:
        client.close()
    assert all(ids[i] == ids[i % 40] for i in range(200)) and len(set(ids)) == 40
    wait_for(lambda: total_qlen(three) == 40, timeout=10, message="40 queued jobs")


def test_cluster_same_keys_on_every_node_at_once(three: list[DisqProcess]) -> None:
    """The same keys sent to the three nodes at the same moment: one job per key."""
    results: list[list[bytes]] = []
    barrier = threading.Barrier(3)
    threads = [threading.Thread(target=lambda n=n: results.append(
        pipelined_adds(n, 300, barrier))) for n in three]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 3
    for i in range(300):
        assert len({r[i] for r in results}) == 1, f"k{i} has several jobs"
    wait_for(lambda: total_qlen(three) == 300, timeout=10, message="300 queued jobs")


def test_cluster_node_restarted_asks_the_peers_it_has_not_reached_yet(
        three: list[DisqProcess]) -> None:
    """Keys b keeps alone (REPLICATE 1: b asked, then added); c is killed and
    restarted, and ADDJOBs of those keys reach it at once, before its links to a and
    b are up: it asks b once its link is (before: it asked no one and added them)."""
    a, b, c = three
    ids = {f"k{i}": add(b, f"k{i}", "body", "REPLICATE", "1") for i in range(20)}
    c.kill()
    c.start()
    sock = c.connect()  # right away: one pipeline
    try:
        sock.sendall(b"".join(b"ADDJOB q again 5000 REPLICATE 1 DEDUP %s\r\n" % key.encode()
                              for key in ids))
        replies = b""
        while replies.count(b"\r\n") < len(ids):
            data = sock.recv(65536)
            assert data, "connection closed"
            replies += data
    finally:
        sock.close()
    for key, line in zip(ids, replies.split(b"\r\n"), strict=False):
        if not line.startswith(b"-NOREPL"):  # (try again: a peer not reached in 2 s)
            assert line == b"+" + ids[key].encode(), (key, line)
        assert add_until_answered(c, key) == ids[key]
    assert total_qlen(three) == len(ids)


def jobs_everywhere(nodes: list[DisqProcess]) -> set[bytes]:
    """The IDs of every job the nodes hold (queued, active or waiting for copies)."""
    return {job_id for n in nodes for job_id in call(n, "JSCAN", "BUSYLOOP")[1]}  # type: ignore[index]


def add_until_answered(node: DisqProcess, key: str) -> str:
    """ADDJOB ... DEDUP key, sent again after -NOREPL (a DEDUP_QUERY may wait for a
    node just killed until the node sees its link gone) as a client would."""
    def attempt() -> str | None:
        try:
            return add(node, key, key)
        except redis.ResponseError as exc:
            if str(exc).startswith("NOREPL"):
                return None
            raise
    return wait_for(attempt, timeout=30, interval=0.1, message=f"an ID for {key}")


def test_cluster_retry_meets_the_copy_left_by_an_origin_killed_before_answering(
        make_cluster: Callable[..., list[DisqProcess]]) -> None:
    """REPLICATE 3 of 5: the copies check the key. The origin is killed while the copies
    of DEDUP ADDJOBs it has not answered are leaving, and of the two nodes each job's
    copies go to first only `holder` took its copy (the other nodes have the queue
    paused in input and drop theirs, as a node the origin died before writing to).
    The client sends each key again, to the other of the two nodes or to one out of
    them: it gets the job `holder` keeps, and no second job is added anywhere."""
    nodes = make_cluster(5)
    origin, holder, rest = nodes[0], nodes[1], nodes[2:]
    by_id = {myid(n): n for n in nodes}
    peers = [node_id for node_id, n in by_id.items() if n is not origin]

    def first_two(key: str) -> list[DisqProcess]:
        order = key_order(scoped_key(b"q", key.encode()), peers)  # (as ADDJOB q keys it)
        return [by_id[node_id] for node_id in order[:2]]

    retries: list[tuple[str, DisqProcess]] = []  # (key, the node it is sent again to)
    names = (f"key-{i}" for i in itertools.count())
    for retrier in rest:
        for retrier_first in (True, False):  # the copy that never arrived was its, or not
            for _ in range(3):
                key = next(k for k in names if holder in first_two(k)
                           and (retrier in first_two(k)) == retrier_first)
                retries.append((key, retrier))
    for n in rest:
        assert call(n, "PAUSE", "q", "in") == b"in"  # (on this node only)
    sock = origin.connect()  # ADDJOBs never answered: only `holder` confirms
    try:
        sock.sendall(b"".join(
            b"ADDJOB q %s 60000 REPLICATE 3 DEDUP %s\r\n" % (key.encode(), key.encode())
            for key, _ in retries))
        wait_for(lambda: len(jobs_everywhere([holder])) == len(retries), timeout=10,
                 message="holder to take a copy of each job")
        origin.kill()
    finally:
        sock.close()
    live = nodes[1:]
    left = {}  # body (= key) -> the ID of the job whose copy holder keeps
    for job_id in jobs_everywhere([holder]):
        shown = call(holder, "SHOW", job_id)
        assert isinstance(shown, list)
        left[dict(zip(shown[::2], shown[1::2], strict=True))[b"body"]] = job_id
    assert sorted(left) == sorted(key.encode() for key, _ in retries)
    for n in rest:
        assert call(n, "PAUSE", "q", "none") == b"none"
    for key, retrier in retries:
        assert add_until_answered(retrier, key) == left[key.encode()].decode(), key
    assert jobs_everywhere(live) == set(left.values())  # no second job for any key


def add_same_keys(node: DisqProcess, keys: list[str], barrier: threading.Barrier) -> list[str]:
    """ADDJOB q <key> ... REPLICATE 3 DEDUP <key> for every key in one pipeline, sent
    once every writer is ready; a failed ADDJOB is sent again (as a producer does)
    until it has an ID. The IDs answered, in the order of `keys`."""
    client = node.client()
    try:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command("ADDJOB", "q", key, TIMEOUT, "REPLICATE", "3", "DEDUP", key)
        barrier.wait(timeout=30)
        replies = pipe.execute(raise_on_error=False)
        ids = []
        for key, reply in zip(keys, replies, strict=True):
            for _ in range(20):
                if isinstance(reply, bytes):
                    break
                reply = client.execute_command("ADDJOB", "q", key, TIMEOUT, "REPLICATE", "3",
                                               "DEDUP", key)
            assert isinstance(reply, bytes), (key, reply)
            ids.append(reply.decode())
        return ids
    finally:
        client.close()


def write_at_once(nodes: list[DisqProcess], keys: list[str]) -> dict[int, list[str]]:
    """`add_same_keys` through every node at once: node index -> the IDs answered."""
    results: dict[int, list[str]] = {}
    barrier = threading.Barrier(len(nodes))

    def write(index: int) -> None:
        results[index] = add_same_keys(nodes[index], keys, barrier)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(nodes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_cluster_same_keys_written_at_once_on_every_node_name_one_live_job(
        three: list[DisqProcess]) -> None:
    """The flaky Spark test's case: the same keys written at the same moment
    through the three nodes, REPLICATE 3 (a majority: the copies check the keys). A
    node must not answer a key's job before its origin's ADDJOB succeeded (it may
    still delete it: a copy refused elsewhere). Every ADDJOB of a key gets the ID of
    the key's one job, and that job exists."""
    for round_ in range(8):
        keys = [f"r{round_}-k{i}" for i in range(100)]
        results = write_at_once(three, keys)
        assert len(results) == 3, "a writer failed"
        answered = {key: {results[i][k] for i in range(3)} for k, key in enumerate(keys)}
        jobs = {job_id.decode() for job_id in jobs_everywhere(three)}
        two = sorted(key for key, ids in answered.items() if len(ids) > 1)
        missing = sorted(key for key, ids in answered.items() if not ids <= jobs)
        assert not two and not missing, (
            f"round {round_}, of {len(keys)} keys: {len(two)} answered with several IDs "
            f"({two[:3]}...), {len(missing)} with a job that exists nowhere ({missing[:3]}...)")
        assert jobs == {job_id for ids in answered.values() for job_id in ids}, (
            f"round {round_}: jobs no ADDJOB was answered")
        for job_id in jobs:  # (acked: the next round's check lists its jobs only)
            call(three[0], "ACKJOB", job_id)
        wait_for(lambda: not jobs_everywhere(three), timeout=10, interval=0.05,
                 message="the round's jobs to be collected")
