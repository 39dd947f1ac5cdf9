"""ADDJOB's admission of a new job (`add_job`): its checks in Disque's order, whether
it is kept here or only placed on other nodes (leaving, short of memory,
QUEUE-RANDOMLY), and the new job itself: its ID, creation time and expiry. A part of
`Node` (disq/node.py), `Node.admission`: it owns what makes a new job (the ID
generator, the last creation time and expiry given); the node registers the job and
activates it (`Node.activate`), as it does a copy replicated here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from . import errors, lifecycle
from .clock import ms_after, now_ms
from .ids import JobIdGenerator
from .job import DEFAULT_PRIORITY, NO_HOLDERS, WAIT_REPL, Job, JobExt
from .memory import JOB_FOOTPRINT
from .queue import PAUSED_IN
from .requests import DEFAULT_TTL, AddJob

if TYPE_CHECKING:
    from .node import Node

DEFAULT_RETRY_MAX: Final = 300
STRICT_ASYNC: Final = errors.fixed(
    "STRICT_ASYNC", "ERR", "STRICT and ASYNC cannot be combined: a strict key's job is "
    "replicated to a majority before ADDJOB answers")


class Admission:
    """What makes a new job: the node's job IDs (`ids`, a new generator when the node
    gets a new identity, `Node.set_id`), creation times strictly increasing from one
    job to the next, and the expiry the jobs of one second share."""

    __slots__ = ("node", "ids", "_prev_ctime", "_last_etime")

    def __init__(self, node: Node, node_id: str) -> None:
        self.node = node
        self.ids = JobIdGenerator(node_id)
        self._prev_ctime = 0
        self._last_etime = 0

    def stamp(self, now: int) -> int:
        """A ctime later than every job created here so far and earlier than every
        job created after (a purge's time: purges.py)."""
        ctime = now * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        return ctime

    def add_job(self, request: AddJob) -> Job:
        """ADDJOB, its checks in Disque's order. The returned job is WAIT_REPL when the
        caller must wait for synchronous replication (the cluster layer answers later),
        else it is queued or scheduled already.

        A leaving node replicates externally, as Disque does: it keeps no copy, sends
        the job to REPLICATE other nodes and has one of them queue it. QUEUE-RANDOMLY
        (a later Disque option) does the same on purpose, in a cluster: the job is
        queued on a random one of the nodes it is replicated to, not here."""
        node = self.node
        repl, retry, delay, ttl = request.repl, request.retry, request.delay, request.ttl
        if not ttl:  # not given, nor a QPOLICY TTL (JobService.add applied those)
            ttl = DEFAULT_TTL
        body = request.body
        if len(body) > node.config.job_max_body:  # more than the bus may carry
            raise errors.body_too_big(len(body), node.config.job_max_body)
        now = now_ms()
        if repl is None:
            size = node.cluster.size()
            repl = size if size < 3 else 3
        if request.ext is not None and request.ext.strict:  # ORDERKEY k STRICT: its copies
            repl = max(repl, node.cluster.size() // 2 + 1)  # on a majority, never ASYNC
            if request.async_:
                raise STRICT_ASYNC
        if retry == 0 and repl > 1:
            raise errors.err(
                "With RETRY set to 0 please explicitly set  REPLICATE to 1 "
                "(at-most-once delivery)"
            )
        if delay >= ttl:
            raise errors.err(
                "The specified DELAY is greater than TTL. Job refused since would never "
                "be delivered"
            )
        ext = None if request.ext is None else job_ext(request, now, ttl)
        if ext is not None and ext.order_strict and not node.orderkeys.has_majority():
            raise errors.NOMAJORITY
        if retry is None:
            retry = DEFAULT_RETRY_MAX if ttl >= 10 * DEFAULT_RETRY_MAX else (ttl // 10 or 1)
        # Leaving, or short of memory: keep no copy here (Disque's external replication).
        size = JOB_FOOTPRINT + len(body)
        short = node.job_bytes > node.warn_bytes
        external = (node.leaving or short or request.queue_randomly) and (
            node.leaving or node.cluster.size() > 1)
        if repl > 1 or external:
            additional = repl if external else repl - 1
            if additional > node.cluster.reachable_peers():
                if external and (node.leaving or short) and (
                        additional - 1 == node.cluster.reachable_peers()):
                    raise errors.NOREPL_LEAVING if node.leaving else errors.NOREPL_OOM
                raise errors.NOREPL
        # A job kept here must fit under the 95% mark: a node full of big jobs
        # refuses the next big one and goes on taking the small ones that fit.
        if node.job_bytes + size > node.full_bytes and not external and (
                not node.make_room(size)):
            raise errors.OOM
        queue_name = request.queue
        queue = node.queues.get(queue_name)
        if queue is not None:
            maxlen = request.maxlen
            if maxlen and len(queue.jobs) >= maxlen:
                raise errors.MAXLEN
            if queue.flags & PAUSED_IN:
                raise errors.PAUSED
            queue_name = queue.name  # share one name object between the queue's jobs
        ctime = now * 1_000_000  # (as `stamp`, inline: this is every ADDJOB's path)
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        # Whole seconds, as Disque (server.unixtime + TTL): a job lives between TTL-1
        # and TTL seconds, and the jobs of one second share one expiry int object.
        etime = (now // 1000 + ttl) * 1000
        if etime == self._last_etime:
            etime = self._last_etime  # one int object for a burst's jobs: 32 bytes each
        else:
            self._last_etime = etime
        job = Job(self.ids.next(ttl, retry), queue_name, body, WAIT_REPL, ctime, etime,
                  delay, retry, repl)
        if ext is not None:
            job.ext = ext
        if external:
            node.stats.jobs_added += 1
            job.nodes_delivered = NO_HOLDERS
            async_ = request.async_
            node.cluster.replicate(job, request, not async_, True, now)
            if async_:
                lifecycle.not_kept(job)  # nothing kept here: the reply is just the ID
            return job
        if not node.jobs.add(job.id, job):  # 144 random bits: a collision means a bug
            raise errors.err("Internal error creating the job, check server logs")
        node.job_bytes += size  # Node.register(), inlined: hot path
        if ext is not None:
            if ext.orderkey is not None:
                node.orderkeys.joined(job, ext)
            if ext.batch is not None:
                node.batches.held(ext.batch, job.id)
            if ext.after is not None:
                node.on_flow_child(job)
        node.stats.jobs_added += 1
        if repl > 1:
            job.nodes_delivered = node.only_me
            if not request.async_:
                node.cluster.replicate(job, request, True, False, now)
                return job
        node.activate(job, now, queue)
        if repl > 1:
            node.cluster.replicate(job, request, False, False, now)
        return job


def job_ext(request: AddJob, now: int, ttl: int) -> JobExt:
    """The JobExt of an ADDJOB with PRIORITY, GROUP, DELAY-MS, AT or MAXDELIVERIES: its due time
    in Unix ms (an AT in the past means now), refused if the job would expire
    first (as Disque refuses a DELAY not below the TTL)."""
    due = 0
    if request.delay_ms is not None:
        due = ms_after(now, request.delay_ms)
    elif request.at is not None:
        due = request.at if request.at > now else now
    if due and due >= (now // 1000 + ttl) * 1000:  # the expiry add_job gives the job
        raise errors.err(
            f"The specified {'DELAY-MS' if request.delay_ms is not None else 'AT'} is "
            "beyond the TTL. Job refused since would never be delivered")
    priority = request.priority
    after = request.after
    attrs = request.ext.attrs if request.ext is not None else None
    if after:  # a flow's child: due at its expiry until its parents are done (flows.py)
        due = (now // 1000 + ttl) * 1000
    return JobExt(DEFAULT_PRIORITY if priority is None else priority, request.group, due,
                  request.max_deliveries or 0, batch=request.batch,
                  after=tuple(dict.fromkeys(after)) if after else None,
                  attrs=tuple(attrs.items()) if attrs else None,
                  orderkey=request.orderkey, order_strict=request.strict)
