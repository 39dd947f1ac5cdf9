"""A kombu transport on disq, so that a Celery app uses `broker_url = "disq://host:7711"`.

Importing this module registers the `disq` scheme with kombu (kombu has no entry
points for transports): `import disq_client.kombu_transport` in the app's module, or
`broker_transport = "disq_client.kombu_transport:Transport"`.

Each kombu message is one disq job: the job's body is kombu's envelope (body, headers,
properties) as JSON, its queue the kombu queue. What maps to what:

- ack (Celery's `acks_late`: after the task ran) -> ACKJOB; a message not acked comes
  back after the job's RETRY, which is the transport option `visibility_timeout`
  (seconds), so a worker killed mid-task loses nothing.
- reject(requeue=True) -> NACK (queued again at once, a failed attempt counted);
  reject(requeue=False) -> ACKJOB (dropped, as kombu's other brokers do); the unacked
  messages a closing channel gives back -> ENQUEUE (queued again, no attempt counted).
- the `eta` header (Celery's ETA and countdown, `self.retry(countdown=...)` included)
  -> AT: the broker holds the job and never delivers it early, so a worker does not
  keep ETA tasks in memory.
- priority 0..9 -> PRIORITY 0..255 (0 the most urgent in both, as with kombu's Redis).
- several nodes: `disq://h1:7711;disq://h2:7711` (kombu's failover form); the
  disq_client Client learns the rest of the cluster from HELLO and fails over itself.
- draining blocks in GETJOB (one job at a time, so memory stays bounded and kombu's
  prefetch limit holds).

Fanout exchanges (Celery's remote control, events' broadcast) are not supported: run
workers with `worker_enable_remote_control = False` (or `--without-mingle
--without-gossip`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from datetime import datetime
from queue import Empty
from typing import Any
from urllib.parse import urlsplit

from kombu.transport import TRANSPORT_ALIASES, virtual

from .client import Client
from .errors import DisqConnectionError, DisqTimeoutError, NoJobError

__all__ = ["Channel", "QoS", "Transport", "celery_priority_to_disq", "eta_to_unix_ms",
           "seed_nodes"]

DEFAULT_PORT = 7711
# how long one GETJOB blocks at most: a drain with no timeout still returns now and
# then, so that kombu's loop can see the channel closed and heartbeats
MAX_BLOCK_MS = 1000
CELERY_MAX_PRIORITY = 9
DEFAULT_JOB_TTL = 86400  # seconds: the server's default TTL
DISQ_MAX_PRIORITY = 255


def celery_priority_to_disq(priority: int) -> int:
    """Celery's 0..9 (0 first, as with kombu's Redis) onto disq's 0..255 (0 first)."""
    clamped = min(max(priority, 0), CELERY_MAX_PRIORITY)
    return round(clamped * DISQ_MAX_PRIORITY / CELERY_MAX_PRIORITY)


def eta_to_unix_ms(eta: str) -> int:
    """Celery's `eta` header (ISO 8601; naive: local time, as Python reads it) in Unix
    ms, rounded up: the job is never delivered before its ETA."""
    return math.ceil(datetime.fromisoformat(eta).timestamp() * 1000)


def seed_nodes(hostname: str | None, port: int | None, alternates: Iterable[str]) -> list[str]:
    """The seed addresses: the connection's host:port, then every failover URL's."""
    seeds = [f"{hostname or 'localhost'}:{port or DEFAULT_PORT}"]
    for url in alternates:
        parts = urlsplit(url)
        seed = f"{parts.hostname or 'localhost'}:{parts.port or DEFAULT_PORT}"
        if seed not in seeds:
            seeds.append(seed)
    return seeds


class QoS(virtual.QoS):  # type: ignore[misc]
    """Acks go to the broker: a message's delivery tag is its job's ID."""

    def ack(self, delivery_tag: str) -> None:
        self.channel.client.ack(delivery_tag)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self.channel.client.nack(delivery_tag)
        else:
            self.channel.client.ack(delivery_tag)
        super().reject(delivery_tag, requeue=False)

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Give the delivered messages back at once (a warm shutdown): their jobs are
        queued again; left alone, their RETRY would bring them back later anyway."""
        self._flush()
        errors: list[tuple[BaseException, Any]] = []
        while self._delivered:
            tag, message = self._delivered.popitem()
            try:
                self.channel.client.enqueue(tag)
            except (DisqConnectionError, DisqTimeoutError) as exc:
                errors.append((exc, message))  # its RETRY brings it back
        return errors


class Channel(virtual.Channel):  # type: ignore[misc]
    QoS = QoS
    do_restore = True
    supports_fanout = False

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        conninfo = self.connection.client
        options = conninfo.transport_options
        seeds = seed_nodes(conninfo.hostname, conninfo.port, conninfo.alt or ())
        settings: dict[str, Any] = {"password": conninfo.password or None}
        if conninfo.connect_timeout is not None:
            settings["connect_timeout_ms"] = round(conninfo.connect_timeout * 1000)
        # two clients: a GETJOB blocking on one does not hold up the acks and the
        # publishing of other threads (a Client runs one command at a time)
        self.client = Client(seeds, **settings)
        self.consumer = Client(seeds, **settings)
        self.visibility_timeout: int | None = options.get("visibility_timeout")
        self.replicate: int | None = options.get("replicate")
        self.job_ttl: int | None = options.get("job_ttl")

    # -- publishing ---------------------------------------------------------------------
    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        headers = message.get("headers") or {}
        eta = headers.get("eta")
        at = eta_to_unix_ms(eta) if eta else None
        priority = self._get_message_priority(message)
        # visibility_timeout is in seconds, as Celery's other transports take it; at
        # least one (RETRY 0 would deliver the job at most once)
        retry_ms = (None if self.visibility_timeout is None
                    else max(1000, round(self.visibility_timeout * 1000)))
        ttl = self._ttl(at)
        self.client.add_job(queue, json.dumps(message), replicate=self.replicate,
                            retry_ms=retry_ms, ttl_ms=None if ttl is None else ttl * 1000,
                            at=at,
                            priority=celery_priority_to_disq(priority))

    def _ttl(self, at: int | None) -> int | None:
        """A job's TTL counts from when it is added, and disq refuses a job due after
        it: an ETA job lives `job_ttl` (default a day) past its ETA."""
        if at is None:
            return self.job_ttl
        until_due = max(0, math.ceil(at / 1000 - time.time()))
        return (self.job_ttl or DEFAULT_JOB_TTL) + until_due

    # -- consuming ----------------------------------------------------------------------
    def _message(self, body: bytes, job_id: str) -> dict[str, Any]:
        payload: dict[str, Any] = json.loads(body)
        payload.setdefault("properties", {})["delivery_tag"] = job_id
        return payload

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        job = self.consumer.get_job(queue, nohang=True)
        if job is None:
            raise Empty()
        return self._message(job.body, job.id)

    def _get_many(self, queues: list[str], timeout: float | None = None) -> None:
        """One job of any of `queues`, handed to kombu; GETJOB blocks for `timeout`
        (at most MAX_BLOCK_MS) first."""
        names = list(dict.fromkeys(queues))
        if not names:
            raise Empty()
        block_ms = MAX_BLOCK_MS if timeout is None else min(MAX_BLOCK_MS, int(timeout * 1000))
        jobs = self.consumer.get_jobs(*names, nohang=block_ms <= 0,
                                      timeout_ms=max(block_ms, 1))
        if not jobs:
            raise Empty()
        for job in jobs:
            self.connection._deliver(self._message(job.body, job.id), job.queue)

    def _restore(self, message: Any) -> None:
        self.client.enqueue(message.delivery_tag)

    # -- queues -------------------------------------------------------------------------
    def _size(self, queue: str) -> int:
        return self.client.qlen(queue)

    def _purge(self, queue: str) -> int:
        return self.client.qpurge(queue)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self._purge(queue)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        """disq's queues exist while they hold jobs: nothing to create."""

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True

    def _lookup(self, exchange: str, routing_key: str, default: str | None = None) -> list[str]:
        """Bindings live in each process (kombu's virtual exchanges): a producer that
        never declared the queue routes a direct exchange's message by its routing key,
        as Celery's default routing expects."""
        if not exchange:
            return [routing_key or default or self.deadletter_queue]
        try:
            found = self.typeof(exchange).lookup(self.get_table(exchange), exchange,
                                                 routing_key, default)
        except KeyError:
            found = []
        return list(found) or [routing_key]

    def close(self) -> None:
        super().close()
        self.client.close()
        self.consumer.close()


class Transport(virtual.Transport):  # type: ignore[misc]
    Channel = Channel
    default_port = DEFAULT_PORT
    driver_type = "disq"
    driver_name = "disq"
    # GETJOB blocks in the drain: no sleep between polls
    polling_interval = 0.01
    connection_errors = (*virtual.Transport.connection_errors, DisqConnectionError,
                         DisqTimeoutError)
    channel_errors = (*virtual.Transport.channel_errors, NoJobError)

    def driver_version(self) -> str:
        from . import __version__
        return __version__


def register() -> None:
    """Make `disq://` URLs resolve to this transport."""
    TRANSPORT_ALIASES.setdefault("disq", "disq_client.kombu_transport:Transport")


register()
