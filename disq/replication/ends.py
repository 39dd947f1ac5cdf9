"""How jobs ended, across nodes (a disq extension; the node's own store is results.py;
a result travels to the job's holders with its ACK: acks.py's SETACK_RESULT).

* WAITJOB on a node that knows neither a job nor its end asks every reachable node
  (ENDS_ASK [wait id, lease ms, job id ...]). Each answers ENDS [wait id, [[job id,
  state, data, queue], ...]] with what it knows (nothing: an empty list, still an
  answer; an active job's progress follows its entry as [job id, progress]), and
  watches the jobs it holds that did not end yet for the lease: when one
  ends there, it sends the asker an ENDS with its end. The asker asks again before the
  lease runs out while it still waits, so a watch outlives a crashed asker by a lease
  at most. A job no node answered for, once every asked node answered or after
  ASK_TIMEOUT_MS, is unknown.
* A watched job that leaves a holder without ending there (federation moved it, its
  TTL ran out, DELJOB, eviction) is told to the asker: ENDS_GONE [wait id, job id ...].
  The asker asks again for it (`RemoteWait.left`), as it does for a job that leaves
  its own node: it follows the job to where it went, or learns that no node knows it.
* A reachable peer not asked in the ask's round (not reachable then), that did not
  answer it, or whose link the ask went on is gone since (its ENDS may be lost; a
  restarted peer watches nothing) makes a new round of the ask (checked every
  RELINK_MS): after a partition heals, the asker hears of the ends it missed. (A peer
  that never answers, an older node, costs a round every two seconds or so.) A job no node answered for in a whole round (every reachable node
  answered) is told to the asker, which no longer waits for it (`unknown`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Protocol

from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import MAX_PROGRESS, MIN_PROGRESS
from ..node import Node, now_ms
from ..results import ACKED_END, DEAD_END

ASK_TIMEOUT_MS: Final = 1000  # a node that did not answer by then knows nothing
LEASE_MS: Final = 60_000  # how long a holder watches a job for an asker
MAX_WATCHED: Final = 100_000  # jobs watched for other nodes, at most
MAX_ASKED: Final = 10_000  # job IDs in one ENDS_ASK (WAITJOB's bound)
RELINK_MS: Final = 1000  # how often the asks look for peers to ask again
MAX_ROUND: Final = 2**62  # an ask's rounds, at most (one a second would take aeons)
NOT_AN_ANSWER: Final = [0]  # ends an ENDS that tells a watched job's end
# Unknown is decided by the asker, never sent.
_STATES: Final = frozenset((ACKED_END, DEAD_END, b"queued", b"active"))

# An end as it travels: job id, state, data (result or error) or nil, queue or nil.
Entry = tuple[bytes, bytes, "bytes | None", "bytes | None"]


class RemoteWait(Protocol):
    """A WAITJOB waiting here for jobs held elsewhere (server/job_waits.py)."""

    def heard(self, entry: Entry) -> None: ...
    def heard_progress(self, job_id: bytes, progress: int) -> None: ...
    def answered(self, ask_id: int, unmentioned: list[bytes]) -> None: ...
    def left(self, job_id: bytes) -> None: ...


class _Watch:
    """The jobs this node watches for one WAITJOB of another node."""

    __slots__ = ("node_id", "wait_id", "expires", "ids", "owner")

    def __init__(self, owner: JobEnds, node_id: str, wait_id: int, expires: int) -> None:
        self.owner = owner
        self.node_id = node_id
        self.wait_id = wait_id
        self.expires = expires
        self.ids: set[bytes] = set()

    def job_ended(self, job_id: bytes) -> None:
        if self._told(job_id):
            self.owner.send_end(self.node_id, self.wait_id, job_id)

    def job_left(self, job_id: bytes) -> None:
        if self._told(job_id):
            self.owner.bus.send_batched((self.node_id,), m.ENDS_GONE, [job_id],
                                        head=(self.wait_id,))

    def _told(self, job_id: bytes) -> bool:
        """The job is not watched any more (the core dropped it from its watchers);
        True if the asker still wants to hear of it (the lease runs)."""
        self.ids.discard(job_id)
        self.owner.watched -= 1
        if not self.ids:
            self.owner.watches.pop((self.node_id, self.wait_id), None)
        return self.expires > now_ms()


class _Asking:
    __slots__ = ("wait", "ids", "round", "waiting", "links", "heard_from", "mentioned",
                 "unsure", "timer", "renew")

    def __init__(self, wait: RemoteWait, ids: list[bytes]) -> None:
        self.wait = wait
        self.ids = ids
        self.round = 0  # the round of the ask, echoed by the answers
        self.waiting: set[str] = set()
        # where this round's ask to each peer went (BusPort.copy_mark: its link)
        self.links: dict[str, object] = {}
        self.heard_from: set[str] = set()  # the peers that answered this round
        self.mentioned: set[bytes] = set()  # the jobs some node answered for, this round
        self.unsure = False  # an older node answered: a watched job's end looks the same
        self.timer: asyncio.TimerHandle | None = None
        self.renew: asyncio.TimerHandle | None = None


class JobEnds:
    """ENDS_ASK and ENDS."""

    def __init__(self, node: Node, bus: BusPort,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.node = node
        self.bus = bus
        self._loop = loop
        self._asks: dict[int, _Asking] = {}
        self._next_id = 0
        self.watches: dict[tuple[str, int], _Watch] = {}
        self.watched = 0  # job IDs watched for other nodes
        self._sweep: asyncio.TimerHandle | None = None
        self._relink: asyncio.TimerHandle | None = None
        bus.on(m.ENDS_ASK, self._on_ask)
        bus.on(m.ENDS, self._on_ends)
        bus.on(m.ENDS_GONE, self._on_gone)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop or asyncio.get_running_loop()

    # -- the asker's side ------------------------------------------------------------------
    def ask(self, wait: RemoteWait, ids: list[bytes]) -> int:
        """Ask every reachable node how `ids` ended, for `wait` (its `heard` for each
        answer, `answered` once every node answered or after ASK_TIMEOUT_MS); renewed
        while it waits. The ask's ID, for `forget`."""
        self._next_id += 1
        wait_id = self._next_id
        asking = _Asking(wait, ids[:MAX_ASKED])
        self._asks[wait_id] = asking
        self._send_ask(wait_id, asking)
        return wait_id

    def _send_ask(self, wait_id: int, asking: _Asking) -> None:
        bus = self.bus
        waiting: set[str] = set()
        links: dict[str, object] = {}
        asking.round += 1
        for peer in bus.reachable_peers():
            if bus.send(peer.id, m.ENDS_ASK, wait_id, LEASE_MS, *asking.ids, asking.round):
                waiting.add(peer.id)
                links[peer.id] = bus.copy_mark(peer.id)
        asking.waiting, asking.links = waiting, links
        asking.heard_from = set()
        asking.mentioned = set()
        asking.unsure = False
        loop = self.loop
        if self._relink is None:
            self._relink = loop.call_later(RELINK_MS / 1000, self._ask_relinked)
        if not asking.waiting:
            loop.call_soon(self._answered, wait_id, True)
        else:
            asking.timer = loop.call_later(ASK_TIMEOUT_MS / 1000, self._answered, wait_id,
                                           False)
        asking.renew = loop.call_later(LEASE_MS / 2000, self._renew, wait_id)

    def _ask_relinked(self) -> None:
        """Every RELINK_MS: a new round of each ask with a reachable peer whose word
        may be lost (`_unsure`: an ENDS it sent while its link was down, or its
        answer to an ask sent as the link came back while its own link here was not
        up yet; a restarted peer watches nothing for the ask). A WAITJOB on one side
        of a healed partition hears how its jobs ended there within a second or so,
        not at its next renewal; one whose holders came back empty (kill -9, no AOF)
        learns that no node knows them. (A round is every reachable node: only a
        whole one tells which jobs no node knows; these rounds are rare, a link
        coming back.)"""
        self._relink = None
        if not self._asks:
            return
        bus = self.bus
        peers = [n.id for n in bus.reachable_peers() if bus.can_send(n.id)]
        for wait_id, asking in list(self._asks.items()):
            if any(self._unsure(asking, node_id) for node_id in peers):
                self._renew(wait_id)  # (which may arm the timer: it is armed once)
        if self._relink is None:
            self._relink = self.loop.call_later(RELINK_MS / 1000, self._ask_relinked)

    def _unsure(self, asking: _Asking, node_id: str) -> bool:
        """Whether what `node_id` told (or will tell) of the ask may be lost or stale:
        not asked this round (not reachable then), no answer in the round's time, or
        the link its ask went on is gone (dropped, replaced: a partition, a restart,
        however short). False while the round still waits for it."""
        if node_id in asking.waiting:
            return False
        link = asking.links.get(node_id)
        return (link is None or node_id not in asking.heard_from
                or self.bus.copy_left(link) is None)

    def _renew(self, wait_id: int) -> None:
        """A new round of the ask: every reachable node asked again."""
        asking = self._asks.get(wait_id)
        if asking is not None:
            for timer in (asking.timer, asking.renew):
                if timer is not None:
                    timer.cancel()
            asking.timer = None
            self._send_ask(wait_id, asking)

    def _answered(self, wait_id: int, every_peer: bool) -> None:
        """The round of the ask is over: `every_peer` reachable answered (else its
        time ran out). Then the jobs no node answered for are told: none of the
        reachable nodes knows them now (the holders that answered before were killed
        and came back empty, a partition), so that the WAITJOB does not wait for
        them for ever; a peer that did not answer in time may know them, so after a
        timeout nothing is told."""
        asking = self._asks.get(wait_id)
        if asking is not None:
            asking.timer = None
            asking.waiting = set()
            mentioned = asking.mentioned
            unmentioned = ([i for i in asking.ids if i not in mentioned]
                           if every_peer and not asking.unsure else [])
            asking.wait.answered(wait_id, unmentioned)

    def forget(self, wait_id: int) -> None:
        """The WAITJOB is over: its answers are not wanted any more."""
        asking = self._asks.pop(wait_id, None)
        if asking is not None:
            for timer in (asking.timer, asking.renew):
                if timer is not None:
                    timer.cancel()

    def _on_ends(self, sender: ClusterNode, fields: list[Any]) -> None:
        """[wait id, entry, ..., [round]]: a node's answer to the ask's round (no
        entry: it knows none of the jobs, an answer all the same), or ([0]) a job
        that ended there, or (no [round]: an older node) either."""
        if not fields or type(fields[0]) is not int:
            return
        asking = self._asks.get(fields[0])
        if asking is None:
            return
        answer: int | None = None
        for entry in fields[1:]:
            parsed = _entry(entry)
            if parsed is not None:
                asking.mentioned.add(parsed[0])
                asking.wait.heard(parsed)
            elif type(entry) is list and len(entry) == 2:  # [job id, progress]
                job_id, progress = entry
                if (type(job_id) is bytes and is_valid_job_id(job_id)
                        and type(progress) is int and MIN_PROGRESS <= progress <= MAX_PROGRESS):
                    asking.wait.heard_progress(job_id, progress)
            elif type(entry) is list and len(entry) == 1 and type(entry[0]) is int:
                answer = entry[0]
        if answer is None:
            asking.unsure = True  # (its answer or a job's end: counted as an answer)
        elif answer != asking.round:
            return  # a watched job's end, or an answer to an earlier round
        asking.heard_from.add(sender.id)
        if sender.id in asking.waiting:
            asking.waiting.discard(sender.id)
            if not asking.waiting and asking.timer is not None:
                asking.timer.cancel()
                self._answered(fields[0], True)

    def _on_gone(self, sender: ClusterNode, fields: list[Any]) -> None:
        """[wait id, job id, ...]: jobs the sender watched for this ask left it."""
        if not fields or type(fields[0]) is not int:
            return
        asking = self._asks.get(fields[0])
        if asking is None:
            return
        for job_id in fields[1:1 + MAX_ASKED]:
            if type(job_id) is bytes and is_valid_job_id(job_id):
                asking.wait.left(job_id)  # (the wait ignores a job it did not ask)

    # -- the holder's side -----------------------------------------------------------------
    def _on_ask(self, sender: ClusterNode, fields: list[Any]) -> None:
        """[wait id, lease ms, job id ...]: answer what ended here, watch what did not."""
        if len(fields) < 2 or type(fields[0]) is not int or type(fields[1]) is not int:
            return
        wait_id, lease = fields[0], min(max(fields[1], 0), LEASE_MS)
        asked = fields[2:]
        # the ask's round, last (an older node sends none: its answer has none either)
        round_no = asked.pop() if asked and type(asked[-1]) is int else None
        answer = [[round_no]] if round_no is not None and 0 < round_no <= MAX_ROUND else []
        node = self.node
        now = now_ms()
        entries: list[list[Any]] = []
        key = (sender.id, wait_id)
        watch = self.watches.get(key)
        for job_id in asked[:MAX_ASKED]:
            if type(job_id) is not bytes or not is_valid_job_id(job_id):
                continue
            state, data = node.job_end(job_id, now)
            if state not in _STATES:
                continue
            entries += _entries(node, job_id, state, data, now)
            if state in (ACKED_END, DEAD_END) or self.watched >= MAX_WATCHED:
                continue
            if watch is None:
                watch = self.watches[key] = _Watch(self, sender.id, wait_id, now + lease)
            watch.expires = now + lease
            if job_id not in watch.ids:
                watch.ids.add(job_id)
                self.watched += 1
                node.ends.watch(job_id, watch)
        self.bus.send(sender.id, m.ENDS, wait_id, *entries, *answer)
        if self.watches and self._sweep is None:
            self._sweep = self.loop.call_later(LEASE_MS / 1000, self._expire)

    def send_end(self, node_id: str, wait_id: int, job_id: bytes) -> None:
        node = self.node
        now = now_ms()
        state, data = node.job_end(job_id, now)
        if state in _STATES:
            self.bus.send(node_id, m.ENDS, wait_id, *_entries(node, job_id, state, data, now),
                          NOT_AN_ANSWER)

    def _expire(self) -> None:
        """Drop the watches whose lease ran out (their asker stopped asking)."""
        self._sweep = None
        now = now_ms()
        ends = self.node.ends
        for key, watch in list(self.watches.items()):
            if watch.expires <= now:
                del self.watches[key]
                for job_id in watch.ids:
                    ends.unwatch(job_id, watch)
                self.watched -= len(watch.ids)
        if self.watches:
            self._sweep = self.loop.call_later(LEASE_MS / 1000, self._expire)


def _entries(node: Node, job_id: bytes, state: bytes, data: bytes | None,
             now: int) -> list[list[Any]]:
    """A job's entry in an ENDS, then, for an active job with a progress reported
    (WORKING ... PROGRESS), its [job id, progress]."""
    entries: list[list[Any]] = [[job_id, state, data, node.job_queue(job_id, now)]]
    if state == b"active":
        progress = node.job_progress(job_id)
        if progress is not None:
            entries.append([job_id, progress])
    return entries


def _entry(entry: object) -> Entry | None:
    if type(entry) is not list or len(entry) != 4:
        return None
    job_id, state, data, queue = entry
    if (type(job_id) is bytes and is_valid_job_id(job_id) and state in _STATES
            and (data is None or type(data) is bytes)
            and (queue is None or type(queue) is bytes)):
        return job_id, state, data, queue
    return None

