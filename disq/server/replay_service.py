"""REPLAY and RETAINED (a disq extension): reading the retained jobs of a window
(retention/store.py on every node), and adding them again as new jobs.

REPLAY runs on the node it is sent to. It reads the window a page at a time from
itself and every reachable peer (RETAINED_ASK: replication/retention.py), each page
the next PAGE jobs after the cursor in the replay order (creation time, then ID). The
pages are merged: the jobs up to the smallest last key of the pages that may have more
are safe to add (no node has a smaller one left), the rest is read again with the
next page; several holders' copies of a job are one (same ID). So the memory is a page
per node, and the jobs are added in creation order (across nodes: within their clocks'
skew). Each job is added with as many copies as it had (fewer if fewer nodes are
reachable) to INTO (the queue by default) with the DEDUP key
`replay:<digest of queue, window, INTO, WHERE>:<its ID>`, a few at a time: a retried
REPLAY adds none twice (as long as the DEDUP keys live: the replayed jobs' TTL). A peer
that does not answer a page is left out of the rest of the replay (counted).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

from .. import errors
from ..acl import User
from ..node import now_ms
from ..outcomes import HeldAnswer, HeldAnswers
from ..requests import AddJob, AddJobExt
from ..retention.requests import Replay, Retained
from ..retention.segments import RetainedJob
from .later import Later

if TYPE_CHECKING:
    from ..replication.retention import RetainedReads
    from .app import Server

log = logging.getLogger("disq")

PAGE: Final = 2000  # jobs per node and page
IN_FLIGHT: Final = 64  # ADDJOBs waiting for their copies or DEDUP checks at a time
Key = tuple[int, bytes]


class ReplayResult:
    __slots__ = ("added", "skipped", "failed", "nodes", "unreached")

    def __init__(self) -> None:
        self.added = 0
        self.skipped = 0  # known already (a retried REPLAY)
        self.failed = 0  # refused (the error of the first is logged)
        self.nodes = 0  # read from
        self.unreached = 0  # asked and did not answer

    def fields(self) -> list[tuple[bytes, int]]:
        return [(b"added", self.added), (b"skipped", self.skipped),
                (b"failed", self.failed), (b"nodes", self.nodes),
                (b"unreached", self.unreached)]


class ReplayService:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.reads: RetainedReads | None = None  # once the bus is up

    def check(self, queue: bytes) -> None:
        """A REPLAY or RETAINED of a queue nobody retains is a mistake: said."""
        policy = self.server.node.policies.get(queue)
        if (policy is None or policy.retain <= 0) and (
                self.server.retention.queue_info(queue) is None):
            name = queue.decode(errors="replace")[:200]
            raise errors.err(f"queue '{name}' has no retained jobs here and no RETAIN "
                             "policy (QPOLICY queue SET RETAIN seconds)")

    def replay(self, user: User, request: Replay) -> Later[ReplayResult]:
        self.check(request.queue)
        later: Later[ReplayResult] = Later()
        task = asyncio.get_running_loop().create_task(self._replay(user, request))
        task.add_done_callback(lambda t: later.resolve(
            t.result() if not t.cancelled() and t.exception() is None else ReplayResult()))
        return later

    async def retained(self, request: Retained) -> tuple[list[RetainedJob], bool]:
        self.check(request.queue)
        return await self.server.retention.window(
            request.queue, request.start, request.end, request.cursor(), request.count,
            request.where or None, request.shard_pair())

    async def _replay(self, user: User, request: Replay) -> ReplayResult:
        result = ReplayResult()
        store = self.server.retention
        reads = self.reads
        bus = self.server.bus
        peers = [] if reads is None or bus is None else [
            n.id for n in bus.reachable_peers()]
        result.nodes = 1 + len(peers)
        after: Key | None = None
        adder = _Adder(self.server, user, request, result)
        while True:
            pages = [await store.window(request.queue, request.start, request.end, after,
                                        PAGE, request.where or None)]
            if peers:
                assert reads is not None
                answers = await asyncio.gather(*(
                    reads.ask(peer, request.queue, request.start, request.end, after, PAGE,
                              request.where_args) for peer in peers))
                for peer, answer in zip(list(peers), answers, strict=True):
                    if answer is None:
                        peers.remove(peer)
                        result.unreached += 1
                    else:
                        pages.append(answer)
            full = [jobs[-1].key() for jobs, more in pages if more and jobs]
            safe = min(full) if full else None
            batch = sorted((job for jobs, _ in pages for job in jobs
                            if safe is None or job.key() <= safe), key=RetainedJob.key)
            last: bytes | None = None
            for job in batch:
                if job.id != last:
                    last = job.id
                    await adder.add(job)
            if safe is None:
                break
            after = safe
        await adder.drain()
        return result


class _Adder:
    """Adds the replayed jobs, IN_FLIGHT at most waiting at a time."""

    def __init__(self, server: Server, user: User, request: Replay,
                 result: ReplayResult) -> None:
        self.server = server
        self.user = user
        self.request = request
        self.result = result
        self.answers = HeldAnswers(server.node)
        self.waiting: set[asyncio.Future[object]] = set()
        self.logged = False
        self.mine = server.node.id[:8].encode()  # what the IDs of jobs made here hold

    async def add(self, job: RetainedJob) -> None:
        node = self.server.node
        # as many copies as the job had, as far as the nodes reachable now allow
        repl = min(max(1, len(job.nodes)), 1 + node.cluster.reachable_peers())
        request = AddJob(self.request.target, job.body, repl=repl,
                         dedup=self.request.dedup_key(job.id))
        if request.dedup is not None and node.dedup.get(request.dedup, now_ms()):
            self.result.skipped += 1
            return
        if job.attrs:
            ext = request.ext = AddJobExt()
            ext.attrs = job.attr_dict()
        try:
            outcome = self.server.jobs.add(self.user, request, self.answers)
        except errors.DisqError as exc:
            self._failed(exc)
            return
        if not isinstance(outcome, HeldAnswer):
            self.result.added += 1
            return
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        def settle(value: object) -> None:
            if not future.done():
                future.set_result(value)

        outcome.then(settle)
        future.add_done_callback(self._settled)
        self.waiting.add(future)
        if len(self.waiting) >= IN_FLIGHT:
            await asyncio.wait(self.waiting, return_when=asyncio.FIRST_COMPLETED)

    def _settled(self, future: asyncio.Future[object]) -> None:
        self.waiting.discard(future)
        value = future.result()
        if isinstance(value, errors.DisqError):
            self._failed(value)
        elif isinstance(value, bytes) and value[2:10] != self.mine:
            self.result.skipped += 1  # another node's job: the cluster knew the key
        else:
            self.result.added += 1

    def _failed(self, exc: errors.DisqError) -> None:
        self.result.failed += 1
        if not self.logged:
            self.logged = True
            log.warning("REPLAY of %r: an ADDJOB failed: %s",
                                              self.request.queue, exc)

    async def drain(self) -> None:
        if self.waiting:
            await asyncio.wait(set(self.waiting))
