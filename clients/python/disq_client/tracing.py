"""OpenTelemetry tracing of jobs, from the producer to the worker (optional: `pip
install disq-client[tracing]`).

The producer (`add_job`, `add_jobs`, `topic_publish`, sync and async) runs each call
in a PRODUCER span and carries its W3C trace context in the job's attributes
(`traceparent`, and `tracestate` when there is one: ADDJOB ... ATTR); the Worker runs
each handler in a CONSUMER span whose parent is that context (and which links to it,
as the messaging conventions ask of a consumer). Attribute names follow the
OpenTelemetry messaging semantic conventions.

Nothing happens, and opentelemetry is not even imported, unless it is installed, a
tracer provider is set (the global one, or the client's `tracer_provider`) and tracing
is not switched off (`tracing=False`, or DISQ_TRACING=0 in the environment). GETJOB
does not give a job's attributes: the Worker reads them with one SHOW, and only for a
job using disq's extensions (GETJOB WITHCOUNTERS tells: a plain job, which cannot
have attributes, costs nothing)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from .aio import AsyncClient
    from .types import Job

__all__ = ["ENV_SWITCH", "TRACEPARENT", "TRACESTATE", "JobTracing", "Processing", "Publish"]

ENV_SWITCH = "DISQ_TRACING"  # 0, false, off or no: no tracing unless tracing=True
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SYSTEM = "disq"
# ADDJOB ... ATTR's bounds (spec.py's): a context that does not fit is not carried
# rather than making the ADDJOB fail
MAX_ATTRS = 16
MAX_VALUE = 256
# a client without a tracer provider looks for one again after this many seconds
UNSET_RECHECK = 1.0

log = logging.getLogger("disq_client.tracing")

Attrs = Mapping[str | bytes, str | bytes]
R = TypeVar("R")

_installed: bool | None = None  # whether opentelemetry-api imports (tried once)


def installed() -> bool:
    """Whether opentelemetry-api can be imported: tried once per process, so that a
    client without it pays one failed import at its first traced call, not one a job."""
    global _installed
    if _installed is None:
        try:
            import opentelemetry.trace  # noqa: F401
        except ImportError:
            _installed = False
        else:
            _installed = True
    return _installed


def switched_off() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("0", "false", "off", "no")


class JobTracing:
    """A client's (or worker's) tracing: whether it is on, and its tracer, found again
    when the provider changes (the global one may be set after the client is made)."""

    __slots__ = ("enabled", "provider", "_tracer", "_tracer_of", "_unset_until")

    def __init__(self, tracing: bool | None = None,
                 tracer_provider: TracerProvider | None = None) -> None:
        # None: on unless the environment switches it off; True / False: as said
        self.enabled = tracing if tracing is not None else not switched_off()
        self.provider = tracer_provider
        self._tracer: Tracer | None = None
        self._tracer_of: object = None
        self._unset_until = 0.0  # (monotonic) no global provider was set, until then

    def tracer(self) -> Tracer | None:
        """The tracer to use now, or None: off, opentelemetry not installed, or no
        tracer provider set (the API's proxy or no-op provider records nothing)."""
        if not self.enabled:
            return None
        if not installed():
            self.enabled = False
            return None
        if self.provider is None and time.monotonic() < self._unset_until:
            return None
        from opentelemetry import trace

        # (get_tracer_provider reads the environment each time while none is set: 1.5
        # us; asked again a second later, a call without a provider pays ~0.1 us)
        provider = self.provider or trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            self._unset_until = time.monotonic() + UNSET_RECHECK
            return None
        if provider is not self._tracer_of:
            from . import __version__

            self._tracer = provider.get_tracer("disq_client", __version__)
            self._tracer_of = provider
        return self._tracer

    def publish(self, queue: str | bytes, attrs: Attrs | None, *,
                operation: str = "ADDJOB") -> Publish:
        """The PRODUCER span of one ADDJOB (ADDJOBS: a batch, every job carrying this
        span's context; TOPIC PUBLISH: `queue` is the topic), as a context manager;
        its `attrs` are the caller's plus the context to send."""
        tracer = self.tracer()
        if tracer is None:
            return Publish(None, attrs)
        from opentelemetry.trace import SpanKind

        destination = queue if isinstance(queue, str) else queue.decode("utf-8", "replace")
        span = tracer.start_span(f"publish {destination}", kind=SpanKind.PRODUCER,
                                 attributes={
                                     "messaging.system": SYSTEM,
                                     "messaging.destination.name": destination,
                                     "messaging.operation": "publish",
                                     "messaging.operation.type": "send",
                                     "messaging.operation.name": operation})
        return Publish(span, with_context(span, attrs))

    async def processing(self, client: AsyncClient, job: Job) -> Processing:
        """The CONSUMER span the Worker runs `job`'s handler in (a context manager),
        its parent the context the producer carried, if any."""
        tracer = self.tracer()
        if tracer is None:
            return Processing(None)
        from opentelemetry.context import Context
        from opentelemetry.trace import Link, SpanKind, get_current_span

        parent = await carried_context(client, job)
        links = []
        if parent is not None:
            carried = get_current_span(parent).get_span_context()
            if carried.is_valid:
                links.append(Link(carried))
        else:  # a new trace: not under whatever span was current when serve() began
            parent = Context()
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM, "messaging.destination.name": job.queue,
            "messaging.operation": "process", "messaging.operation.type": "process",
            "messaging.operation.name": "process", "messaging.message.id": job.id}
        if job.nacks is not None and job.additional_deliveries is not None:
            attributes["messaging.disq.delivery"] = job.nacks + job.additional_deliveries + 1
        span = tracer.start_span(f"process {job.queue}", context=parent,
                                 kind=SpanKind.CONSUMER, attributes=attributes, links=links)
        return Processing(span)


def with_context(span: Span, attrs: Attrs | None) -> Attrs | None:
    """`attrs` plus `span`'s W3C context (traceparent, tracestate), never replacing an
    attribute the caller set, and only within ATTR's bounds."""
    from opentelemetry.trace import set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, set_span_in_context(span))
    if not carrier:  # a span that is not sampled may still carry one; an invalid none
        return attrs
    merged: dict[str | bytes, str | bytes] = dict(attrs or {})
    taken = {k if isinstance(k, str) else k.decode("utf-8", "replace") for k in merged}
    for key in (TRACEPARENT, TRACESTATE):
        value = carrier.get(key)
        if (value is not None and key not in taken and len(merged) < MAX_ATTRS
                and len(value.encode()) <= MAX_VALUE):
            merged[key] = value
    return merged


async def carried_context(client: AsyncClient, job: Job) -> Context | None:
    """The trace context the producer put in `job`'s attributes: GETJOB WITHCOUNTERS
    gives them for a job using disq's extensions (`job.attrs`); a job without has no
    attributes (no `priority` either): nothing to read. A server that does not give
    them there (an older disq) is asked with SHOW; a failed SHOW only loses the link."""
    attrs = job.attrs
    if attrs is None:
        if job.priority is None:
            return None
        try:
            info = await client.show(job.id)
        except Exception as exc:  # tracing never keeps a job from its handler
            log.debug("SHOW %s for its trace context failed: %s", job.id, exc)
            return None
        attrs = None if info is None else info.attrs
    if not attrs or TRACEPARENT not in attrs:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {key: attrs[key] for key in (TRACEPARENT, TRACESTATE) if key in attrs}
    return TraceContextTextMapPropagator().extract(carrier)


class Publish:
    """A producer call's span (None: not traced) and the attributes to send."""

    __slots__ = ("span", "attrs")

    def __init__(self, span: Span | None, attrs: Attrs | None) -> None:
        self.span = span
        self.attrs = attrs

    def __enter__(self) -> Publish:
        return self

    def published(self, result: R) -> R:
        """`result`, kept on the span: a job ID (`messaging.message.id`), a batch's
        IDs (`messaging.batch.message_count`) or TOPIC PUBLISH's {queue: ID or
        error} (the count of queues it reached)."""
        span = self.span
        if span is not None:
            if isinstance(result, str):
                span.set_attribute("messaging.message.id", result)
            elif isinstance(result, (list, dict)):
                span.set_attribute("messaging.batch.message_count", len(result))
        return result

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        span = self.span
        if span is not None:
            if exc is not None:
                failed(span, exc)
            span.end()


class Processing:
    """A handler's span, current while the handler runs (so that the handler's own
    spans are its children, in a thread too: the Worker copies the context)."""

    __slots__ = ("span", "_token")

    def __init__(self, span: Span | None) -> None:
        self.span = span
        self._token: Token[Context] | None = None

    def __enter__(self) -> Processing:
        if self.span is not None:
            from opentelemetry.context import attach
            from opentelemetry.trace import set_span_in_context

            self._token = attach(set_span_in_context(self.span))
        return self

    def failed(self, exc: BaseException) -> None:
        if self.span is not None:
            failed(self.span, exc)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        span = self.span
        if span is None:
            return
        from opentelemetry.context import detach

        if exc is not None:
            failed(span, exc)
        if self._token is not None:
            detach(self._token)
        span.end()


def failed(span: Span, exc: BaseException) -> None:
    """The exception on the span, and its status an error (`error.type`: its class)."""
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
