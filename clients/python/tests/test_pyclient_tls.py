"""The clients over TLS: a node serving TLS only (`port 0`, known by its tls-port),
certificates made by the openssl command for the test."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from disq_client import DisqConnectionError, ssl_context
from support import DisqProcess, free_port
from tlsutil import Certs, make_certs, needs_openssl

pytestmark = needs_openssl


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DisqProcess, Certs]]:
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    port = free_port()
    node = DisqProcess(tmp_path_factory.mktemp("tls-node"), *certs.server_args(),
                       "--tls-port", str(port), "--port", "0", port=port,
                       client_kwargs=certs.redis_kwargs())
    node.start()
    try:
        yield node, certs
    finally:
        node.stop()


def options(certs: Certs) -> dict[str, Any]:
    return {"ssl": True, "ssl_ca_certs": str(certs.ca), "ssl_certfile": str(certs.client_cert),
            "ssl_keyfile": str(certs.client_key)}


def test_jobs_over_tls(connect, tls_node: tuple[DisqProcess, Certs]) -> None:
    node, certs = tls_node
    client = connect(f"127.0.0.1:{node.port}", **options(certs))
    job_id = client.add_job("tls-q", "secret body")
    [job] = client.get_jobs("tls-q", count=1, nohang=True)
    assert (job.id, job.body) == (job_id, b"secret body")
    assert client.ack(job.id) == 1


def test_an_ssl_context_is_used_as_given(connect, tls_node: tuple[DisqProcess, Certs]) -> None:
    node, certs = tls_node
    ctx = ssl_context(True, ca_certs=str(certs.ca), certfile=str(certs.client_cert),
                      keyfile=str(certs.client_key))
    assert isinstance(ctx, ssl.SSLContext)
    client = connect(f"127.0.0.1:{node.port}", ssl=ctx)
    assert client.qlen("nothing-here") == 0


def test_without_a_client_certificate_the_node_refuses(
        connect, tls_node: tuple[DisqProcess, Certs]) -> None:
    node, certs = tls_node
    client = connect(f"127.0.0.1:{node.port}", ssl=True, ssl_ca_certs=str(certs.ca),
                     retries=0, timeout_ms=3000)
    with pytest.raises(DisqConnectionError):
        client.qlen("q")


def test_plain_tcp_to_a_tls_port_fails(connect, tls_node: tuple[DisqProcess, Certs]) -> None:
    node, _ = tls_node
    client = connect(f"127.0.0.1:{node.port}", retries=0, timeout_ms=3000)
    with pytest.raises(DisqConnectionError):
        client.qlen("q")
