"""A Celery result backend on disq: `result_backend = "disq://host:7711"`.

Celery finds it by the `celery.result_backends` entry point disq-client declares.

A task's result is the RESULT of a *result job*: one job per task ID in the queue
`celery-results` (option `queue`), added with `DEDUP <key>`, so that every node finds
the same job for a key (the key is known on each holder, checked cluster-wide) and a
store twice from two workers adds nothing twice. Storing acks that job with
`ACKJOB id RESULT meta`; reading is a `WAITJOB` on it (blocking for `result.get()`),
which asks the job's holders wherever it is held. The result lives on every holder
(REPLICATE copies) for the queue's RESULT-TTL, set from `result_expires`, so it
survives kill -9 of all but one holder. Nobody consumes the results queue: the result
jobs are placeholders, deleted by their TTL (also `result_expires`).

Why not the task's own job (ACKJOB of the task's message with RESULT)? A result must be
found by task ID (Celery's key), a retried task is a new message, a result is stored
before the message is acked (acks_late) and without acks_late after it; the results'
own jobs keep the transport and the backend independent (the backend works under any
broker).

Only the ready states (SUCCESS, FAILURE, REVOKED) are stored: a result job is acked
once, so the first ready state stored wins (a task run twice after a lost worker does
not overwrite its result, as Celery's KeyValueStoreBackend intends); STARTED and RETRY
read as PENDING.

Chords use Celery's `celery.chord_unlock` task (the backend implements no counter):
it polls the header's results and runs the body once all are ready. It is correct
under faults: its state is the results themselves (idempotent, replicated), and it
is an ordinary broker message that RETRY redelivers when a worker dies; a counter
incremented per part could count a part twice when a task runs twice.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.utils.encoding import bytes_to_str

from .client import Client
from .errors import ResponseError
from .kombu_transport import seed_nodes
from .types import JobEnd

__all__ = ["DisqBackend", "RESULTS_QUEUE"]

logger = logging.getLogger(__name__)

RESULTS_QUEUE = "celery-results"
# a non-blocking read still gives the job's holders a moment to answer
PEEK_MS = 50
# one WAITJOB blocks at most this long, so a Client's reply timeout is never reached
WAIT_SLICE_MS = 2000
DEFAULT_EXPIRES = 86400
# result jobs' IDs remembered per backend (one per thread)
JOB_ID_CACHE = 10_000


class DisqBackend(KeyValueStoreBackend):  # type: ignore[misc]
    """Results as RESULTs of jobs found by DEDUP key (see the module's docstring)."""

    supports_native_join = False

    def __init__(self, app: Any = None, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        options = dict(self.app.conf.get("result_backend_transport_options") or {})
        self.queue: str = options.get("queue", RESULTS_QUEUE)
        self.replicate: int | None = options.get("replicate")
        self.url = url
        self._client: Client | None = None
        self._client_pid = os.getpid()
        self._job_ids: OrderedDict[str, tuple[str, float]] = OrderedDict()
        expires = self.expires
        self.ttl = int(expires) if expires else DEFAULT_EXPIRES

    @property
    def client(self) -> Client:
        """Connected on first use (a backend is made per thread, often unused)."""
        if self._client is not None and self._client_pid != os.getpid():
            # a forked pool process: the parent's sockets are not its own
            self._client = None
        if self._client is None:
            self._client_pid = os.getpid()
            self._client = Client(self._seeds(), password=self._password())
            # the results live as long as the placeholder jobs that find them; a user
            # the ACL does not allow QPOLICY keeps the queue's RESULT-TTL (an hour
            # unless an operator set it)
            try:
                self._client.qpolicy_set(self.queue, result_ttl_ms=self.ttl * 1000)
            except ResponseError as exc:
                logger.warning("disq result backend: RESULT-TTL of %s not set: %s",
                               self.queue, exc)
        return self._client

    def _seeds(self) -> list[str]:
        urls = (self.url or "disq://localhost:7711").replace(",", ";").split(";")
        first = urlsplit(urls[0] if "://" in urls[0] else f"disq://{urls[0]}")
        return seed_nodes(first.hostname, first.port,
                          [u if "://" in u else f"disq://{u}" for u in urls[1:]])

    def as_uri(self, include_password: bool = False) -> str:
        """The nodes' URLs (kombu's parser refuses several hosts in one URL), no
        password unless asked."""
        secret = self._password()
        auth = f":{secret}@" if secret and include_password else ""
        return ";".join(f"disq://{auth}{seed}" for seed in self._seeds())

    def _password(self) -> str | None:
        return urlsplit(self.url or "").password

    # -- the key-value store ----------------------------------------------------------
    def _result_job(self, key: bytes | str) -> str:
        """The result job of `key`: the one the cluster knows, or a new one. Remembered
        (a bounded cache) so that polling a result (chord_unlock, `state`) is one
        WAITJOB, not an ADDJOB each time; for half the TTL at most, so that a
        remembered job has not expired."""
        text = bytes_to_str(key)
        now = time.monotonic()
        known = self._job_ids.get(text)
        if known is not None and now - known[1] < self.ttl / 2:
            return known[0]
        job_id = self.client.add_job(self.queue, text, dedup=text, ttl_ms=self.ttl * 1000,
                                     replicate=self.replicate)
        self._job_ids[text] = (job_id, now)
        self._job_ids.move_to_end(text)
        if len(self._job_ids) > JOB_ID_CACHE:
            self._job_ids.popitem(last=False)
        return job_id

    def _wait(self, key: bytes | str, timeout_ms: int) -> JobEnd:
        return self.client.wait(self._result_job(key), timeout_ms=timeout_ms)[0]

    def get(self, key: bytes | str) -> bytes | None:
        end = self._wait(key, PEEK_MS)
        return end.result if end.state == "acked" else None

    def mget(self, keys: list[bytes | str]) -> list[bytes | None]:
        ids = [self._result_job(key) for key in keys]
        if not ids:
            return []
        return [end.result if end.state == "acked" else None
                for end in self.client.wait(*ids, timeout_ms=PEEK_MS)]

    def set(self, key: bytes | str, value: bytes | str) -> None:
        data = value.encode() if isinstance(value, str) else value
        self.client.ack(self._result_job(key), result=data)

    def delete(self, key: bytes | str) -> None:
        """A kept result cannot be taken back: it expires with its RESULT-TTL."""

    def expire(self, key: bytes | str, value: int) -> None:
        """Results expire with the results queue's RESULT-TTL."""

    # -- Celery's hooks ---------------------------------------------------------------
    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None,
                      request: Any = None, **kwargs: Any) -> Any:
        if state not in states.READY_STATES:
            return result  # see the module's docstring: one ready state per task
        meta = self._get_result_meta(result=result, state=state, traceback=traceback,
                                     request=request)
        meta["task_id"] = bytes_to_str(task_id)
        self.set(self.get_key_for_task(task_id), self.encode(meta))
        return result

    def wait_for(self, task_id: str, timeout: float | None = None, interval: float = 0.5,
                 no_ack: bool = True, on_interval: Any = None) -> Any:
        """Block in WAITJOB rather than poll; `on_interval` is called between waits."""
        self._ensure_not_eager()
        deadline = None if timeout is None else time.monotonic() + timeout
        key = self.get_key_for_task(task_id)
        while True:
            left_ms = WAIT_SLICE_MS if deadline is None else int(
                (deadline - time.monotonic()) * 1000)
            end = self._wait(key, max(1, min(WAIT_SLICE_MS, left_ms)))
            if end.state == "acked" and end.result is not None:
                meta = self.decode_result(end.result)
                self._cache[task_id] = meta
                return meta
            if deadline is not None and time.monotonic() >= deadline:
                raise CeleryTimeoutError("The operation timed out.")
            if on_interval:
                on_interval()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def register() -> None:
    """Make `result_backend = "disq://..."` resolve here without the installed entry
    point (a checkout on sys.path): importing this module is enough."""
    from celery.app.backends import BACKEND_ALIASES
    BACKEND_ALIASES.setdefault("disq", "disq_client.celery_backend:DisqBackend")


register()
