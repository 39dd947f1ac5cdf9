"""What every node keeps in its cluster config file (nodes.conf) beside the nodes, for
a node without the AOF: CRON's schedules, the queue policies (QPOLICY), the topics'
subscriptions and the queues' purges (QDEL, QPURGE), a record each after the node
lines (disq/cluster/nodes.py), `cron`, `qpolicy`, `topic` or `purge` and the entry's
msgpack (its bus form). Read at start-up; written with the nodes
(Membership.save) at most once a second after a change, and at shutdown. A new or
changed definition is fsynced; a change of state only (a schedule's fired tick) is
written without an fsync (a process kill keeps it, the page cache has it): at most a
second of fired ticks is unknown to a machine that lost power, and the catch-up rule
(CronTable.load) fires the newest missed tick once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgpack

from ..cluster.membership import Membership
from ..cluster.nodes import read_records
from ..node import Node, now_ms
from ..policies import QueuePolicy
from ..purges import Purge
from ..schedules import CronSchedule
from ..topics import Subscription, subscription_key

log = logging.getLogger("disq")

SAVE_PERIOD_MS = 1000


class Entry(Protocol):
    """A schedule, a policy, a subscription or a purge: versioned, with a bus form."""

    @property
    def version(self) -> int: ...

    @property
    def deleted(self) -> bool: ...

    def to_wire(self) -> list[Any]: ...


class _Kind:
    def __init__(self, name: str, entries: Callable[[], Iterable[Entry]],
                 key: Callable[[Any], bytes], decode: Callable[[object], Entry | None],
                 load: Callable[[Any, int], object]) -> None:
        self.name = name
        self.entries = entries  # every entry to save
        self.key = key  # an entry's name in its table
        self.decode = decode  # from_wire
        self.load = load  # an entry read at start-up, into the node


class ConfigRecords:
    def __init__(self, membership: Membership, node: Node) -> None:
        self.membership = membership
        self.node = node
        self.dirty = False
        self._fsync = False  # a definition changed since the last save
        self._saved_at = 0
        # (kind, key) -> (version, deleted) as last saved: a new one is a definition
        self._versions: dict[tuple[str, bytes], tuple[int, bool]] = {}
        self.kinds = [
            _Kind("cron", lambda: node.schedules.schedules.values(),
                  lambda s: s.name, CronSchedule.from_wire, node.wakeups.load_schedule),
            _Kind("qpolicy", lambda: node.policies.policies.values(),
                  lambda p: p.queue, QueuePolicy.from_wire, node.load_policy),
            _Kind("topic", lambda: node.topics.entries.values(), subscription_key,
                  Subscription.from_wire, lambda s, now: node.topics.merge(s)),
            # applied to the jobs the AOF brings back once it is loaded (Server.start)
            _Kind("purge", lambda: node.policies.purges.entries.values(),
                  lambda p: p.queue, Purge.from_wire,
                  lambda p, now: node.policies.purges.merge(p)),
        ]
        membership.records = self._records

    def load(self) -> int:
        """The entries of the last run; how many."""
        path = self.membership.config_path
        try:
            records = read_records(path)
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("Can't read the records of %s: %s", path, exc)
            return 0
        count = 0
        now = now_ms()
        for kind in self.kinds:
            for payload in records.get(kind.name, []):
                try:
                    item = msgpack.unpackb(payload, raw=False)
                except (ValueError, msgpack.UnpackException):
                    item = None
                entry = kind.decode(item)
                if entry is None:
                    log.warning("Skipping a %s record of %s that does not decode",
                                kind.name, path)
                    continue
                kind.load(entry, now)
                self._versions[(kind.name, kind.key(entry))] = (entry.version,
                                                                entry.deleted)
                count += 1
        return count

    def changed(self, kind: str, key: bytes, version: int, deleted: bool) -> None:
        self.dirty = True
        if self._versions.get((kind, key)) != (version, deleted):
            self._fsync = True

    def cron(self, now: int) -> None:
        if self.dirty and now - self._saved_at >= SAVE_PERIOD_MS:
            self.save(now)

    def save(self, now: int, fsync: bool | None = None) -> None:
        try:
            self.membership.save(fsync=self._fsync if fsync is None else fsync)
        except OSError as exc:
            log.warning("Can't save the cluster config %s: %s",
                        self.membership.config_path, exc)
            return
        self.dirty = self._fsync = False
        self._saved_at = now

    def _records(self) -> list[tuple[str, bytes]]:
        """What Membership.save writes after the nodes (on any save of nodes.conf)."""
        out = []
        versions = {}
        for kind in self.kinds:
            for entry in kind.entries():
                versions[(kind.name, kind.key(entry))] = (entry.version, entry.deleted)
                out.append((kind.name, msgpack.packb(entry.to_wire())))
        self._versions = versions
        return out
