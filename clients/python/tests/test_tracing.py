"""OpenTelemetry tracing (disq_client/tracing.py) against a real node: the producer's
span and context carried in the job's attributes, the worker's span under it, with
the SDK's in-memory exporter. Each test passes its own tracer provider (the global
one can be set only once a process)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from disq_client import AsyncClient, Client, DisqConnectionError, Job, Worker, tracing
from nodes_at import addr
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)
from support import DisqProcess
from test_pyclient_worker import run_until

CLIENT_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = spans(exporter, name)
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def attrs_of(node: DisqProcess, job_id: str) -> dict[str, str]:
    with Client(addr(node), tracing=False) as c:
        info = c.show(job_id)
    assert info is not None
    return info.attrs or {}


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def count_shows(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job IDs the worker's client asks SHOW for."""
    shown: list[str] = []
    original = AsyncClient.show

    async def show(self: AsyncClient, job_id: str) -> object:
        shown.append(job_id)
        return await original(self, job_id)
    monkeypatch.setattr(AsyncClient, "show", show)
    return shown


async def serve(node: DisqProcess, provider: TracerProvider, handler: Callable[[Job], object],
                done: Callable[[Worker], bool], **options: object) -> Worker:
    worker = Worker(addr(node), poll_ms=100, tracer_provider=provider,
                    **options)  # type: ignore[arg-type]
    worker.task("q")(handler)
    await run_until(worker, lambda: done(worker), timeout=15)
    return worker


async def test_the_worker_span_is_a_child_of_the_producer_span(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request"), \
            Client(addr(node), tracer_provider=provider) as producer:
        job_id = producer.add_job("q", b"x", attrs={"tenant": "acme"})
    publish = only(exporter, "publish q")
    assert publish.kind is SpanKind.PRODUCER
    assert publish.parent is not None
    assert publish.parent.span_id == only(exporter, "request").context.span_id
    assert publish.attributes == {
        "messaging.system": "disq", "messaging.destination.name": "q",
        "messaging.operation": "publish", "messaging.operation.type": "send",
        "messaging.operation.name": "ADDJOB", "messaging.message.id": job_id}
    # the caller's attribute kept, the context added
    assert attrs_of(node, job_id) == {"tenant": "acme", "traceparent": traceparent(publish)}

    def handle(job: Job) -> None:  # a span of the handler's own: under the worker's
        with tracer.start_as_current_span("inner"):
            pass
    await serve(node, provider, handle, lambda w: w.acked == 1)
    process = only(exporter, "process q")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == publish.context.trace_id
    assert process.parent is not None and process.parent.span_id == publish.context.span_id
    assert [link.context.span_id for link in process.links] == [publish.context.span_id]
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == job_id
    assert process.attributes["messaging.destination.name"] == "q"
    assert process.attributes["messaging.disq.delivery"] == 1
    assert process.status.status_code is StatusCode.UNSET
    inner = only(exporter, "inner")
    assert inner.parent is not None and inner.parent.span_id == process.context.span_id


async def test_a_failing_handler_leaves_its_error_on_the_span(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with Client(addr(node), tracer_provider=provider) as producer:
        producer.add_job("q", b"x")

    async def handle(job: Job) -> None:
        if not job.nacks:
            raise ValueError("first time")
    worker = await serve(node, provider, handle, lambda w: w.acked == 1, retry_backoff=None)
    assert worker.nacked == 1  # NACKed as without tracing, then done
    failed, succeeded = sorted(spans(exporter, "process q"), key=lambda s: s.start_time or 0)
    publish = only(exporter, "publish q")
    for span in (failed, succeeded):
        assert span.parent is not None and span.parent.span_id == publish.context.span_id
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: first time"
    assert failed.attributes is not None and failed.attributes["error.type"] == "ValueError"
    assert [event.name for event in failed.events] == ["exception"]
    assert succeeded.status.status_code is StatusCode.UNSET
    assert succeeded.attributes is not None
    assert succeeded.attributes["messaging.disq.delivery"] == 2


async def test_a_job_added_without_tracing_is_processed_in_a_new_trace(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(addr(node), tracing=False, tracer_provider=provider) as producer:
        plain = producer.add_job("q", b"plain")
        extended = producer.add_job("q", b"extended", priority=5)
    assert exporter.get_finished_spans() == ()
    assert attrs_of(node, plain) == {} and attrs_of(node, extended) == {}
    shown = count_shows(monkeypatch)
    # a span current where the worker serves is no parent of the jobs it processes
    with provider.get_tracer("test").start_as_current_span("serving"):
        await serve(node, provider, lambda job: None, lambda w: w.acked == 2)
    processed = spans(exporter, "process q")
    assert len(processed) == 2
    assert all(s.parent is None and not s.links for s in processed)
    # GETJOB WITHCOUNTERS gives a job's attributes: no SHOW for either
    assert shown == []


def test_attributes_the_caller_set_are_kept(node: DisqProcess, provider: TracerProvider,
                                            exporter: InMemorySpanExporter) -> None:
    with Client(addr(node), tracer_provider=provider) as producer:
        own = producer.add_job("q", b"x", attrs={b"traceparent": "mine"})
        full: dict[str | bytes, str | bytes] = {f"k{i}": "v" for i in range(16)}  # at ATTR's limit
        crowded = producer.add_job("q", b"x", attrs=full)
    assert attrs_of(node, own) == {"traceparent": "mine"}
    assert attrs_of(node, crowded) == full
    assert len(spans(exporter, "publish q")) == 2


async def test_batches_and_topics_carry_their_span(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    async with AsyncClient(addr(node), tracer_provider=provider) as producer:
        ids = await producer.add_jobs("q", [b"a", b"b", b"c"])
        await producer.topic_subscribe("news", "q")
        published = await producer.topic_publish("news", b"d")
    batch = only(exporter, "publish q")
    assert batch.attributes is not None
    assert batch.attributes["messaging.operation.name"] == "ADDJOBS"
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert {attrs_of(node, job_id)["traceparent"] for job_id in ids} == {traceparent(batch)}
    topic = only(exporter, "publish news")
    assert attrs_of(node, str(published["q"]))["traceparent"] == traceparent(topic)


def test_switched_off(node: DisqProcess, provider: TracerProvider,
                      exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(addr(node), tracing=False, tracer_provider=provider) as c:
        assert attrs_of(node, c.add_job("q", b"x")) == {}
    monkeypatch.setenv("DISQ_TRACING", "0")
    with Client(addr(node), tracer_provider=provider) as c:
        assert attrs_of(node, c.add_job("q", b"x")) == {}
    with Client(addr(node), tracing=True, tracer_provider=provider) as c:
        assert "traceparent" in attrs_of(node, c.add_job("q", b"x"))  # explicit wins
    assert len(exporter.get_finished_spans()) == 1


def test_the_global_provider_is_used_once_set(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(addr(node)) as c:
        assert attrs_of(node, c.add_job("q", b"x")) == {}  # no provider set: nothing
        monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
        # looked for again only UNSET_RECHECK seconds later (it costs 1.5 us a call)
        assert attrs_of(node, c.add_job("q", b"x")) == {}
        c.tracing._unset_until = 0.0  # (as a second later)
        assert "traceparent" in attrs_of(node, c.add_job("q", b"x"))
    assert len(spans(exporter, "publish q")) == 1


def test_without_opentelemetry_nothing_changes(node: DisqProcess,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_installed", None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # its import now fails
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with Client(addr(node), tracing=True) as c:
        assert attrs_of(node, c.add_job("q", b"x", attrs={"k": "v"})) == {"k": "v"}
    assert not tracing.installed() and not c.tracing.enabled


def test_a_client_does_not_import_opentelemetry_until_it_adds_a_job() -> None:
    code = ("import sys, disq_client; disq_client.Client(); disq_client.Worker(); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(CLIENT_ROOT)})
    assert out.stdout.strip() == "[]"


async def test_the_context_crosses_nodes(cluster: list[DisqProcess], provider: TracerProvider,
                                         exporter: InMemorySpanExporter) -> None:
    """Added on one node with one copy, processed by a worker of another node (which
    takes the job over from the first): its attributes come with it."""
    with Client(addr(cluster[0]), tracer_provider=provider) as producer:
        job_id = producer.add_job("q", b"x", replicate=1, attrs={"tenant": "acme"})
    worker = Worker(addr(cluster[1]), poll_ms=100, tracer_provider=provider)
    seen: list[str] = []
    worker.task("q")(lambda job: seen.append(job.id))
    await run_until(worker, lambda: worker.acked == 1, timeout=15)
    assert seen == [job_id]
    publish, process = only(exporter, "publish q"), only(exporter, "process q")
    assert process.parent is not None and process.parent.span_id == publish.context.span_id


async def test_the_context_comes_with_the_job_not_from_show(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def show(self: AsyncClient, job_id: str) -> object:
        raise DisqConnectionError("no node answered")
    monkeypatch.setattr(AsyncClient, "show", show)  # (a SHOW would lose the link)
    with Client(addr(node), tracer_provider=provider) as producer:
        producer.add_job("q", b"x")
    worker = await serve(node, provider, lambda job: None, lambda w: w.acked == 1)
    assert worker.nacked == 0
    publish, process = only(exporter, "publish q"), only(exporter, "process q")
    assert process.parent is not None and process.parent.span_id == publish.context.span_id


async def test_tracestate_travels_with_the_job(
        node: DisqProcess, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    remote = SpanContext(trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0xB7AD6B7169203331,
                         is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
                         trace_state=TraceState([("vendor", "v1")]))
    with trace.use_span(NonRecordingSpan(remote)), \
            Client(addr(node), tracer_provider=provider) as producer:
        job_id = producer.add_job("q", b"x")
    carried = attrs_of(node, job_id)
    assert carried["tracestate"] == "vendor=v1"
    assert carried["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    await serve(node, provider, lambda job: None, lambda w: w.acked == 1)
    process = only(exporter, "process q")
    assert process.context.trace_id == remote.trace_id
    assert process.context.trace_state == remote.trace_state
