"""WAITJOB follows a job that leaves the node it was watched on without ending there:
federation moves it to a node whose consumer waits, its TTL runs out, DELJOB. A
WAITJOB without TIMEOUT must answer: the end where the job went, or `unknown` once no
reachable node knows it (expiry and DELJOB are neither acked nor dead). Real nodes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from jobutil import NULL_BULK, RawClient
from support import DisqProcess, form_cluster, wait_for
from test_jobset import holders
from test_results import waitjob_in_thread, watched

# The waits' own connections give up after 10 s (RawClient): every WAITJOB below has no
# TIMEOUT, so a wait that is not told hangs and the test fails at its join.
JOIN_S = 15


def cluster(start_node: Callable[..., DisqProcess], size: int = 3) -> list[DisqProcess]:
    return form_cluster([start_node("--cluster-node-timeout", "1000") for _ in range(size)])


def queued_on(node: DisqProcess, job_id: bytes) -> bool:
    with RawClient(node.port) as client:
        shown = client.show(job_id)
    return shown is not None and shown["state"] == b"queued"


def test_a_job_deleted_or_expired_on_its_only_node_is_unknown(
        start_node: Callable[..., DisqProcess]) -> None:
    node = start_node()
    with RawClient(node.port) as c:
        deleted = c.add("q", "a")
        expiring = c.add("q", "b", "TTL", 2, "RETRY", 1)
        waits = [waitjob_in_thread(node, deleted), waitjob_in_thread(node, expiring)]
        wait_for(lambda: watched(c) == 2, 5, message="both jobs watched")
        assert c.call("DELJOB", deleted) == 1
        waits[0][0].join(JOIN_S)
        assert waits[0][1] == [[[deleted, b"unknown", NULL_BULK]]]
        waits[1][0].join(JOIN_S)  # its TTL: 1 to 2 s
        assert waits[1][1] == [[[expiring, b"unknown", NULL_BULK]]]
        assert watched(c) == 0


def test_a_fastack_ends_the_wait_as_acked(start_node: Callable[..., DisqProcess]) -> None:
    """FASTACK deletes the job at once: its waits are told it was acked, not gone."""
    node = start_node()
    with RawClient(node.port) as c:
        job_id = c.add("q", "a")
        waiting, answers = waitjob_in_thread(node, job_id)
        wait_for(lambda: watched(c) == 1, 5, message="the job watched")
        assert c.call("FASTACK", job_id) == 1
        waiting.join(JOIN_S)
        assert answers == [[[job_id, b"acked", NULL_BULK]]]


@pytest.mark.parametrize("retry", [0, 60])
def test_a_wait_follows_a_job_federation_moves(start_node: Callable[..., DisqProcess],
                                               retry: int) -> None:
    """A RETRY 0 job leaves its node entirely when federation moves it to a node whose
    consumer waits: the wait on its old node, and one on a third node that asked the
    old node, follow it there and answer its result. (A RETRY 60 job keeps its copy
    on the old node, which hears of the ACK.)"""
    a, b, c = cluster(start_node)
    with RawClient(a.port) as on_a:
        job_id = on_a.add("q", "work", "REPLICATE", 1, "RETRY", retry)
        waits = [waitjob_in_thread(a, job_id), waitjob_in_thread(c, job_id)]
        # watched on a: for its own wait and for c's ask
        wait_for(lambda: on_a.call("WAITJOB", "TIMEOUT", 1, job_id)[0][1] == b"queued"
                 and watched(on_a) == 1, 5, message="the job watched on a")
        with RawClient(c.port) as on_c:
            wait_for(lambda: on_c.call("WAITJOB", "TIMEOUT", 300, job_id)[0][1] == b"queued",
                     5, message="c heard of the job")
        with RawClient(b.port) as on_b:
            assert on_b.call("GETJOB", "TIMEOUT", 5000, "FROM", "q") == [[b"q", job_id, b"work"]]
            if retry == 0:
                assert on_a.call("SHOW", job_id) is NULL_BULK  # it left a entirely
                wait_for(lambda: watched(on_b) == 1, 5, message="the waits follow it to b")
                assert all(thread.is_alive() for thread, _ in waits)
                for n in (a, c):  # both asked b: its state there, not a stale one
                    with RawClient(n.port) as client:
                        assert client.call("WAITJOB", "TIMEOUT", 300, job_id
                                           ) == [[job_id, b"active", NULL_BULK]]
            assert on_b.call("ACKJOB", job_id, "RESULT", "moved") == 1
    for thread, answers in waits:
        thread.join(JOIN_S)
        assert answers == [[[job_id, b"acked", b"moved"]]]


def test_a_wait_follows_a_deleted_copy_to_the_other_holder(
        start_node: Callable[..., DisqProcess]) -> None:
    """DELJOB deletes one holder's copy (as in Disque): a wait there follows the job to
    its other holder, and so does a wait on a node that asked the deleted copy."""
    nodes = cluster(start_node)
    with RawClient(nodes[0].port) as client:
        job_id = client.add("q", "work", "REPLICATE", 2, "RETRY", 60)
    # the copy deleted: one not queued (active: queued by its other holder)
    second, first = sorted(holders(nodes, job_id), key=lambda n: queued_on(n, job_id),
                           reverse=True)
    [elsewhere] = [n for n in nodes if n not in (first, second)]
    waits = [waitjob_in_thread(first, job_id), waitjob_in_thread(elsewhere, job_id)]
    with RawClient(first.port) as on_first, RawClient(second.port) as on_second:
        # watched on both holders (for elsewhere's ask), on first for its own wait too
        wait_for(lambda: watched(on_first) == 1 and watched(on_second) == 1, 5,
                 message="the job watched on its holders")
        with RawClient(elsewhere.port) as on_elsewhere:
            wait_for(lambda: on_elsewhere.call("WAITJOB", "TIMEOUT", 300, job_id)[0][1]
                     in (b"queued", b"active"), 5, message="elsewhere heard of the job")
        assert on_first.call("DELJOB", job_id) == 1
        assert on_first.call("WAITJOB", "TIMEOUT", 300, job_id
                             ) == [[job_id, b"queued", NULL_BULK]]  # second's copy
        assert all(thread.is_alive() for thread, _ in waits)
        assert on_second.call("GETJOB", "NOHANG", "FROM", "q") == [[b"q", job_id, b"work"]]
        assert on_second.call("ACKJOB", job_id, "RESULT", "still done") == 1
    for thread, answers in waits:
        thread.join(JOIN_S)
        assert answers == [[[job_id, b"acked", b"still done"]]]


def test_a_job_expired_on_all_its_holders_is_unknown_everywhere(
        start_node: Callable[..., DisqProcess]) -> None:
    """Its TTL runs out on each holder (at about the same time, each by its own
    timer): the waits on a holder and on a node that asked answer `unknown` once no
    node knows it, not the state it had."""
    nodes = cluster(start_node)
    with RawClient(nodes[0].port) as client:
        job_id = client.add("q", "work", "REPLICATE", 2, "RETRY", 1, "TTL", 2)
    owners = holders(nodes, job_id)
    [elsewhere] = [n for n in nodes if n not in owners]
    waits = [waitjob_in_thread(owners[0], job_id), waitjob_in_thread(elsewhere, job_id)]
    for thread, answers in waits:
        thread.join(JOIN_S)
        assert answers == [[[job_id, b"unknown", NULL_BULK]]]
    for n in nodes:  # nothing left watched for the waits
        with RawClient(n.port) as client:
            wait_for(lambda client=client: watched(client) == 0, 5, message="no watch left")


def test_a_job_whose_only_holder_came_back_empty_is_unknown(
        start_node: Callable[..., DisqProcess]) -> None:
    """kill -9 of the one holder, restarted without an AOF: the job is gone. A WAITJOB
    on another node that heard of it asks every node again once the holder's link is
    back, and none knows it: `unknown`, not a wait for ever."""
    nodes = cluster(start_node)
    holder, elsewhere, _ = nodes
    with RawClient(holder.port) as client:
        job_id = client.add("q", "work", "REPLICATE", 1, "RETRY", 60)
    assert holders(nodes, job_id) == [holder]
    waiting, answers = waitjob_in_thread(elsewhere, job_id)
    with RawClient(elsewhere.port) as client:
        wait_for(lambda: client.call("WAITJOB", "TIMEOUT", 300, job_id)[0][1] == b"queued",
                 5, message="elsewhere heard of the job")
    holder.kill()
    holder.start()
    waiting.join(JOIN_S)
    assert answers == [[[job_id, b"unknown", NULL_BULK]]]
