"""The driver's side of a streaming read, without Spark: `JobTaker` takes the jobs of
each micro-batch from every node and holds them, delivered and not acknowledged, until
Spark has committed the batch; then it acknowledges them (ACKJOB, or FASTACK).

Where the jobs live between read and commit: in the process that runs the source's
offsets and commit on the driver (Spark keeps one Python process per streaming source
for the query's life). `take` runs GETJOB there and builds the batch's rows as Arrow
record batches, which become the batch's input partitions: Spark ships them to the
executors with the tasks, so a task that Spark runs again reads the same jobs, and the
executors never take or acknowledge a job. The driver keeps each job's ID and the node
it came from until the batch is committed; ACKJOB needs nothing else and works on any
node holding a copy (the client fails over if that node is gone).

Back-pressure: a batch takes at most `max_jobs_per_batch` jobs, and only when Spark
asks for the next batch, which it does once the previous one is committed: the query
holds at most one batch of jobs it has not processed. A batch that takes longer than
its jobs' RETRY sees them queued again by the cluster (and maybe delivered to another
consumer, or to a later batch): set `keepalive_ms` below the RETRY to have them
extended with WORKING while they are held.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from disq_client.client import Client, Connection
from disq_client.protocol import ErrorReply, encode, format_address
from disq_client.retry import CONNECTION_ERRORS

from .writer import ConnectOptions

log = logging.getLogger("disq_spark")

READ_SCHEMA = ("queue string, id string, body binary, nacks long, "
               "additional_deliveries long, priority int, `group` string")
COLUMNS = ("queue", "id", "body", "nacks", "additional_deliveries", "priority", "group")
ACK_COMMANDS = {"ackjob": "ACKJOB", "fastack": "FASTACK"}
IDS_PER_COMMAND = 1000  # job IDs in one ACKJOB / FASTACK


@dataclass
class ReadOptions(ConnectOptions):
    """A streaming read's options (the data source's, parsed: options.py)."""

    queue: str = ""
    max_jobs_per_batch: int = 100_000
    fetch_count: int = 1000  # GETJOB COUNT: jobs per request to a node
    num_partitions: int = 0  # 0: one per node
    poll_ms: int = 500  # nothing queued: one GETJOB waits that long for new jobs
    ack: str = "ackjob"  # or "fastack"
    keepalive_ms: int = 0  # > 0: WORKING for the held jobs every keepalive_ms
    topic: str = ""  # subscribe `queue` to this topic (TOPIC SUBSCRIBE) before reading
    start: int = -1  # a batch read of retained jobs (retained.py): from this Unix ms
    end: int = -1  # ... to this one (-1: now)

    def check(self) -> None:
        if not self.nodes:
            raise ValueError("disq: give at least one node (option nodes)")
        if not self.queue:
            raise ValueError("disq: give the queue to read (option queue)")
        self.check_ms()
        if self.max_jobs_per_batch < 1 or self.fetch_count < 1:
            raise ValueError("disq: max_jobs_per_batch and fetch_count must be at least 1")
        if self.ack not in ACK_COMMANDS:
            raise ValueError(f"disq: ack must be one of {', '.join(ACK_COMMANDS)}")


class Rows:
    """Jobs as GETJOB WITHCOUNTERS replies them, kept as the columns of READ_SCHEMA
    (bytes where the schema says string: Arrow takes UTF-8 bytes as they are). No
    object per job: the driver takes a micro-batch's jobs at a few microseconds each."""

    __slots__ = COLUMNS

    def __init__(self) -> None:
        self.queue: list[bytes] = []
        self.id: list[bytes] = []
        self.body: list[bytes] = []
        self.nacks: list[int | None] = []
        self.additional_deliveries: list[int | None] = []
        self.priority: list[int | None] = []
        self.group: list[bytes | None] = []

    def __len__(self) -> int:
        return len(self.id)

    def add(self, reply: object) -> list[bytes]:
        """The entries of a GETJOB WITHCOUNTERS reply (None: no job); their IDs."""
        if not reply:
            return []
        assert isinstance(reply, list), reply
        queue, ids, body = self.queue, self.id, self.body
        nacks, extra, priority, group = (self.nacks, self.additional_deliveries,
                                         self.priority, self.group)
        name = b""
        for entry in reply:
            if entry[0] != name:  # one bytes object per queue name, not one per job
                name = entry[0]
            queue.append(name)
            ids.append(entry[1])
            body.append(entry[2])
            if len(entry) == 7:  # the counters only: no PRIORITY, GROUP...
                nacks.append(entry[4])
                extra.append(entry[6])
                priority.append(None)
                group.append(None)
                continue
            fields = {entry[i]: entry[i + 1] for i in range(3, len(entry) - 1, 2)}
            nacks.append(fields.get(b"nacks"))
            extra.append(fields.get(b"additional-deliveries"))
            priority.append(fields.get(b"priority"))
            group.append(fields.get(b"group"))
        return [entry[1] for entry in reply]

    def slice(self, start: int, stop: int) -> list[list[Any]]:
        return [getattr(self, name)[start:stop] for name in self.__slots__]


@dataclass
class Taken:
    """One micro-batch's jobs: taken, not acknowledged yet. `ids` by the node that
    delivered them (where their acknowledgement goes first). The rows are kept until
    Spark plans the batch, then only as its Arrow partitions (`arrow`), which are what
    Spark asks for again if it plans the batch again."""

    seq: int
    rows: Rows | None
    ids: dict[str, list[bytes]] = field(default_factory=dict)
    count: int = 0
    arrow: list[Any] | None = None
    taken_at: float = field(default_factory=time.monotonic)

    def __len__(self) -> int:
        return self.count

    def partitions(self, parts: int) -> list[Any]:
        """The batch's rows as `parts` Arrow record batches (the first call builds
        them and lets the rows go)."""
        if self.arrow is None:
            assert self.rows is not None
            self.arrow = arrow_batches(self.rows, parts)
            self.rows = None
        return self.arrow


class JobTaker:
    """Takes micro-batches of jobs from every node and acknowledges them when told.

    Batches are numbered (`seq`) within this taker's `run`, a random name: a batch of
    another run (a query restarted from its checkpoint) is not held here, and its jobs
    come back after their RETRY. Thread-safe for the keep-alive thread only: Spark
    calls the rest from one thread."""

    def __init__(self, options: ReadOptions) -> None:
        options.check()
        self.o = options
        self.run = uuid.uuid4().hex[:16]
        self.seq = 0
        self.held: dict[int, Taken] = {}
        self.budget: int | None = None  # Trigger.AvailableNow: jobs left to take
        self.taken = 0
        self.acked = 0
        self._clients: dict[str, Client] = {}
        self._poll_next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._keepalive: threading.Thread | None = None
        # acknowledgements in the background (ack_through(wait=False)): batches to
        # acknowledge, the thread, and its last error
        self._acks: queue.Queue[list[Taken] | None] = queue.Queue()
        self._acker: threading.Thread | None = None
        self._ack_error: BaseException | None = None
        if options.topic:  # the queue is the query's consumer group of the topic
            self.client(options.nodes[0]).topic_subscribe(options.topic, options.queue)

    def client(self, node: str, pool: dict[str, Client] | None = None) -> Client:
        """The client that talks to `node` first (and fails over to the others)."""
        clients = self._clients if pool is None else pool
        client = clients.get(node)
        if client is None:
            client = clients[node] = self.o.client()
            client.view.prefer(node)
        return client

    # -- taking ------------------------------------------------------------------------
    def take(self, limit: int, after: int = 0, block: bool = True) -> Taken | None:
        """Take up to `limit` jobs from every node: a new held batch, numbered after
        `after` and anything taken before; None if no job came.

        Each node is asked its QLEN, then for its queued jobs, `fetch_count` per
        GETJOB NOHANG, one to every node with jobs at once (`_get_each`). Never a GETJOB on a node known to be empty: that makes the
        node ask the cluster for jobs (federation), and a reader polling every node
        would only chase the last jobs from node to node. With `block`, when no node
        has a job queued, one GETJOB waits up to `poll_ms` on one node (in turn): it
        asks the others, and a job added anywhere meanwhile comes to it."""
        o = self.o
        if self.budget is not None:
            limit = min(limit, self.budget)
            block = False
        rows = Rows()
        ids: dict[str, list[bytes]] = {}
        queued = {node: self._qlen(node) for node in o.nodes} if limit > 0 else {}
        active = [node for node, n in queued.items() if n > 0]
        while len(rows) < limit and active:
            wants: dict[str, int] = {}  # a GETJOB to each node with jobs, while room is left
            room = limit - len(rows)
            for node in active:
                want = min(o.fetch_count, room, queued[node])
                if want <= 0:
                    break
                wants[node] = want
                room -= want
            for node, got in self._get_each(wants, rows, ids).items():
                queued[node] -= wants[node]
                if got < wants[node] or queued[node] <= 0:
                    active.remove(node)
        if not rows and block and limit > 0:
            node = o.nodes[self._poll_next % len(o.nodes)]
            self._poll_next += 1
            self._get(node, min(o.fetch_count, limit), max(o.poll_ms, 1), rows, ids)
        if not rows:
            return None
        self.seq = max(self.seq, after) + 1
        taken = Taken(self.seq, rows, ids, len(rows))
        with self._lock:
            self.held[taken.seq] = taken
        self.taken += len(rows)
        if self.budget is not None:
            self.budget = max(self.budget - len(rows), 0)
        self._start_keepalive()
        return taken

    def _qlen(self, node: str) -> int:
        """The queue's length on `node`'s client (0 if no node answered)."""
        try:
            return self.client(node).qlen(self.o.queue)
        except CONNECTION_ERRORS as exc:
            log.warning("disq: QLEN on %s failed: %s", node, exc)
            return 0

    def _get_each(self, wants: dict[str, int], rows: Rows,
                  ids: dict[str, list[bytes]]) -> dict[str, int]:
        """GETJOB NOHANG to each node of `wants` at once: every request leaves before
        a reply is read, so the nodes serve theirs side by side while this process
        reads the others' (asked in turn, the take waited on each node for two thirds
        of its time). How many came from each. A node whose connection breaks, or
        that answers an error, is asked again through `_get` (its client fails over,
        an error is raised as before); the jobs of a lost reply come back after their
        RETRY."""
        sent: list[tuple[str, Client, Connection]] = []
        got: dict[str, int] = {}
        for node, count in wants.items():
            client = self.client(node)
            try:
                conn = client.connection()
                conn.send(encode(self._getjob(count, 0)))
            except CONNECTION_ERRORS:
                got[node] = self._get(node, count, 0, rows, ids)
                continue
            sent.append((node, client, conn))
        for node, client, conn in sent:
            try:
                reply = conn.read()
            except CONNECTION_ERRORS as exc:
                client.failed(conn.addr)
                log.warning("disq: GETJOB from %s failed: %s", node, exc)
                got[node] = 0
                continue
            if isinstance(reply, ErrorReply):
                got[node] = self._get(node, wants[node], 0, rows, ids)
                continue
            got[node] = self._took(reply, format_address(conn.addr), rows, ids)
        return got

    def _getjob(self, count: int, timeout_ms: int) -> list[str | int]:
        """GETJOB of `count` jobs with their counters: NOHANG, or waiting `timeout_ms`."""
        wait: list[str | int] = ["NOHANG"] if not timeout_ms else ["TIMEOUT", timeout_ms]
        return ["GETJOB", *wait, "WITHCOUNTERS", "COUNT", count, "FROM", self.o.queue]

    @staticmethod
    def _took(reply: object, where: str, rows: Rows, ids: dict[str, list[bytes]]) -> int:
        """A GETJOB's jobs into `rows`, their IDs noted under the node that delivered
        them (`where`); how many."""
        got = rows.add(reply)
        if got:
            ids.setdefault(where, []).extend(got)
        return len(got)

    def _get(self, node: str, count: int, timeout_ms: int, rows: Rows,
             ids: dict[str, list[bytes]]) -> int:
        """GETJOB from `node` (NOHANG, or waiting `timeout_ms`) into `rows`, noting
        the IDs by the node that delivered them; how many came (0 if no node
        answered: the others are asked still)."""
        client = self.client(node)
        try:
            reply = client.execute_command(*self._getjob(count, timeout_ms))
        except CONNECTION_ERRORS as exc:
            log.warning("disq: GETJOB from %s failed: %s", node, exc)
            return 0
        current = client.current_node  # where the jobs came from
        return self._took(reply, format_address(current) if current is not None else node,
                          rows, ids)

    def batches(self, after: int, through: int) -> list[Taken]:
        """The held batches numbered in (after, through]."""
        with self._lock:
            return [t for seq, t in sorted(self.held.items()) if after < seq <= through]

    def queued(self) -> int:
        """Jobs queued in the whole cluster now (QLEN of every node that answers)."""
        return sum(self._qlen(node) for node in self.o.nodes)

    # -- acknowledging -----------------------------------------------------------------
    def ack_through(self, seq: int, wait: bool = True) -> int:
        """Acknowledge every held batch numbered up to `seq`: Spark committed them.
        Returns how many jobs that is. With `wait` False the acknowledgement runs in
        the background, so that the next batch is taken while the nodes process it:
        one batch at most (the call first waits for the one before), and an error
        there is raised by the next call."""
        self._ack_failed()
        with self._lock:
            done = [self.held.pop(s) for s in sorted(self.held) if s <= seq]
        count = sum(len(taken) for taken in done)
        if not done:
            return 0
        if wait:
            for taken in done:
                self._ack(taken, self._clients)
            self.acked += count
            return count
        if self._acker is None:
            self._acker = threading.Thread(target=self._ack_loop, daemon=True,
                                           name="disq-ack")
            self._acker.start()
        self.ack_wait()  # the batch before is acknowledged
        self._acks.put(done)
        return count

    def ack_wait(self) -> None:
        """Wait for the acknowledgement under way in the background (raise its error)."""
        if self._acker is not None:
            self._acks.join()
        self._ack_failed()

    def _ack_failed(self) -> None:
        error, self._ack_error = self._ack_error, None
        if error is not None:
            raise error

    def _ack_loop(self) -> None:
        pool: dict[str, Client] = {}
        try:
            while (done := self._acks.get()) is not None:
                try:
                    for taken in done:
                        self._ack(taken, pool)
                        self.acked += len(taken)
                except BaseException as exc:  # raised by the next ack_through
                    self._ack_error = exc
                finally:
                    self._acks.task_done()
        finally:
            for client in pool.values():
                client.close()

    def _ack(self, taken: Taken, pool: dict[str, Client]) -> None:
        """ACKJOB (or FASTACK) the batch's jobs, pipelined, on the node each came from
        first: a node that is gone leaves them to the client's failover, as ACKJOB
        works on any node. Raises if no node took them."""
        name = ACK_COMMANDS[self.o.ack]
        for node, ids in taken.ids.items():
            payloads = [encode((name, *ids[i:i + IDS_PER_COMMAND]))
                        for i in range(0, len(ids), IDS_PER_COMMAND)]
            replies = self.client(node, pool).execute_pipeline(payloads)
            errors = [r for r in replies if isinstance(r, ErrorReply)]
            if errors:
                raise RuntimeError(f"disq: {name} of batch {taken.seq} refused: {errors[0]}")

    # -- keeping held jobs from being queued again -------------------------------------
    def _start_keepalive(self) -> None:
        if self.o.keepalive_ms <= 0 or self._keepalive is not None:
            return
        self._keepalive = threading.Thread(target=self._keepalive_loop, daemon=True,
                                           name="disq-keepalive")
        self._keepalive.start()

    def _keepalive_loop(self) -> None:
        """Every keepalive_ms, WORKING for every held job, on the node it came from:
        each postpones the job's next requeue by its RETRY. Errors (a job already
        acknowledged: -NOJOB; past half its TTL: -TOOLATE) are left alone."""
        pool: dict[str, Client] = {}
        try:
            while not self._stop.wait(self.o.keepalive_ms / 1000):
                with self._lock:
                    held = list(self.held.values())
                for taken in held:
                    for node, ids in taken.ids.items():
                        try:
                            self.client(node, pool).execute_pipeline(
                                [encode(("WORKING", job_id)) for job_id in ids])
                        except CONNECTION_ERRORS as exc:
                            log.warning("disq: WORKING on %s failed: %s", node, exc)
        finally:
            for client in pool.values():
                client.close()

    def close(self) -> None:
        """Stop, once the acknowledgements under way are sent; the jobs still held
        come back after their RETRY."""
        self._stop.set()
        if self._acker is not None:
            self._acks.put(None)
            self._acker.join()
            self._acker = None
        if self._ack_error is not None:
            log.warning("disq: an acknowledgement failed (its jobs come back after their "
                        "RETRY): %s", self._ack_error)
        if self._keepalive is not None:
            self._keepalive.join(5)
        for client in self._clients.values():
            client.close()
        self._clients.clear()


# -- rows ----------------------------------------------------------------------------------
def arrow_batches(rows: Rows, partitions: int) -> list[Any]:
    """The rows as `partitions` Arrow record batches of about the same size (fewer if
    there are fewer rows), the columns of READ_SCHEMA."""
    import pyarrow as pa

    types = (pa.string(), pa.string(), pa.binary(), pa.int64(), pa.int64(), pa.int32(),
             pa.string())
    schema = pa.schema([pa.field(n, t) for n, t in zip(COLUMNS, types, strict=True)])
    parts = max(min(partitions, len(rows)), 1)
    size = -(-len(rows) // parts)
    return [pa.record_batch([pa.array(c, t) for c, t in zip(
        rows.slice(start, start + size), types, strict=True)], schema=schema)
        for start in range(0, len(rows), size)]
