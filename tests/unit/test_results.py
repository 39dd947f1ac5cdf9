"""The results a node keeps (results.py): the first result wins, expiry by TTL, eviction
oldest first, and watchers told after the operation that ended a job."""

from __future__ import annotations

from collections.abc import Callable

from disq.results import ACKED_END, DEAD_END, END_FOOTPRINT, Ends, JobEnd

from .test_replication import add_job, cluster

JOB_A = b"D-aaaaaaaa-" + b"a" * 24 + b"-05a1"
JOB_B = b"D-bbbbbbbb-" + b"b" * 24 + b"-05a1"
JOB_C = b"D-cccccccc-" + b"c" * 24 + b"-05a1"


def test_the_first_result_stays_and_others_are_counted() -> None:
    ends = Ends()
    assert ends.keep(JOB_A, ACKED_END, b"first", 1000, now=0)
    assert not ends.keep(JOB_A, ACKED_END, b"second", 1000, now=10)
    end = ends.get(JOB_A, now=10)
    assert end is not None and (end.how, end.data, end.repeats) == (ACKED_END, b"first", 1)
    assert ends.repeats == 1
    assert ends.bytes == END_FOOTPRINT + len(JOB_A) + len(b"first")


def test_a_ttl_of_zero_keeps_nothing() -> None:
    ends = Ends()
    assert not ends.keep(JOB_A, ACKED_END, b"r", 0, now=0)
    assert len(ends) == 0 and ends.bytes == 0


def test_results_expire_in_their_time_whatever_their_ttl() -> None:
    ends = Ends()
    ends.keep(JOB_A, ACKED_END, b"a", 1000, now=0)
    ends.keep(JOB_B, DEAD_END, b"b", 100, now=0)
    ends.keep(JOB_C, ACKED_END, None, 1000, now=500)
    assert ends.get(JOB_B, now=100) is None  # past its time: gone for readers at once
    assert ends.expire(now=100) == 1
    assert ends.expire(now=999) == 0
    assert ends.expire(now=1000) == 1
    assert [*ends.kept] == [JOB_C]
    assert ends.bytes == END_FOOTPRINT + len(JOB_C)
    assert ends.expired == 2


def test_an_expired_result_may_be_kept_again() -> None:
    ends = Ends()
    ends.keep(JOB_A, ACKED_END, b"old", 100, now=0)
    assert ends.keep(JOB_A, ACKED_END, b"new", 100, now=200)
    assert ends.get(JOB_A, now=250).data == b"new"  # type: ignore[union-attr]
    assert ends.expire(now=250) == 0  # the old entry is stale: skipped, not the new one
    assert ends.get(JOB_A, now=250) is not None
    assert ends.bytes == END_FOOTPRINT + len(JOB_A) + 3


def test_eviction_takes_the_oldest_first_across_ttls() -> None:
    ends = Ends()
    ends.keep(JOB_A, ACKED_END, b"x" * 100, 10_000, now=0)
    ends.keep(JOB_B, ACKED_END, b"x" * 100, 100, now=10)
    ends.keep(JOB_C, ACKED_END, b"x" * 100, 10_000, now=20)
    one = END_FOOTPRINT + len(JOB_A) + 100
    assert ends.evict(2 * one) == 1
    assert JOB_A not in ends.kept
    assert ends.evict(one) == 1
    assert [*ends.kept] == [JOB_C]
    assert ends.evicted == 2


class Recorder:
    def __init__(self) -> None:
        self.told: list[bytes] = []
        self.gone: list[bytes] = []

    def job_ended(self, job_id: bytes) -> None:
        self.told.append(job_id)

    def job_left(self, job_id: bytes) -> None:
        self.gone.append(job_id)


def test_watchers_are_told_after_the_operation_once() -> None:
    ends = Ends()
    scheduled: list[int] = []
    ends.on_ready = lambda: scheduled.append(1)
    first, second = Recorder(), Recorder()
    ends.watch(JOB_A, first)
    ends.watch(JOB_A, second)
    ends.watch(JOB_A, first)  # once each
    ends.watch(JOB_B, first)
    ends.unwatch(JOB_B, first)
    assert JOB_B not in ends.watchers
    ends.ended(JOB_A)
    ends.ended(JOB_C)  # nobody watches it: nothing to do
    assert first.told == [] and scheduled == [1]  # not inside the operation
    ends.serve_ready()
    assert first.told == [JOB_A] and second.told == [JOB_A]
    assert not ends.watchers
    ends.ended(JOB_A)
    ends.serve_ready()
    assert first.told == [JOB_A]


def test_a_job_that_leaves_is_told_as_gone_unless_it_ended_first() -> None:
    """A job moved, expired or deleted here is told as gone (its watchers look for
    it elsewhere), after the operation; one acked and deleted in one operation (an
    ACK with no other holder) is told as ended, once."""
    ends = Ends()
    watcher = Recorder()
    for job_id in (JOB_A, JOB_B):
        ends.watch(job_id, watcher)
    ends.left(JOB_A)
    ends.ended(JOB_B)
    ends.left(JOB_B)
    ends.left(JOB_C)  # nobody watches it
    assert watcher.gone == [] and watcher.told == []
    ends.serve_ready()
    assert watcher.gone == [JOB_A] and watcher.told == [JOB_B]
    assert not ends.watchers


def test_a_policy_s_result_ttl_travels_and_older_policies_read_as_before() -> None:
    from disq.policies import QueuePolicy

    policy = QueuePolicy(b"q", result_ttl=60, version=5, origin="n")
    wire = policy.to_wire()
    assert len(wire) == 10 and QueuePolicy.from_wire(wire).result_ttl == 60  # type: ignore[union-attr]
    plain = QueuePolicy(b"q", rate=2.0).to_wire()
    assert len(plain) == 9  # as nodes without RESULT-TTL send and read it
    assert QueuePolicy.from_wire(plain).result_ttl == -1  # type: ignore[union-attr]
    assert QueuePolicy.from_wire([*plain, -2]) is None
    assert QueuePolicy.from_wire([*plain, "60"]) is None


def test_a_peer_s_result_keeps_its_time_left_in_its_ttl_s_line() -> None:
    """Results from peers come with what is left of their time: each joins its TTL's
    line (not one line per time left), and expires at its own time."""
    ends = Ends()
    for i, left in enumerate((900, 500, 700)):
        job_id = b"D-%08d-" % i + b"x" * 24 + b"-05a1"
        assert ends.keep(job_id, ACKED_END, b"r", 1000, now=0, left_ms=left)
    assert len(ends._expiring) == 1  # noqa: SLF001 (the one line of TTL 1000)
    assert [ends.get(j, now=600) is not None for j in ends.kept] == [True, False, True]
    assert ends.expire(now=1000) == 3


class _Asker:
    """A WAITJOB's side of an ENDS_ASK (replication/ends.py's RemoteWait)."""

    def __init__(self) -> None:
        self.entries: list[object] = []
        self.answers = 0
        self.gone: list[bytes] = []
        self.unmentioned: list[bytes] = []

    def heard(self, entry: object) -> None:
        self.entries.append(entry)

    def heard_progress(self, job_id: bytes, progress: int) -> None:
        self.entries.append((job_id, progress))

    def answered(self, ask_id: int, unmentioned: list[bytes]) -> None:
        self.answers += 1
        self.unmentioned = unmentioned

    def left(self, job_id: bytes) -> None:
        self.gone.append(job_id)


async def test_nodes_that_know_none_of_the_jobs_answer_all_the_same() -> None:
    """ENDS with no entry is an answer: the ask is answered once every peer said so,
    not at its timeout."""
    net, (a, _, _) = cluster(3)
    asker = _Asker()
    ask_id = a.repl.ends.ask(asker, [JOB_A])  # type: ignore[arg-type]
    net.pump()
    assert asker.answers == 1 and asker.entries == [] and asker.unmentioned == [JOB_A]
    a.repl.ends.forget(ask_id)


async def test_a_holder_tells_the_asker_when_a_watched_job_leaves_it() -> None:
    """A job a holder watches for an asker and that leaves it without ending (DELJOB
    here; federation, expiry, eviction alike) is told with ENDS_GONE, so that the
    asker looks for it elsewhere; a job that ends is told with ENDS as before."""
    net, (a, b) = cluster(2)
    gone, acked = add_job(b, repl=1)[0], add_job(b, repl=1)[0]
    asker = _Asker()
    ask_id = a.repl.ends.ask(asker, [gone.id, acked.id])  # type: ignore[arg-type]
    net.pump()
    assert sorted(e[1] for e in asker.entries) == [b"queued", b"queued"]  # type: ignore[index]
    assert b.repl.ends.watched == 2
    b.node.delete([gone.id])
    b.node.ack([acked.id], b"done")
    b.node.ends.serve_ready()
    net.pump()
    assert asker.gone == [gone.id]
    assert asker.entries[-1] == (acked.id, b"acked", b"done", b"q")
    assert b.repl.ends.watched == 0 and not b.repl.ends.watches
    a.repl.ends.forget(ask_id)


async def test_a_watched_job_s_end_is_no_answer_to_a_new_round() -> None:
    """A holder's ENDS for a watched job that ended crosses a new round of the ask:
    it is not that holder's answer to the round (which would end the round without
    its other jobs, as if no node knew them: unknown). Answers echo their round."""
    net, (a, b) = cluster(2)
    ended, alive = add_job(b, repl=1)[0], add_job(b, repl=1)[0]
    asker = _Asker()
    ask_id = a.repl.ends.ask(asker, [ended.id, alive.id])  # type: ignore[arg-type]
    net.pump()
    assert asker.answers == 1 and asker.unmentioned == []
    b.node.ack([ended.id])
    b.node.ends.serve_ready()  # its ENDS leaves first...
    a.repl.ends._renew(ask_id)  # noqa: SLF001 (...then a round starts, a link back)
    net.pump()
    assert asker.answers == 2 and asker.unmentioned == []  # the round ended by b's answer
    a.repl.ends.forget(ask_id)


def test_the_newest_results_come_first_and_past_ones_never() -> None:
    ends = Ends()
    ends.keep(JOB_A, ACKED_END, b"a", 1000, now=0)
    ends.keep(JOB_B, ACKED_END, b"b", 100, now=10)
    ends.keep(JOB_C, ACKED_END, b"c", 1000, now=20)

    def newest(now: int, limit: int = 10, walk: int = 10,
               wanted: Callable[[JobEnd], bool] = lambda end: True) -> tuple[list[bytes], bool]:
        taken, complete = ends.newest(now, wanted, limit, walk)
        return [end.job_id for end in taken], complete

    assert newest(now=50) == ([JOB_C, JOB_B, JOB_A], True)
    assert newest(now=110) == ([JOB_C, JOB_A], True)  # B's time is up
    assert [end.kept_at for end in ends.newest(110, lambda end: True, 10, 10)[0]] == [20, 0]
    assert newest(now=50, limit=2) == ([JOB_C, JOB_B], True)
    assert newest(now=50, wanted=lambda end: end.data != b"b") == ([JOB_C, JOB_A], True)
    # the walk is bounded: what it did not reach may be wanted (not complete)
    assert newest(now=50, walk=2, wanted=lambda end: end.data == b"a") == ([], False)
    assert newest(now=50, walk=3, wanted=lambda end: end.data == b"a") == ([JOB_A], True)
    assert newest(now=110, walk=2) == ([JOB_C, JOB_A], True)  # (a past one is not walked)
    # kept again once past its time: the newest
    assert ends.keep(JOB_B, ACKED_END, b"again", 100, now=200)
    assert newest(now=200) == ([JOB_B, JOB_C, JOB_A], True)
