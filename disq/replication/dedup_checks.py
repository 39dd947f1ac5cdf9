"""`ADDJOB ... DEDUP <key>` across the cluster (a disq extension, which Disque clients
never send): if a job was added with that key in the cluster and has not expired,
ADDJOB answers that job's ID and adds nothing.

`ADDJOB ... UNIQUE <key>` (a UNIQUE key: `dedup_table.unique_key`) is checked the same
way, by the same messages; the one difference is in the table: a node names a UNIQUE
key's job (to its clients, in DEDUP_REPLY, when refusing a copy) only while it holds
that job not ended (`DedupTable.peek`), so a key whose job was acked, became a dead
letter, was deleted or expired is free on each node once that node learned it.

A key is scoped to the ADDJOB's queue (`dedup.scoped_key`: the same key in two queues
names two jobs): every key below, in the tables, DEDUP_QUERY, DEDUP_REPLY,
DEDUP_FORGET and REPLJOB, is the scoped key. A copy whose key is not scoped to the
copy's own queue carries no key, and a DEDUP_QUERY item whose key is not one a node
could make is skipped.

Where a key is known: every node holding a copy of the job records it in its
`node.dedup` table (the origin once the ADDJOB succeeded, the others as the REPLJOB
carrying the key arrives), so with REPLICATE-1 of those nodes down one still knows.

Settled: a node answers a key's job (to its clients' ADDJOBs, to DEDUP_QUERY) only once
the job's ADDJOB succeeded. Until then its origin may still delete the job everywhere
(a copy refused elsewhere, its timeout) and the IDs answered would name nothing. So a
copy of an ADDJOB that waits for its copies carries the ms that ADDJOB may still fail,
and its holder records the key *unsettled* (`DedupTable.record_unsettled`): it refuses
other copies of the key as for any known key, answers DEDUP_QUERY "busy", and an
ADDJOB of the key there asks every node (the origin answers "busy" while it waits,
then the job). The entry is settled (`vouches`) by the origin's DEDUP_SETTLED once its
ADDJOB succeeded (batched per peer and loop turn, as GOTJOB), by a DEDUP_REPLY naming
the job, once the origin is down (PFAIL/FAIL: it deletes nothing any more, and its
orphan copy is a job that exists, which a retry must find), or SETTLE_SLACK_MS after
the ADDJOB's deadline (a DEDUP_SETTLED lost with a link, an origin restarted at once);
a failed ADDJOB's DEDUP_FORGET drops it. Copies of an ASYNC ADDJOB (answered before
they leave, never deleted after) are settled at once. The origin itself answers the
key of a job still waiting for its copies to no one but the ADDJOBs that join it.

Checked by the copies (the usual case): when the job's REPLICATE is more than half of
the nodes the origin knows, any two sets of REPLICATE holders share a node, so the
copies themselves can check the key. The origin adds the job at once, records the key
for it (another ADDJOB of the key there joins the waiting one: `Copies.join`), and
its REPLJOB copies ask their receivers to check: a node that knows the key for another
job (one it is adding, too), is checking it itself, keeps a reservation for it (see
below), or may have lost keys (it restarted within the job's TTL, `node.dedup_since`)
refuses the copy (DEDUP_CONFLICT). On a refusal the origin deletes the job everywhere
and asks every node, as follows (`checked_add_failed`). Of two such ADDJOBs of one
key, the second to reach their shared node is refused; if each is refused somewhere,
both ask. This path costs a waiting ADDJOB nothing but the key's entry: no object of
its own, which matters at 100k ADDJOBs a second.

Where those copies go, with more than REPLICATE+1 nodes: the first REPLICATE-1
reachable peers in an order drawn from the key (`targets.key_order`, rendezvous hashing), and
each node a waiting ADDJOB tries more is the next in that order (with fewer nodes a
retry needs every live node anyway). An origin killed while the copies of an ADDJOB it never
answered were leaving may leave fewer than REPLICATE copies, which are delivered as
any copy is; the majority argument above says nothing of them, but they sit on the
first nodes of the key's order (but the origin and what it could not reach), where
a retry's copies go too (the dead origin, if still counted reachable, makes the retry
try the next node), so they meet and refuse them and the retry finds their job. A
waiting ADDJOB is answered only once its first targets in that order confirmed
(`copies.first_confirmed`): confirmations from the nodes tried next do not count, the
ADDJOB asks every node instead, so a holder slow to refuse cannot be overtaken. Still
open: nodes that disagree on who is reachable or takes copies (a node first in the
order that the killed origin could not reach, or whose queue was paused), or a node
holding such a copy that is down when the retry runs (back with its AOF later).

Asking every node (when the copies cannot check, or they refused): a node that does
not know a key asks every peer it can reach (DEDUP_QUERY, the keys of one loop turn in
one message per peer, answered by one DEDUP_REPLY), leaving ones too (they take no
copies but keep their jobs until acked), and adds the job only once they all said they
do not know it. A peer that does not answer within DEDUP_TIMEOUT_MS fails the
ADDJOB with -NOREPL (nothing was added: the client tries again, and a dead peer soon
is not asked: see "Links" in dedup_queries.py, the asking side, which says which peers
are asked and waited for). An asked node that does not know the key keeps a
reservation for the job's TTL: the asking node may add the job on other nodes, so a
later ADDJOB of the key must not be checked by copies that include this node alone.
Concurrent ADDJOBs with one key on one node share the first one's outcome.

One key asked for at the same time by two nodes: a node answers "busy" (ms left = -1)
for a key it is adding, and for a key it is checking itself when it goes first by
`wins` (an order of the two node IDs drawn from the key); a node that gets "busy", or
that answered a node going first, checks again RECHECK_MS later instead of adding,
until it finds the other node's job (or that node failed and it may add), for at most
MAX_WAIT_MS.

Late copies (kill -9 alone gave a key two jobs this way): the copies of an ADDJOB
that asked every node do not check the key, and may arrive after their origin died,
after another node asked the same nodes and was told "no" (they were on the wire: a
kernel buffer, a proxy, a link slower than the asker's). Origin A (restarted within
the key's TTL, or REPLICATE not a majority) asks b..e, all reserve the key and say
no; A adds J1, its REPLJOBs leave for b and c, and A is killed. The client retries on
d, which holds A's reservation and so asks b, c, e: no copy has arrived, all say no,
d adds J2. Then J1's copies reach b and c: stored as orphan copies, delivered, a
second job for the key. So a reservation names the node that asked last, and a copy
that does not check its key is refused (DEDUP_CONFLICT) by a node that holds a
reservation another node asked for since its origin did, or knows the key for
another job: a node that told another asker "no" after the origin's question must
not take the origin's copy. Each node asked by the retry then either had the copy
first (it answers "busy", then the job, once the origin is known down) or refuses it.
The origin, if alive, deletes the job and asks again, as after a refused checked
copy. On the usual path the origin is the last to ask every node, and nothing changes.

An ADDJOB that fails after its copies were sent (replication timeout, job expired,
refused copies) sends DEDUP_FORGET so that the holders drop the key with the job.

Not covered (as for any check across nodes): nodes that cannot reach each other
while both add the key, and a node whose keys were dropped by DEBUG FLUSHALL; a holder
that counts the origin down (PFAIL) while the origin is up and its ADDJOB still fails
(a partition), or whose DEDUP_FORGET comes more than SETTLE_SLACK_MS after the ADDJOB's
deadline, may answer a job that is then deleted.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..dedup_table import RESERVED, scoped_to, well_scoped
from ..errors import DisqError, fixed
from ..job import PROVISIONAL, WAIT_REPL, Job
from ..node import now_ms
from ..outcomes import Added, OnAdded
from ..requests import DEFAULT_TTL, AddJob
from .dedup_queries import BUSY, DedupQueries, KeyQuery
from .wire import COPY_FIELDS, MAX_TTL_MS

if TYPE_CHECKING:
    from .copies import Copies

log = logging.getLogger("disq")

# An unsettled copy (see "Settled") is vouched for this long after its ADDJOB's
# deadline, if no DEDUP_FORGET came: the origin notices the deadline at its next tick,
# then its DELJOB and DEDUP_FORGET take the bus.
SETTLE_SLACK_MS: Final = 2000
# What a waiting ADDJOB gets when a copy was refused (never sent to a client).
CONFLICT: Final = fixed("CONFLICT", "CONFLICT", "a copy refused the DEDUP key")
REFUSED: Final = RESERVED  # copy_key's "refused" (b"", never a key)

Answer = OnAdded

class Replies:
    """One reply for several ADDJOBs (of one DEDUP key): see `joined`."""

    __slots__ = ("answers",)

    def __init__(self, first: Answer, more: Answer) -> None:
        self.answers = [first, more]

    def __call__(self, outcome: Added) -> None:
        for answer in self.answers:
            answer(outcome)


def joined(answer: Answer, more: Answer) -> Answer:
    """What answers both `answer` and `more` (another ADDJOB of the same key)."""
    if type(answer) is Replies:
        answer.answers.append(more)
        return answer
    return Replies(answer, more)


class _Adding:
    """A key being asked for, then added here: the ADDJOBs waiting for its outcome
    (`answer`, several once `joined`), how to add its job, and the job once added.
    `done` is the job's replication callback."""

    __slots__ = ("dedup", "key", "request", "job", "answer")

    def __init__(self, dedup: Dedup, key: bytes, request: AddJob, answer: Answer) -> None:
        self.dedup = dedup
        self.key = key
        self.request = request
        self.job: Job | None = None
        self.answer = answer

    def done(self, outcome: Added) -> None:
        """The job's ADDJOB is settled (`Copies.wait`; `job` is set by then)."""
        job = self.job
        assert job is not None
        dedup = self.dedup
        if isinstance(outcome, DisqError):
            if job.nodes_delivered:  # its copies had the key
                dedup.bus.broadcast(m.DEDUP_FORGET, self.key, job.id,
                                    node_ids=job.nodes_delivered)
            if type(outcome) is CONFLICT and dedup.pending.get(self.key) is self:
                # A copy was refused (see "Late copies"): the job is deleted
                # everywhere; ask again, as a checked add does after a refusal.
                dedup.conflicts += 1
                self.job = None
                dedup.queries.ask(self.key, KeyQuery(self.request.ttl or DEFAULT_TTL, now_ms()))
                return
            dedup.finish(self.key, outcome)
            return
        dedup.node.dedup.record(self.key, job.id, job.etime)
        if dedup.pending.get(self.key) is self:
            del dedup.pending[self.key]
        self.answer(outcome)

    def count(self) -> int:
        """How many ADDJOBs wait for the outcome."""
        return len(self.answer.answers) if type(self.answer) is Replies else 1


def wins(my_id: str, other_id: str, key: bytes) -> bool:
    """Of two nodes checking one key at once, the one that goes first: an order drawn
    from the key, the same on every node, different from key to key."""
    mine = hashlib.blake2b(key + my_id.encode(), digest_size=8).digest()
    return mine > hashlib.blake2b(key + other_id.encode(), digest_size=8).digest()


class Dedup:
    """The cluster side of DEDUP, owned by `Copies` (`replication.dedup`), whose
    waiting ADDJOBs it joins and whose refused copies it aborts. It owns the keys
    being added here (`pending`), what a copy's key says (`copy_key`), whose job this
    node vouches for (`vouches`) and the answers to DEDUP_QUERY; its `queries`
    (dedup_queries.py) ask the peers and hand back each key's outcome."""

    def __init__(self, copies: Copies, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.copies = copies
        self.node = copies.node
        self.bus = copies.bus
        self.pending: dict[bytes, _Adding] = {}  # the keys being added here
        self.conflicts = 0  # copies refused (the key was then asked for)
        # Whether a PROVISIONAL copy may be vouched for (`ProvisionalCopies.verify`,
        # installed by `Replication`; without it, at once).
        self.verify: Callable[[Job, int, bool], bool] = lambda job, now, origin_up: True
        # the keys asked about: DEDUP_QUERY sent, DEDUP_REPLY gathered, one timer
        self.queries = DedupQueries(self, loop)
        for mtype, handler in ((m.DEDUP_QUERY, self._on_query),
                               (m.DEDUP_FORGET, self._on_forget),
                               (m.DEDUP_CONFLICT, self._on_conflict),
                               (m.DEDUP_SETTLED, self._on_settled)):
            self.bus.on(mtype, handler)

    # -- ADDJOB's side ------------------------------------------------------------------
    def add_checked(self, request: AddJob) -> Job:
        """ADDJOB with a DEDUP key known nowhere as far as this node can tell, when
        `copies_can_check`: `node.admission.add_job(request)` now (its DisqError is
        ADDJOB's), its copies checking the key, which names the job here from now on.
        The caller `Replication.wait`s for it; if the job is not added,
        `checked_add_failed` follows."""
        key = request.dedup
        assert key is not None
        node = self.node
        request.dedup_check = True
        job = node.admission.add_job(request)
        if job.state == WAIT_REPL or node.lookup(job.id) is job:  # (else settled, failed)
            node.dedup.record(key, job.id, job.etime)
        return job

    def ask(self, request: AddJob, answer: Answer) -> None:
        """ADDJOB with a DEDUP key not known here (or a reservation) when the copies
        cannot check it: `answer` gets the ID of the job some node knows for the key,
        or of the job `node.admission.add_job(request)` adds once every node said it
        does not know the key, or an error."""
        key = request.dedup
        assert key is not None
        adding = self.pending.get(key)
        if adding is not None:  # the same key is being asked for here: same outcome
            adding.answer = joined(adding.answer, answer)
            return
        request.dedup_check = False  # (asked again after a checked add was refused)
        self.pending[key] = _Adding(self, key, request, answer)
        self.queries.ask(key, KeyQuery(request.ttl or DEFAULT_TTL, now_ms()))

    def adding_here(self, job_id: bytes) -> bool:
        """Whether `job_id`, which a key names here, waits for its copies: another
        ADDJOB of the key `join`s it."""
        return self.copies.waiting_for(job_id)

    def join(self, job_id: bytes, answer: Answer) -> None:
        """`answer` gets the outcome of the waiting ADDJOB of `job_id` (`adding_here`)."""
        if not self.copies.join(job_id, answer):
            answer(job_id)  # (settled meanwhile: never in one call)

    def checked_add_failed(self, job: Job, request: AddJob, answer: Answer,
                           error: DisqError) -> None:
        """The job of an ADDJOB whose copies checked its key was not added (`error`,
        CONFLICT if a copy was refused): the key no longer names it anywhere; after a
        refusal, ask every node and add the job if none knows the key."""
        key = request.dedup
        assert key is not None
        self.node.dedup.forget(key, job.id)
        if job.nodes_delivered:
            self.bus.broadcast(m.DEDUP_FORGET, key, job.id, node_ids=job.nodes_delivered)
        if type(error) is not CONFLICT:
            answer(error)
            return
        self.conflicts += 1
        self.ask(request, answer)

    def copies_can_check(self, repl: int | None, ttl: int, now: int) -> bool:
        """Whether the copies of a job can check its key (the module's docstring): its
        REPLICATE (None: the default) is more than half of the known nodes and this
        node cannot have lost keys of its TTL (s). The caller knows the job is added
        synchronously and kept here (not ASYNC, not QUEUE-RANDOMLY) and that this
        node holds no entry or reservation for the key."""
        node = self.node
        size = self.bus.cluster_size
        if repl is None:
            repl = size if size < 3 else 3
        return (2 <= repl and 2 * repl > size and not node.leaving
                and node.memory_level == 0 and node.dedup_since <= now - ttl * 1000)

    def add_unless_held(self, key: bytes, query: KeyQuery) -> None:
        """Every peer asked said it does not know `key`: add its job, unless this node
        holds a copy with the key (unsettled when the ADDJOB came, or since: its
        origin may have gone, unasked). Not vouched for yet: ask again later."""
        table = self.node.dedup
        now = now_ms()
        job_id = table.get(key, now)
        if job_id is None:
            self._add(self.pending[key])
        elif self.vouches(job_id, now):
            adding = self.pending.get(key)
            table.hits += adding.count() if adding is not None else 0
            self.finish(key, job_id)
        else:
            self.queries.ask_later(key, query, now)

    def found(self, key: bytes, job_id: bytes, expiry: int) -> None:
        """A peer named `job_id` for `key`, which it keeps until `expiry` (ms): the
        ADDJOBs asking for it get that job."""
        table = self.node.dedup
        table.record(key, job_id, expiry)
        adding = self.pending.get(key)
        table.hits += adding.count() if adding is not None else 0
        self.finish(key, job_id)

    def _add(self, adding: _Adding) -> None:
        """Add the job, its REPLJOBs carrying the key: no node knows it."""
        key = adding.key
        try:
            adding.job = job = self.node.admission.add_job(adding.request)
        except DisqError as exc:
            self.finish(key, exc.with_traceback(None))  # (kept: not its frames)
            return
        except Exception as exc:  # a bug must not leave the waiting clients hanging
            log.error("Error adding a DEDUP job: %r", exc, exc_info=exc)
            self.finish(key, DisqError("ERR", "internal error while executing 'addjob'"))
            return
        if job.state == WAIT_REPL:
            self.copies.wait(job, adding.done)
        else:
            adding.done(job.id)

    def finish(self, key: bytes, outcome: Added) -> None:
        """The ADDJOBs asking for `key` get `outcome`."""
        adding = self.pending.pop(key, None)
        if adding is not None:
            adding.answer(outcome)

    # -- the REPLJOB side ---------------------------------------------------------------
    def copy_key(self, data: list[Any], job: Job, now: int, sender_id: str) -> bytes | None:
        """The DEDUP key a REPLJOB copy carries after the job's fields (`data`), to
        record once the copy is stored: None if it has none (or not a valid one),
        REFUSED if it asks this node to check the key and another job may have it, as
        far as this node can tell (the module's docstring), or if it is a late copy
        of an ADDJOB that asked every node ("Late copies")."""
        raw = data[COPY_FIELDS]  # anything a peer sent: no bytes until checked
        # (scoped to the copy's queue: a key is never recorded for another queue's job)
        key: bytes | None = raw if scoped_to(raw, job.queue) else None
        if len(data) == COPY_FIELDS + 1:
            return key  # (ASYNC: answered before its copies left, never refused)
        node = self.node
        if data[COPY_FIELDS + 1] is not True:  # its origin asked every node
            if key is None:
                return None
            known = node.dedup.peek(key, now)
            if known is None or known == job.id or (
                    known == RESERVED and node.dedup.asker(key) == sender_id):
                return key
            return REFUSED  # another node asked since the origin did, or another job
        if key is None:
            return REFUSED
        known = node.dedup.peek(key, now)
        if known is not None:  # a copy sent again, or another job / a reservation
            return key if known == job.id else REFUSED
        if key in self.pending:  # asking for it here
            return REFUSED
        # An earlier job with the key, alive now, was added after now - TTL: this node
        # knows its key unless it restarted since (the copy's TTL is the ADDJOB's).
        if node.dedup_since > now - (job.etime - job.ctime // 1_000_000):
            return REFUSED
        return key

    def vouches(self, job_id: bytes, now: int) -> bool:
        """Whether this node may answer `job_id`, which a key names here, to an ADDJOB
        of the key (its own client's or another node's): not while it is a copy whose
        ADDJOB may still fail, its origin being up and its deadline not past. Once
        either is not (the origin was killed before answering: an orphan copy, but a
        job that exists), the entry is settled; a PROVISIONAL copy's (the AOF on) only
        once its holders were asked (`ProvisionalCopies.verify`)."""
        table = self.node.dedup
        until = table.unsettled_until(job_id)
        if until is None:
            return True
        origin_up = self._origin_up(job_id)
        if until > now and origin_up:
            return False
        job = self.node.lookup(job_id)
        if job is not None and job.flags & PROVISIONAL:
            if not self.verify(job, now, origin_up):
                return False
            self.node.confirm_copy(job)  # answered: a job now (provisional.py)
        table.settle((job_id,))
        return True

    def _origin_up(self, job_id: bytes) -> bool:
        """Whether the node that made `job_id` (its ID starts with the 8 characters
        after "D-") is known and not failing: reachable, or linked (leaving). A node
        just killed counts until it is PFAIL."""
        prefix = job_id[2:10].decode("ascii", "replace")
        bus = self.bus
        return any(n.id.startswith(prefix) for n in bus.reachable_peers()) or any(
            node_id.startswith(prefix) and bus.can_send(node_id) for node_id in bus.known_ids())

    def settled(self, jobs: Iterable[Job]) -> None:
        """The ADDJOBs of `jobs` (DEDUP, waiting for their copies) succeeded: their
        holders may vouch for their keys (DEDUP_SETTLED, batched per peer and loop
        turn). The jobs of one GOTJOB mostly share their holders: one call for them."""
        holders: frozenset[str] | None = None
        ids: list[bytes] = []
        send_batched = self.bus.send_batched
        for job in jobs:
            if job.nodes_delivered is not holders:
                if ids and holders:
                    send_batched(holders, m.DEDUP_SETTLED, ids)
                holders, ids = job.nodes_delivered, []
            ids.append(job.id)
        if ids and holders:
            send_batched(holders, m.DEDUP_SETTLED, ids)

    # -- bus messages -------------------------------------------------------------------
    def _on_query(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Answer each key: its job and the time it has left, "busy" if this node is
        adding it, holds it unsettled, or is checking it and goes first, else unknown
        (nil), keeping a reservation for the asker's TTL that names the asker."""
        table = self.node.dedup
        now = now_ms()
        for item in fields:
            if type(item) is not list or len(item) != 2:
                continue
            key, ttl = item
            if type(ttl) is not int or not well_scoped(key):
                continue
            job_id = table.get(key, now)
            left = table.expiry(key) - now if job_id is not None else 0
            if job_id is not None and (self.copies.waiting_for(job_id)
                                       or not self.vouches(job_id, now)):
                job_id, left = None, BUSY  # adding it here, or a copy not settled yet
            elif job_id is None and key in self.pending:
                query = self.queries.query(key)
                if query is None or wins(self.copies.my_id, sender.id, key):
                    left = BUSY  # adding it now, or checking it and going first
                else:
                    query.yielded = True  # the sender goes first: check again after
            if job_id is None and left != BUSY and 0 < ttl * 1000 <= MAX_TTL_MS:
                # "Not known here": the sender may add the job (the last to ask)
                table.reserve(key, now, now + ttl * 1000, sender.id)
            self.bus.send_batched((sender.id,), m.DEDUP_REPLY, [[key, job_id, left]])

    def _on_forget(self, sender: ClusterNode, fields: list[Any]) -> None:
        if len(fields) >= 2 and type(fields[0]) is bytes and type(fields[1]) is bytes:
            self.node.dedup.forget(fields[0], fields[1])

    def _on_settled(self, sender: ClusterNode, fields: list[Any]) -> None:
        """The sender's ADDJOBs of these jobs succeeded: vouch for their copies' keys,
        and the copies are no longer provisional (provisional.py)."""
        node = self.node
        node.dedup.settle(fields)
        lookup = node.lookup
        for job_id in fields:
            if type(job_id) is bytes:
                job = lookup(job_id)
                if job is not None and job.flags & PROVISIONAL:
                    node.confirm_copy(job)

    def _on_conflict(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Copies refused by the sender: their ADDJOBs ask every node instead."""
        for job_id in fields:
            if type(job_id) is bytes:
                self.copies.abort_checked(job_id)

    def close(self) -> None:
        self.queries.close()
