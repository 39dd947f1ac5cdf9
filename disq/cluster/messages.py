"""Bus message types (Disque's numbering) and the frame format.

A frame is a 4-byte big-endian length followed by a msgpack array:
`[VERSION, sender_id, sender_port, sender_flags, messages]`, where `sender_flags` is
a list of flag names ("leaving", ...) and `messages` a list of `[type, *fields]`.
With cluster-secret, a link's frames after its handshake end with a 16-byte tag
(session.py), counted in the length.
One frame carries every message a link has to send in a loop turn, so a thousand
GOTJOBs cost one encode, one write and one decode. The fields of each type are
listed below.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn, Protocol

import msgpack

from ..job import MAX_BODY

VERSION: Final = 8  # 2: REPLJOB carries many jobs and their holders once; 3: DEDUP checks;
#             4: a DEDUP copy carries how long its ADDJOB may still fail (settled rule);
#             5: PING/MEET/PONG carry wall-clock timestamps (clock offsets, clocks.py),
#                jobs carry their extended fields (PRIORITY, GROUP, due time);
#             6: jobs' extended fields may carry MAXDELIVERIES and a dead letter's
#                state; QUEUED and WILLQUEUE may carry more fields (back-off, generation);
#             7: SETACK, GOTACK and DELJOB carry the jobs of one loop turn;
#             8: the cluster-secret handshake binds both challenges and node IDs, and
#                the frames after it carry a tag (session.py); DEDUP keys are
#                scoped to their queue
# A frame longer than this closes the link. It carries a copy of the biggest job body
# (job-max-body at most job.MAX_BODY) and its fields; a sender splits what it has to
# send in a loop turn into frames of about FRAME_SPLIT bytes (link.frames), a copy
# alone in its frame when it is bigger, so no turn's frames pass it. What a stranger
# may make a node allocate with it is bounded by the checks below (DECODED_MAX...).
MAX_FRAME: Final = MAX_BODY + 1024 * 1024
FRAME_SPLIT: Final = 8 * 1024 * 1024
# Before a link has proven the cluster secret it may only send the handshake: frames
# of AUTH (a 16-byte nonce) and AUTH_PROOF (a 32-byte HMAC), ~100 bytes each.
MAX_HANDSHAKE_FRAME: Final = 512
# A frame up to this long is decoded as is: even of the costliest msgpack (one-byte
# empty arrays, 64 bytes each once decoded) it makes at most 16 MB of objects. A longer
# one may not decode into objects taking more than LIST_BYTES_PER_BYTE times its
# length, nor more than DECODED_MAX: the C extension disq._msgcost counts what its
# objects would take from its bytes (one pass, nothing built), and a frame over it is
# refused before it is decoded. Without the extension (no compiler), only its lists
# are counted: by _lists_fit (one pass in C) up to PRECOUNT_MAX, else (or if that
# cannot tell) by _ListBudget (a call per list, as they are built).
PLAIN_DECODE_MAX: Final = 256 * 1024
LIST_BYTES_PER_BYTE: Final = 20  # what a frame may decode into, per byte of it
# The densest legit frames (DEDUP replies, PAUSEs of one-byte names) take ~15 times
# their length; frames this big are mostly job bodies (copies of small jobs: ~5).
DECODED_MAX: Final = 256 * 1024 * 1024
PRECOUNT_MAX = 8 * 1024 * 1024  # (longer frames are mostly job bodies: few lists)

PING: Final = 0  # fields: [gossip, sent us]  gossip = [[id, ip, port, flags, ping_sent,
#           pong_received], ...]; sent: the sender's wall clock (us) as it made the PING
PONG: Final = 1  # fields: [gossip, the PING's sent us, received us]  received: the answering
#           node's wall clock (us) as it got the PING (both absent if the PING had none)
MEET: Final = 2  # fields: [gossip, sent us]  a PING that makes the receiver add the sender
FAIL: Final = 3  # fields: [failing node id]
REPLJOB: Final = 4  # fields: [noreply(bool), [holder ids], job copy, ...] (wire.encode_copy;
#              a copy of an ADDJOB with DEDUP ends with its scoped key, then, if the ADDJOB
#              waits for its copies, whether the receiver must check the key and the
#              ms the ADDJOB may still fail (0: no timeout): see replication/dedup_checks.py)
GOTJOB: Final = 5  # fields: [job id, ...] (the confirmations of one loop turn)
ENQUEUE: Final = 6  # fields: [job id, delay s]
QUEUED: Final = 7  # fields: [job id, flags (INCR_NACKS=2 / INCR_DELIV=4)(, not before ms,
#            generation(, error))]  not before: queued after a back-off ending then
#            (the sender's clock, 0: now); generation: of the sender's copy (JOBMOVE);
#            error: [delivery, unix ms, reason] of the NACK ... ERROR that requeued it
SETACK: Final = 8  # fields: [job id, may-have count, ...] (the pairs of one loop turn)
WILLQUEUE: Final = 9  # fields: [job id(, generation)]
GOTACK: Final = 10  # fields: [job id, known(bool), ...] (the pairs of one loop turn)
DELJOB: Final = 11  # fields: [job id, ...] (the jobs of one loop turn)
NEEDJOBS: Final = 12  # fields: [queue, count, wait ms(, better than)]  wait: how long the
#               asker's consumers still wait (0: none wait); without it (a disq before
#               NEEDJOBS_CANCEL), as long as federation.WANTED_FOR_MS. better than: only
#               jobs more urgent than this priority (the asker's best: QBEST below)
YOURJOBS: Final = 13  # fields: [[serialized job, ...]]
WORKING: Final = 14  # fields: [job id(, progress (-1: none), progress data or nil)] (the
#             progress: WORKING ... PROGRESS / DATA, a disq extension an older node ignores)
PAUSE: Final = 15  # fields: [queue, flags]
# With cluster-secret only: the first message each way on a new link, then the proof,
# each alone in its frame (session.py).
AUTH: Final = 16  # fields: [nonce (16 random bytes)]
AUTH_PROOF: Final = 17  # fields: [HMAC-SHA256(secret, label + role + both nonces and IDs)]
QLEN_REQUEST: Final = 18  # fields: [request id, queue]  (GLOBALQLEN)
QLEN_REPLY: Final = 19  # fields: [request id, queue length on the sender]
# disq extensions (ADDJOB DEDUP), unknown to Disque. A key is scoped to its queue
# (dedup.scoped_key: the key's length in 2 bytes, the key, the queue); a copy's key
# must be scoped to the copy's own queue.
DEDUP_QUERY: Final = 20  # fields: [[key, ttl s], ...] (the keys of one loop turn): known?
DEDUP_REPLY: Final = 21  # fields: [[key, job id or nil, ms left or -1 = busy], ...] one per key
DEDUP_FORGET: Final = 22  # fields: [key, job id]  that ADDJOB failed: drop the key if it names it
DEDUP_CONFLICT: Final = 23  # fields: [job id, ...]  copies refused: their DEDUP key may exist
# disq extension (federation): the last consumer waiting on the queue left: forget my
# NEEDJOBS. A node that does not know it ignores it (and the third NEEDJOBS field), so
# the bus VERSION is unchanged: it only makes pushes stop sooner.
NEEDJOBS_CANCEL: Final = 24  # fields: [queue]
# disq extension (ADDJOB DEDUP): the sender's ADDJOBs of these jobs succeeded, so the
# receiver may answer their DEDUP keys (replication/dedup_checks.py). Unknown: ignored.
DEDUP_SETTLED: Final = 25  # fields: [job id, ...] (the ADDJOBs settled in one loop turn)
# disq extension (CRON, replication/schedules.py). Unknown: ignored.
CRON_SET: Final = 26  # fields: [schedule] (schedules.CronSchedule.to_wire): defined or deleted
CRON_SYNC: Final = 27  # fields: [[schedule, ...]] every schedule the sender knows
CRON_FIRED: Final = 28  # fields: [name, tick ms, job id]: that tick's job exists
# disq extension (JOBSET, replication/jobset.py). Unknown: ignored (the copies of an
# older node keep their fields). priority, due: nil when unchanged; due: Unix ms of
# the sender's clock.
JOBSET: Final = 29  # fields: [job id, priority, due]: the sender changed its copy, change yours
JOBSET_ASK: Final = 30  # fields: [request id, job id, priority, due]: if you hold the job,
#                  change it, then JOBSET_REPLY
JOBSET_REPLY: Final = 31  # fields: [request id, status (0 applied, 1 unknown, 2 refused),
#                    the refusal's error text ("ERR ...") or "", [the job's holders' IDs]
#                    (applied; else empty)]
# disq extensions (dead letters, QPOLICY, RATE; replication/failures.py).
# Unknown: ignored.
JOBMOVE: Final = 32  # fields: [job id, queue, dead from or nil, reason or nil, generation,
#              nacks, deliveries(, [[delivery, unix ms, error], ...])]: the sender
#              moved the job (a dead letter, or one put back): take it if its
#              generation is newer than your copy's; the errors (NACK ... ERROR) it
#              holds, to keep with yours
QPOLICY_SET: Final = 33  # fields: [policy] (policies.QueuePolicy.to_wire): set or deleted
QPOLICY_SYNC: Final = 34  # fields: [[policy, ...]] every policy the sender knows
RATE_DEMAND: Final = 35  # fields: [[queue, demand], ...] the sender's demand for rate-limited
#                  queues (ratelimit.py); [queue, demand, jobs running there] for a
#                  CONCURRENCY queue (concurrency.py; an older node skips those);
#                  [queue, demand, running, [[group, running], ...]] for a
#                  GROUP-CONCURRENCY / GROUP-RATE queue (grouplimits.py; the same)
DLQ_REQUEUE: Final = 36  # fields: [request id, queue, count (0: all)]: put back your dead letters
DLQ_REQUEUE_REPLY: Final = 37  # fields: [request id, how many were put back]
JOBMOVE_ASK: Final = 38  # fields: [job id, generation]: my copy is of this generation; if
#                  yours is newer, send me your JOBMOVE
# disq extension (the dashboard; replication/stats.py). Unknown: ignored.
STATS_REQUEST: Final = 39  # fields: [request id]: send me your stats
STATS_REPLY: Final = 40  # fields: [request id, stats] (stats.NodeStats.to_wire)
# disq extension (users and permissions; replication/users.py). Unknown:
# ignored.
ACL_SET: Final = 41  # fields: [user] (acl.User.to_wire: name, version ms, version node,
#              deleted, rules): set or deleted
ACL_SYNC: Final = 42  # fields: [[user, ...]] every user changed by a command the sender knows
# disq extension (replication/placement.py): the sender got the ENQUEUEs of these jobs
# (applied, or not for them); the node that sent them stops sending them again.
# Unknown: ignored.
ENQUEUED: Final = 43  # fields: [job id, ...] (the ENQUEUEs of one loop turn)
# disq extension (replication/tables.py): a CRON_SET, QPOLICY_SET or ACL_SET carries a
# request ID as its second field; the receiver merged it and says so. A node that does
# not know them ignores the ID (and these): the change's command then answers -NOREPL.
CRON_HELD: Final = 44  # fields: [request id]
QPOLICY_HELD: Final = 45  # fields: [request id]
ACL_HELD: Final = 46  # fields: [request id]
# disq extension (federation): the most urgent priority queued on the sender for that
# queue (NO_PRIORITY 256: none), sent when it changes and in answer to a NEEDJOBS for
# jobs more urgent than the sender has. A NEEDJOBS's fourth field asks for jobs more
# urgent than it says only. Unknown: ignored (and the consumers' order stays per node).
QBEST: Final = 47  # fields: [queue, priority]
# disq extension (replication/provisional.py): a holder of a copy of an ADDJOB ... DEDUP
# whose success it has not heard of asks the job's other holders. Unknown: ignored
# (the copy waits until its TTL).
JOB_CHECK: Final = 48  # fields: [job id, ...]: do you have these jobs?
JOB_CHECK_REPLY: Final = 49  # fields: [[job id, status (0 exists, 1 not here, 2 not
#                        settled here either)], ...]
# disq extension (results, WAITJOB: replication/acks.py, replication/ends.py). Unknown:
# ignored (an older node keeps no result and answers no WAITJOB's question; the
# sender's GC sends it plain SETACKs again).
SETACK_RESULT: Final = 50  # fields: [job id, may-have count, result, ttl ms, ...]: SETACK,
#                   keeping the job's result for that long
ENDS_ASK: Final = 51  # fields: [wait id, lease ms, job id, ..., round]: how did these
#              jobs end? watch those you hold for the lease (round: which round of the
#              ask, an int an older node skips; none from an older node)
ENDS: Final = 52  # fields: [wait id, [job id, state, result or error or nil, queue or nil],
#          ..., [round]]: the answer to ENDS_ASK's round, or ([0]) a watched job that
#          ended (no [round] from an older node: either); an active job's progress
#          (WORKING ... PROGRESS) as a [job id, progress] item after its entry (short
#          lists an older node skips)
ENDS_GONE: Final = 55  # fields: [wait id, job id, ...]: jobs watched for that ENDS_ASK
#               left this node without ending here (moved by federation, expired,
#               deleted, evicted): ask elsewhere. Unknown: ignored (the asker learns at
#               its next ask, every ends.LEASE_MS / 2)
# disq extension (batches: replication/batches.py). Unknown: ignored (an older node
# neither holds batches nor takes their members).
BATCH_SET: Final = 60  # fields: [batch(, request id)] (batches.Batch.to_wire)
BATCH_SYNC: Final = 61  # fields: [[batch, ...]] every batch the sender knows, no members
BATCH_HELD: Final = 62  # fields: [request id]
BATCH_CLOSE: Final = 63  # fields: [request id, batch id]: take no new member of it, and
#               say which members you held and which ended
BATCH_MEMBERS: Final = 64  # fields: [request id, batch id, [job id, ...], [[job id, how],
#                 ...]]: the answer to BATCH_CLOSE
BATCH_ENDED: Final = 65  # fields: [[batch id, job id, how], ...]: members that ended (told
#               to every node, or the answer to BATCH_ENDS_ASK)
BATCH_ENDS_ASK: Final = 66  # fields: [request id, batch id, job id, ...]: which of these
#                  members ended? (answered with a BATCH_ENDED of those that did)
BATCH_FETCH: Final = 67  # fields: [batch id]: send me the batch with its members (a
#               BATCH_SET)
# disq extension (QDEL / QPURGE: replication/purges.py). Unknown: ignored.
PURGE_SET: Final = 70  # fields: [purge(, request id)] (purges.Purge.to_wire)
PURGE_SYNC: Final = 71  # fields: [[purge, ...]] every one the sender knows
PURGE_HELD: Final = 72  # fields: [request id]: merged, its jobs deleted here
# disq extension (topics: replication/topics.py). Unknown: ignored.
TOPIC_SET: Final = 73  # fields: [subscription(, request id)] (topics.Subscription.to_wire)
TOPIC_SYNC: Final = 74  # fields: [[subscription, ...]] every one the sender knows
TOPIC_HELD: Final = 75  # fields: [request id]
# disq extension (REPLAY's reads of retained jobs: replication/retention.py). Unknown:
# ignored (the asker counts the node as not answering).
RETAINED_ASK: Final = 80  # fields: [request id, queue, from ms, to ms, after ctime, after
#                id, count, [where key, op, value, ...]]
RETAINED_PAGE: Final = 81  # fields: [request id, error or "", more, [retained job, ...]]

NAMES: Final = {
    PING: "ping", PONG: "pong", MEET: "meet", FAIL: "fail", REPLJOB: "repljob",
    GOTJOB: "gotjob", ENQUEUE: "enqueue", QUEUED: "queued", SETACK: "setack",
    WILLQUEUE: "willqueue", GOTACK: "gotack", DELJOB: "deljob", NEEDJOBS: "needjobs",
    YOURJOBS: "yourjobs", WORKING: "working", PAUSE: "pause", AUTH: "auth",
    AUTH_PROOF: "auth-proof", QLEN_REQUEST: "qlen-request", QLEN_REPLY: "qlen-reply",
    DEDUP_QUERY: "dedup-query", DEDUP_REPLY: "dedup-reply", DEDUP_FORGET: "dedup-forget",
    DEDUP_CONFLICT: "dedup-conflict", NEEDJOBS_CANCEL: "needjobs-cancel",
    DEDUP_SETTLED: "dedup-settled", CRON_SET: "cron-set", CRON_SYNC: "cron-sync",
    CRON_FIRED: "cron-fired", JOBSET: "jobset", JOBSET_ASK: "jobset-ask",
    JOBSET_REPLY: "jobset-reply", JOBMOVE: "jobmove", QPOLICY_SET: "qpolicy-set",
    QPOLICY_SYNC: "qpolicy-sync", RATE_DEMAND: "rate-demand", DLQ_REQUEUE: "dlq-requeue",
    DLQ_REQUEUE_REPLY: "dlq-requeue-reply", JOBMOVE_ASK: "jobmove-ask",
    STATS_REQUEST: "stats-request", STATS_REPLY: "stats-reply",
    ACL_SET: "acl-set", ACL_SYNC: "acl-sync", ENQUEUED: "enqueued",
    CRON_HELD: "cron-held", QPOLICY_HELD: "qpolicy-held", ACL_HELD: "acl-held",
    QBEST: "qbest", JOB_CHECK: "job-check", JOB_CHECK_REPLY: "job-check-reply",
    SETACK_RESULT: "setack-result", ENDS_ASK: "ends-ask", ENDS: "ends",
    ENDS_GONE: "ends-gone",
    BATCH_SET: "batch-set", BATCH_SYNC: "batch-sync", BATCH_HELD: "batch-held",
    BATCH_CLOSE: "batch-close", BATCH_MEMBERS: "batch-members", BATCH_ENDED: "batch-ended",
    BATCH_ENDS_ASK: "batch-ends-ask", BATCH_FETCH: "batch-fetch",
    PURGE_SET: "purge-set", PURGE_SYNC: "purge-sync", PURGE_HELD: "purge-held",
    TOPIC_SET: "topic-set", TOPIC_SYNC: "topic-sync", TOPIC_HELD: "topic-held",
    RETAINED_ASK: "retained-ask", RETAINED_PAGE: "retained-page",
}

_LEN: Final = struct.Struct(">I")


def _pack_other(obj: object) -> list[Any]:
    """Sets (a job's holders) go as arrays."""
    if isinstance(obj, (frozenset, set)):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__} on the bus")


# One Packer for every frame: msgpack.packb builds a new one per call, which costs
# more than encoding a small frame. Frames are encoded on the event loop only. Its
# buffer grows to the biggest thing it packed and stays: after one bigger than
# PACKER_KEPT (a big job's copy: 200 MB kept for a 100 MB body) it is replaced.
PACKER_KEPT: Final = 4 * 1024 * 1024


def _new_packer() -> Callable[[object], bytes]:
    pack: Callable[[object], bytes] = msgpack.Packer(use_bin_type=True,
                                                     default=_pack_other).pack
    return pack


_pack = _new_packer()


# Messages of these types are PackedMessages (see below) in a link's queue: their items
# go to several peers (a copy of a job to each of its holders), so each is packed once.
PACKED_ONCE: Final = frozenset({REPLJOB})
# Batches (ClusterBus.send_batched) that must not pass a REPLJOB batch queued after them
# (link.Outbox.copies_at): they would delete or ack a job before its copy arrives.
BEHIND_COPIES: Final = frozenset({SETACK, SETACK_RESULT, DELJOB})


def array_header(length: int) -> bytes:
    """The msgpack header of an array of `length` items (its items follow it)."""
    if length < 16:
        return _FIXARRAYS[length]
    if length < 0x10000:
        return _ARRAY16.pack(0xdc, length)
    return _ARRAY32.pack(0xdd, length)


_FIXARRAYS: Final = [bytes((0x90 | n,)) for n in range(16)]
_ARRAY16: Final = struct.Struct(">BH")
_ARRAY32: Final = struct.Struct(">BI")


def _renew_packer() -> None:
    global _pack
    _pack = _new_packer()


def pack_items(items: list[Any]) -> bytes:
    """The items' msgpack encodings one after the other: what follows the header of
    an array of them (msgpack is concatenative)."""
    packed: bytes = _pack(items)
    if len(packed) > PACKER_KEPT:
        _renew_packer()
    return packed[len(array_header(len(items))):]


class PackedMessage:
    """A message `[mtype, *head, item, ...]` of a link's queue kept msgpack-encoded:
    items join it as bytes, packed once for all the links they go to. It packs
    into a frame as the list would, byte for byte (encode_frame)."""

    __slots__ = ("length", "head", "items", "fields")

    def __init__(self, head: bytes, length: int) -> None:
        self.head = head  # pack_head's
        self.length = length  # of the list it stands for: the type, the head's fields
        self.fields = length  # the type and the head's fields
        self.items: list[bytes] = []  # their encodings (a list: bytearray += costs more)

    def add(self, packed: bytes, count: int) -> None:
        """Append `count` items whose encodings are `packed` (pack_items)."""
        self.items.append(packed)
        self.length += count


def pack_head(mtype: int, head: tuple[Any, ...]) -> bytes:
    """The encoding of a PackedMessage's first fields (`mtype`, `*head`)."""
    return pack_items([mtype, *head])


def frame_prefix(sender_id: str, sender_port: int, sender_flags: list[str]) -> bytes:
    """The frame's bytes before its messages (the same for every frame of a sender
    until its flags change)."""
    return array_header(5) + pack_items([VERSION, sender_id, sender_port, sender_flags])


def encode_frame(sender_id: str, sender_port: int, sender_flags: list[str],
                 messages: list[Any]) -> bytes:
    return frame(frame_prefix(sender_id, sender_port, sender_flags), messages)


def frame(prefix: bytes, messages: list[Any], tag_len: int = 0) -> bytes:
    """The frame of `messages` (lists, or PackedMessages) after `prefix` (frame_prefix):
    the bytes `_pack([VERSION, sender_id, sender_port, sender_flags, messages])` makes
    of the same messages as lists. The lists between two PackedMessages are packed in
    one call. `tag_len`: the length counts a tag of that many bytes, sent after."""
    parts = [b"", prefix, array_header(len(messages))]
    start = 0
    for i, message in enumerate(messages):
        if type(message) is PackedMessage:
            if start < i:
                parts.append(pack_items(messages[start:i]))
            packed: PackedMessage = message
            parts.append(array_header(packed.length))
            parts.append(packed.head)
            parts += packed.items
            start = i + 1
    if start == 0:
        parts[2] = whole = _pack(messages)  # no PackedMessage: the header is the list's
        if len(whole) > PACKER_KEPT:
            _renew_packer()
    elif start < len(messages):
        parts.append(pack_items(messages[start:]))
    length = tag_len
    for part in parts:  # (a loop: sum(map(len, parts)) costs ~2k instructions)
        length += len(part)
    parts[0] = _LEN.pack(length)
    return b"".join(parts)


class FrameError(Exception):
    """A frame that is not ours or is corrupt: the link is closed."""


def _no_map(_: object) -> NoReturn:
    raise ValueError("a map (the bus never sends one)")


def _no_ext(code: int, _: bytes) -> NoReturn:
    raise ValueError(f"an ext type {code} (the bus never sends one)")


# Maps and ext types are not part of the protocol: refused, and so they cost nothing
# to legit frames (an empty map is one byte that decodes into a 64-byte dict).
_DECODE: Final = {"raw": False, "use_list": True, "max_map_len": 0, "max_ext_len": 0,
           "object_hook": _no_map, "ext_hook": _no_ext}


def decoded_budget(length: int) -> int:
    """What a frame of `length` bytes may decode into (bytes of Python objects)."""
    return min(LIST_BYTES_PER_BYTE * length, DECODED_MAX)


def _load_cost() -> Callable[[bytearray, int, int, int], int] | None:
    """disq._msgcost.cost, if the extension was built (it is optional, as _gcfree)."""
    try:
        module = importlib.import_module("disq._msgcost")
    except ImportError:
        return None
    cost: Callable[[bytearray, int, int, int], int] = module.cost
    return cost


_cost = _load_cost()


class _ListBudget:
    """What the arrays of one frame may cost once decoded, without disq._msgcost. A
    msgpack array of n items becomes a list of 56 + 8n bytes however short the items
    are: an empty one is a byte that becomes 64, so 20 MB of them made 1.4 GB. Each
    list is charged as it is built (list_hook); the frame is refused once they cost
    its decoded_budget."""

    __slots__ = ("left",)

    def __init__(self, length: int) -> None:
        self.left = decoded_budget(length)

    def charge(self, items: list[Any]) -> list[Any]:
        self.left -= 56 + 8 * len(items)
        if self.left < 0:
            raise ValueError(f"its arrays would decode into more than {LIST_BYTES_PER_BYTE} "
                             "times its length")
        return items


# Every msgpack array starts with one of these bytes (fixarray, array 16, array 32).
_NOT_ARRAY_HEADS: Final = bytes(b for b in range(256) if not (0x90 <= b <= 0x9f or b in (0xdc, 0xdd)))


def _lists_fit(payload: bytearray) -> bool:
    """Whether the payload's lists are sure to fit their budget without counting them
    as they are built (a call per list): there are no more of them than bytes that
    may start an array, and no more items than bytes. One pass in C, a fraction of
    what the calls cost to a big batch of small messages."""
    heads = len(payload.translate(None, _NOT_ARRAY_HEADS))
    return 56 * heads + 8 * len(payload) <= decoded_budget(len(payload))


class TagCheck(Protocol):
    """What checks the tags of a link's frames (session.TagsOfALink)."""

    def check(self, buf: bytes | bytearray, start: int, end: int) -> bool: ...


TAG_LEN: Final = 16  # a frame's tag, when its link has them (session.py)


class FrameReader:
    """Splits a byte stream into decoded frames, one at a time (`feed` is lazy), so
    that `max_frame` and `tags` may change between two frames: a link still proving
    the cluster secret takes only MAX_HANDSHAKE_FRAME, then MAX_FRAME, each frame
    checked against its tag before it is decoded."""

    __slots__ = ("_buf", "max_frame", "tags")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame
        self.tags: TagCheck | None = None

    def clear(self) -> None:
        """Drop what is buffered (the link is gone). A link is freed by the cycle
        collector (its output queue calls back into it), which may not run for a
        long while on an idle node: its unfinished frame, up to MAX_FRAME, must not
        wait for that."""
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[list[Any]]:
        """Buffer `data`; returns an iterator of the frames now complete, decoded one
        by one as they are asked for. A frame longer than `max_frame` raises
        FrameError from its length, before its bytes are waited for."""
        self._buf += data
        return self._frames()

    def _frames(self) -> Iterator[list[Any]]:
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= 4:
                (length,) = _LEN.unpack_from(buf, pos)
                if length > self.max_frame:
                    raise FrameError(f"frame of {length} bytes")
                end = pos + 4 + length
                if len(buf) < end:
                    break
                tags = self.tags
                if tags is not None:
                    end -= TAG_LEN
                    if length < TAG_LEN or not tags.check(buf, pos + 4, end):
                        raise FrameError("a frame that failed its authentication (forged, "
                                         "replayed or corrupt)")
                    message = _decode(buf, pos + 4, end)
                    end += TAG_LEN
                else:
                    message = _decode(buf, pos + 4, end)
                pos = end
                yield message
        finally:
            if pos:
                del buf[:pos]


def _new_unpacker() -> msgpack.Unpacker:
    """The decoder of frames up to PLAIN_DECODE_MAX, made once: unpackb parses its
    options on every call, which costs more than decoding a small frame. No array may
    claim more items than such a frame has bytes (msgpack allocates them up front)."""
    return msgpack.Unpacker(max_buffer_size=PLAIN_DECODE_MAX,
                            max_array_len=PLAIN_DECODE_MAX, **_DECODE)


_unpacker = _new_unpacker()


def _decode(buf: bytearray, start: int, end: int) -> list[Any]:
    """msgpack-decode the frame in buf[start:end] and check its shape. A long one is
    decoded in place (no copy), its arrays on a budget."""
    global _unpacker
    length = end - start
    unpacker = _unpacker
    offset = unpacker.tell()
    try:
        if length <= PLAIN_DECODE_MAX:
            unpacker.feed(buf[start:end])
            message = unpacker.unpack()
            if unpacker.tell() - offset != length:
                raise ValueError("extra bytes after its object")
        elif _cost is not None:
            budget = decoded_budget(length)
            if _cost(buf, start, end, budget) > budget:
                raise ValueError(f"its objects would decode into more than {budget} bytes")
            with memoryview(buf) as whole, whole[start:end] as data:
                message = msgpack.unpackb(data, **_DECODE)
        elif length <= PRECOUNT_MAX and _lists_fit(payload := buf[start:end]):
            message = msgpack.unpackb(payload, **_DECODE)
        else:
            with memoryview(buf) as whole, whole[start:end] as data:
                message = msgpack.unpackb(data, list_hook=_ListBudget(length).charge,
                                          **_DECODE)
    except Exception as exc:  # any decoding problem is a corrupt frame
        _unpacker = _new_unpacker()  # without what is left of that frame
        raise FrameError(f"undecodable frame: {exc}") from None
    if (isinstance(message, list) and message and message[0] != VERSION
            and type(message[0]) is int):
        raise FrameError(f"bus protocol version {message[0]}, this node speaks "
                         f"{VERSION} (all nodes must run the same disq version)")
    if (not isinstance(message, list) or len(message) != 5 or message[0] != VERSION
            or not isinstance(message[1], str) or type(message[2]) is not int
            or not isinstance(message[3], list) or not isinstance(message[4], list)):
        raise FrameError("malformed frame header")
    for item in message[4]:
        if not isinstance(item, list) or not item or type(item[0]) is not int:
            raise FrameError("malformed message")
    return message
