"""ACKs across nodes: the garbage collection of acked jobs (SETACK / GOTACK / DELJOB,
Disque's) and FASTACK's DELJOB to every holder at once.

A job acked with a RESULT (results.py) has its result travel with its ACK: while the
result is kept here, the job's SETACKs are SETACK_RESULT [job id, may-have, result,
ttl ms] (a disq extension). A holder keeps the result, then does what a SETACK does;
a node that does not hold the job keeps nothing (a stranger's results take no memory
here).

Unlike Disque's one job a message, the SETACKs, GOTACKs and DELJOBs a node sends a peer
in one loop turn share one message (`send_batched`): a consumer's ACKJOB of a thousand
jobs costs each holder three messages, not three thousand.

The functions at the end are the job-level helpers the other message families share:
the job a message names, holders learned, a SETACK to a node that must not bring an
acked job back, a job deleted everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..batches import VOID
from ..cluster import messages as m
from ..cluster.membership import ClusterNode
from ..cluster.port import BusPort
from ..ids import is_valid_job_id
from ..job import ACKED, WAIT_REPL, Job, node_id_set, with_holders
from ..node import Node, now_ms
from ..policies import MAX_RESULT_TTL_MS
from ..results import ACKED_END
from .wire import MAX_U32

if TYPE_CHECKING:
    from .copies import Copies


class Acks:
    """SETACK / GOTACK / DELJOB, and the core's `start_gc` and `fast_ack`. A job
    acked or deleted while its ADDJOB waits for copies settles that ADDJOB (`copies`)."""

    def __init__(self, node: Node, bus: BusPort, copies: Copies) -> None:
        self.node = node
        self.bus = bus
        self.copies = copies
        bus.on(m.SETACK, self._on_setack)
        bus.on(m.SETACK_RESULT, self._on_setack_result)
        bus.on(m.GOTACK, self._on_gotack)
        bus.on(m.DELJOB, self._on_deljob)

    # -- what the core tells the cluster ------------------------------------------------
    def start_gc(self, job: Job) -> None:
        """SETACK to every node that may have a copy and did not confirm the ACK yet;
        a dummy ACK (no holder known) asks every node that did not answer yet."""
        delivered = job.nodes_delivered
        confirmed = job.nodes_confirmed or ()
        targets = delivered if delivered else self.bus.known_ids()
        unconfirmed = [i for i in targets if i not in confirmed]
        ends = self.node.ends
        if ends.kept:
            now = now_ms()
            end = ends.get(job.id, now)
            if end is not None and end.data is not None and end.how == ACKED_END:
                self.bus.send_batched(unconfirmed, m.SETACK_RESULT,
                                      [job.id, len(delivered or ()), end.data,
                                       end.expires - now])
                return
        self.bus.send_batched(unconfirmed, m.SETACK, [job.id, len(delivered or ())])

    def fast_ack(self, job_id: bytes, job: Job | None) -> None:
        if job is None:
            self.bus.send_batched(self.bus.known_ids(), m.DELJOB, [job_id])
            return
        if job.state == WAIT_REPL:
            self.copies.job_dropped(job)
        if job.nodes_delivered:
            self.bus.send_batched(job.nodes_delivered, m.DELJOB, [job.id])

    # -- bus messages -------------------------------------------------------------------
    def _on_setack(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Each [job id, may-have count] pair: mark the job acked and answer GOTACK,
        unless this node knows more nodes that may hold a copy than the sender does:
        then it runs the GC itself."""
        for i in range(0, len(fields) - 1, 2):
            parsed = _id_and_count(fields[i], fields[i + 1])
            if parsed is not None:
                self._setack(sender, *parsed)

    def _on_setack_result(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Each [job id, may-have, result, ttl ms]: keep the result of a job held
        here, then as SETACK."""
        node = self.node
        now = now_ms()
        for i in range(0, len(fields) - 3, 4):
            parsed = _id_and_count(fields[i], fields[i + 1])
            result, ttl = fields[i + 2], fields[i + 3]
            if (parsed is None or type(result) is not bytes or type(ttl) is not int
                    or not 0 < ttl <= MAX_RESULT_TTL_MS):
                continue
            if node.lookup(parsed[0]) is not None:
                node.keep_result(parsed[0], ACKED_END, result, now, left_ms=ttl)
            self._setack(sender, *parsed)

    def _setack(self, sender: ClusterNode, job_id: bytes, may_have: int) -> None:
        node = self.node
        job = node.lookup(job_id)
        if job is not None:
            if job.state == WAIT_REPL:  # acked before it was replicated: it was
                self.copies.settle(job, job.id)
            if node.acknowledge(job):
                node.schedule_gc(job)  # in case the sender never finishes its GC
        if job is None or holder_count(job) <= may_have:
            self.bus.send_batched((sender.id,), m.GOTACK, [job_id, _has_job(job)])
        else:
            if may_have == 0:  # the sender has a dummy ACK: it may forget it now
                self.bus.send_batched((sender.id,), m.GOTACK, [job_id, True])
            node.try_gc(job)

    def _on_gotack(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Each [job id, known] pair: a node confirmed our SETACK."""
        for i in range(0, len(fields) - 1, 2):
            known = fields[i + 1]
            if type(known) is bool:
                self._gotack(sender, fields[i], known)

    def _gotack(self, sender: ClusterNode, job_id: object, known: bool) -> None:
        """Normal job: once every node that may hold a copy confirmed, DELJOB to all
        of them and delete. Dummy ACK: delete as soon as a node knows the job (it runs
        the GC), or once every node said it does not."""
        job = job_named(self.node, job_id)
        if job is None or job.state != ACKED or job.nodes_delivered is None:
            return
        delivered = job.nodes_delivered
        if job.nodes_confirmed is None:  # a SETACK sent outside of a GC attempt
            job.nodes_confirmed = node_id_set((self.node.id,))
        confirmed = job.nodes_confirmed
        if not delivered:  # dummy ACK
            if known:
                self.node.unregister(job)
                return
            confirmed.add(sender.id)
            if confirmed.issuperset(self.bus.known_ids()):
                self.node.unregister(job)
            return
        if known or sender.id in delivered:
            job.nodes_delivered = delivered = with_holders(delivered, (sender.id,))
            confirmed.add(sender.id)
        if confirmed >= delivered:
            delete_everywhere(self.node, self.bus, job)

    def _on_deljob(self, sender: ClusterNode, fields: list[Any]) -> None:
        """Each job ID: delete the job."""
        node = self.node
        for job_id in fields:
            job = job_named(node, job_id)
            if job is not None:
                if job.state == WAIT_REPL:
                    self.copies.job_dropped(job)
                node.unregister(job)


def _id_and_count(job_id: object, count: object) -> tuple[bytes, int] | None:
    if (type(job_id) is not bytes or not is_valid_job_id(job_id)
            or type(count) is not int or not 0 <= count <= MAX_U32):
        return None
    return job_id, count


def _has_job(job: Job | None) -> bool:
    """GOTACK's "known". A dummy ACK here knows nothing of the job: answering "known"
    would let two dummy ACKs delete each other while the real holders are unreachable
    (Disque answers "known" for any job; disq answers for real ones only)."""
    return job is not None and (job.body is not None or bool(job.nodes_delivered))


# -- shared by the message families ----------------------------------------------------
def job_in(node: Node, fields: list[Any]) -> Job | None:
    """The job named by a message's first field, if valid and known here."""
    return job_named(node, fields[0]) if fields else None


def job_named(node: Node, job_id: object) -> Job | None:
    """The job of `job_id` (a message's field), if a valid ID known here."""
    if type(job_id) is not bytes or not is_valid_job_id(job_id):
        return None
    return node.lookup(job_id)


def holder_count(job: Job) -> int:
    """How many nodes may hold the job, as far as this node knows (SETACK's aux)."""
    return len(job.nodes_delivered) if job.nodes_delivered is not None else 1


def send_setack(bus: BusPort, node_id: str, job: Job) -> None:
    bus.send_batched((node_id,), m.SETACK, [job.id, holder_count(job)])


def learn_holders(node: Node, job: Job, node_ids: Iterable[str]) -> None:
    delivered = job.nodes_delivered
    if delivered is None:
        delivered = node.only_me
    elif not delivered and job.state == ACKED:
        job.nodes_confirmed = None  # a dummy ACK found holders: a fresh GC round
    job.nodes_delivered = with_holders(delivered, node_ids)


def delete_everywhere(node: Node, bus: BusPort, job: Job) -> None:
    """DELJOB to every node that may hold a copy (best effort), delete it here."""
    if job.nodes_delivered:
        bus.send_batched(job.nodes_delivered, m.DELJOB, [job.id])
    if job.ext is not None and job.state == WAIT_REPL:  # a batch's member whose ADDJOB failed
        node.member_ended(job, VOID)
    node.unregister(job)
