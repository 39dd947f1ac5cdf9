"""Topics (TOPIC SUBSCRIBE / UNSUBSCRIBE / LIST / PUBLISH, disq extensions): which
queues subscribe to which topic. Sans-IO: every node holds every subscription (the
table spreads as CRON's schedules do: replication/topics.py), and TOPIC PUBLISH adds
one job to each subscribed queue (server/topic_service.py): a subscribed queue is a
consumer group, with its own RETRY, dead letters and rate.

A subscription's changes are ordered by `version` (ms, then the node that made it):
the newest wins everywhere; an unsubscription is a version too (a tombstone, kept
TOMBSTONE_MS so that an older copy cannot bring the subscription back).
"""

from __future__ import annotations

from typing import Any, Final

from .errors import DisqError
from .where import MAX_CONDITIONS, parse_condition

TOPIC_MAX_LEN: Final = 256
QUEUE_MAX_LEN: Final = 1024
MAX_SUBSCRIPTIONS: Final = 100_000  # live or tombstones, on every node
TOMBSTONE_MS: Final = 24 * 3600 * 1000


# A subscription's filter as given: its WHERE conditions' words (key, op(, value)).
Filter = tuple[tuple[bytes, ...], ...]


def parse_filter(args: list[bytes], start: int) -> Filter:
    """`WHERE key op value [WHERE ...]` from args[start] on (GETJOB's conditions): each
    condition's words. Raises as GETJOB's WHERE does."""
    conditions: list[tuple[bytes, ...]] = []
    j = start
    while j < len(args):
        if args[j].lower() != b"where" or len(conditions) >= MAX_CONDITIONS:
            raise DisqError("ERR", "TOPIC SUBSCRIBE takes WHERE key op value conditions "
                                   f"after the queue (at most {MAX_CONDITIONS})")
        _, after = parse_condition(args, j + 1)
        conditions.append(tuple(args[j + 1:after]))
        j = after
    return tuple(conditions)


class Subscription:
    """Queue `queue` receives a job for each publish to `topic` whose attributes match
    `where` (none: every publish); deleted: unsubscribed."""

    __slots__ = ("topic", "queue", "version", "origin", "deleted", "where", "_conditions")

    def __init__(self, topic: bytes, queue: bytes, version: int, origin: str,
                 deleted: bool = False, where: Filter = ()) -> None:
        self.topic = topic
        self.queue = queue
        self.version = version  # ms of the change
        self.origin = origin  # the node that made it (ties of `version`)
        self.deleted = deleted
        self.where = where
        self._conditions = [parse_condition(list(words), 0)[0] for words in where]

    def matches(self, attrs: dict[bytes, bytes] | None) -> bool:
        """Whether a publish with these attributes goes to this queue."""
        if not self._conditions:
            return True
        return attrs is not None and all(c.matches(attrs) for c in self._conditions)

    def filter_text(self) -> bytes:
        return b" AND ".join(b" ".join(words) for words in self.where)

    def newer_than(self, other: Subscription) -> bool:
        return (self.version, self.origin) > (other.version, other.origin)

    def to_wire(self) -> list[Any]:
        return [self.topic, self.queue, self.version, self.origin, self.deleted,
                [list(words) for words in self.where]]

    @classmethod
    def from_wire(cls, data: object) -> Subscription | None:
        """`to_wire`'s subscription, or None if anything is off (a peer's message)."""
        if type(data) is not list or len(data) not in (5, 6):
            return None
        topic, queue, version, origin, deleted = data[:5]
        where: Filter = ()
        if len(data) == 6:
            words = data[5]
            if not (type(words) is list and len(words) <= MAX_CONDITIONS
                    and all(type(w) is list and 2 <= len(w) <= 3
                            and all(type(x) is bytes and len(x) <= 1024 for x in w)
                            for w in words)):
                return None
            where = tuple(tuple(w) for w in words)
        if not (type(topic) is bytes and 0 < len(topic) <= TOPIC_MAX_LEN
                and type(queue) is bytes and 0 < len(queue) <= QUEUE_MAX_LEN
                and type(version) is int and version >= 0
                and type(origin) is str and len(origin) <= 64 and type(deleted) is bool):
            return None
        try:
            return cls(topic, queue, version, origin, deleted, where)
        except DisqError:  # a condition that does not parse
            return None


def subscription_key(subscription: Subscription) -> bytes:
    """Its key among nodes.conf's records: the topic's length, the topic, the queue
    (any bytes in either: the length tells them apart)."""
    return b"%d:%s%s" % (len(subscription.topic), subscription.topic, subscription.queue)


class TopicTable:
    """Every subscription this node knows, by (topic, queue)."""

    __slots__ = ("entries", "_by_topic")

    def __init__(self) -> None:
        self.entries: dict[tuple[bytes, bytes], Subscription] = {}
        self._by_topic: dict[bytes, list[bytes]] = {}  # live queues, in subscription order

    def __len__(self) -> int:
        return len(self._by_topic)

    def subscribers(self, topic: bytes) -> list[bytes]:
        """The queues subscribed to `topic`, oldest subscription first."""
        return self._by_topic.get(topic, [])

    def subscription(self, topic: bytes, queue: bytes) -> Subscription | None:
        return self.entries.get((topic, queue))

    def topics(self) -> dict[bytes, list[bytes]]:
        return self._by_topic

    def change(self, topic: bytes, queue: bytes, deleted: bool, origin: str,
               now: int, where: Filter = ()) -> Subscription | None:
        """SUBSCRIBE (deleted False; a new filter replaces the old) or UNSUBSCRIBE
        here: the new version, or None if it changes nothing (subscribed already with
        that filter; not subscribed)."""
        mine = self.entries.get((topic, queue))
        live = mine is not None and not mine.deleted
        if live != deleted and not (live and not deleted and mine is not None
                                    and mine.where != where):
            return None
        if mine is None and len(self.entries) >= MAX_SUBSCRIPTIONS:
            self.sweep(now)
            if len(self.entries) >= MAX_SUBSCRIPTIONS:
                raise DisqError("ERR", f"too many subscriptions (at most "
                                       f"{MAX_SUBSCRIPTIONS} in the cluster)")
        version = now if mine is None or now > mine.version else mine.version + 1
        subscription = Subscription(topic, queue, version, origin, deleted, where)
        self.merge(subscription)
        return subscription

    def merge(self, subscription: Subscription) -> bool:
        """Take `subscription` if it is newer than this node's. True if it changed."""
        key = (subscription.topic, subscription.queue)
        mine = self.entries.get(key)
        if mine is not None and not subscription.newer_than(mine):
            return False
        if mine is None and len(self.entries) >= MAX_SUBSCRIPTIONS:
            return False
        self.entries[key] = subscription
        queues = self._by_topic.get(subscription.topic)
        if subscription.deleted:
            if queues is not None and subscription.queue in queues:
                queues.remove(subscription.queue)
                if not queues:
                    del self._by_topic[subscription.topic]
        elif queues is None:
            self._by_topic[subscription.topic] = [subscription.queue]
        elif subscription.queue not in queues:
            queues.append(subscription.queue)
        return True

    def sweep(self, now: int) -> None:
        """Forget the tombstones older than TOMBSTONE_MS."""
        old = [key for key, s in self.entries.items()
               if s.deleted and s.version + TOMBSTONE_MS < now]
        for key in old:
            del self.entries[key]
