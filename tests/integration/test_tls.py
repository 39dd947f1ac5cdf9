"""TLS on the client port and on the cluster bus, with certificates made by the
openssl command for the test (tests/tlsutil.py)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from pathlib import Path

import msgpack
import pytest
import redis
from support import (
    DisqProcess,
    assert_stays,
    call,
    cluster_nodes,
    form_cluster,
    free_port,
    meet,
    myid,
    wait_closed,
)
from tlsutil import Certs, make_certs, needs_openssl

from disq.cluster import messages as m

pytestmark = needs_openssl


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_client(port: int, certs: Certs, client_cert: bool = True) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=10,
                       **certs.redis_kwargs(client_cert))


def test_jobs_over_the_tls_port_beside_the_plain_one(start_node, certs: Certs) -> None:
    tls_port = free_port()
    node = start_node(*certs.server_args(), "--tls-port", str(tls_port))
    client = tls_client(tls_port, certs)
    try:
        job_id = client.execute_command("ADDJOB", "q", "over tls", 0)
        jobs = client.execute_command("GETJOB", "NOHANG", "FROM", "q")
        assert jobs == [[b"q", job_id, b"over tls"]]
        assert client.execute_command("ACKJOB", job_id) == 1
    finally:
        client.close()
    assert call(node, "PING") == b"PONG"  # the plain port still serves
    assert call(node, "CONFIG", "GET", "tls-port") == [b"tls-port", str(tls_port).encode()]
    assert call(node, "CONFIG", "GET", "tls-auth-clients") == [b"tls-auth-clients", b"yes"]


def test_a_client_without_a_certificate_is_refused(start_node, certs: Certs) -> None:
    tls_port = free_port()
    start_node(*certs.server_args(), "--tls-port", str(tls_port))  # tls-auth-clients yes
    client = tls_client(tls_port, certs, client_cert=False)
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            client.ping()
    finally:
        client.close()
    plain = redis.Redis(host="127.0.0.1", port=tls_port, socket_timeout=5)
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            plain.ping()  # no TLS at all
    finally:
        plain.close()


def test_tls_auth_clients_optional_and_no(start_node, certs: Certs) -> None:
    for mode in ("optional", "no"):
        tls_port = free_port()
        start_node(*certs.server_args(), "--tls-port", str(tls_port), "--tls-auth-clients", mode)
        for with_cert in (False, True):
            client = tls_client(tls_port, certs, client_cert=with_cert)
            try:
                assert client.ping()
            finally:
                client.close()


def test_port_0_leaves_only_tls(start_node, certs: Certs) -> None:
    tls_port = free_port()
    node = start_node(*certs.server_args(), "--tls-port", str(tls_port), "--port", "0",
                      port=tls_port, client_kwargs=certs.redis_kwargs())
    me = myid(node)
    assert cluster_nodes(node)[me].port == tls_port  # known by its TLS port, as Redis
    assert call(node, "CONFIG", "GET", "port") == [b"port", b"0"]


@pytest.mark.parametrize("flags, message", [
    (["--tls-cert-file", "/nonexistent/node.crt"], "can't read tls-cert-file"),
    (["--tls-ca-cert-file", ""], "tls-ca-cert-file or tls-ca-cert-dir must be set"),
    (["--tls-protocols", "SSLv3"], "TLSv1.2, TLSv1.3"),
])
def test_start_up_errors_name_the_problem(tmp_path: Path, certs: Certs, flags: list[str],
                                          message: str) -> None:
    node = DisqProcess(tmp_path / "bad", *certs.server_args(), "--tls-port",
                       str(free_port()), *flags)
    with pytest.raises(RuntimeError, match=message):
        node.start()


def test_a_key_that_does_not_match_is_refused(tmp_path: Path, certs: Certs) -> None:
    node = DisqProcess(tmp_path / "bad", *certs.server_args(key=certs.client_key),
                       "--tls-port", str(free_port()))
    with pytest.raises(RuntimeError, match="can't load the certificate"):
        node.start()


# -- the bus ----------------------------------------------------------------------------

def tls_bus_node(start_node, certs: Certs, *extra: str, **files: Path) -> DisqProcess:
    return start_node(*certs.server_args(**files), "--tls-cluster", "yes",
                      "--cluster-node-timeout", "1000", *extra)


def shown(node: DisqProcess, job_id: bytes) -> bool:
    return bool(call(node, "SHOW", job_id))


def test_a_tls_cluster_forms_and_replicates(start_node, certs: Certs) -> None:
    nodes = [tls_bus_node(start_node, certs, "--cluster-secret", "both") for _ in range(3)]
    form_cluster(nodes)
    job_id = call(nodes[0], "ADDJOB", "q", "replicated over tls", 5000, "REPLICATE", 3)
    assert job_id.startswith(b"D-")
    assert all(shown(node, job_id) for node in nodes)
    for node in nodes:
        assert "Traceback" not in node.log()


def test_a_node_with_another_ca_cannot_join(start_node, certs: Certs) -> None:
    a, b = (tls_bus_node(start_node, certs) for _ in range(2))
    form_cluster([a, b])
    stranger = tls_bus_node(start_node, certs, ca=certs.other_ca, cert=certs.other_cert,
                            key=certs.other_key)
    meet(a, stranger)
    meet(stranger, b)
    stranger_id, a_id, b_id = myid(stranger), myid(a), myid(b)

    def apart() -> bool:  # (handshakes with the stranger's address come and go)
        seen_by_a, seen_by_b = cluster_nodes(a), cluster_nodes(b)
        return (stranger_id not in seen_by_a and stranger_id not in seen_by_b
                and not {a_id, b_id} & set(cluster_nodes(stranger))
                and not seen_by_a[b_id].flags and seen_by_a[b_id].link == "connected")

    assert_stays(apart, 3.0, "a node of another CA joined the cluster")


def test_a_plain_tcp_bus_speaker_is_refused(start_node, certs: Certs) -> None:
    node = tls_bus_node(start_node, certs)
    me = myid(node)
    plain = start_node("--cluster-node-timeout", "1000")  # a disq node without TLS
    meet(plain, node)
    speaker_id = os.urandom(20).hex()
    payload = msgpack.packb([m.VERSION, speaker_id, free_port(), [], [[m.MEET, []]]],
                            use_bin_type=True)
    with socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5) as sock:
        sock.sendall(struct.pack(">I", len(payload)) + payload)
        wait_closed(sock, 10, "the plain connection")  # not a TLS ClientHello
    assert_stays(lambda: list(cluster_nodes(node)) == [me], 2.0,
                 "a plain-TCP bus speaker became a member")
    assert myid(plain) not in cluster_nodes(node)


def test_a_ca_directory_instead_of_a_file(start_node, certs: Certs, tmp_path: Path) -> None:
    """tls-ca-cert-dir: a directory of CA certificates named by hash (openssl rehash)."""
    cadir = tmp_path / "cas"
    cadir.mkdir()
    (cadir / "ca.pem").write_bytes(certs.ca.read_bytes())
    subprocess.run(["openssl", "rehash", str(cadir)], check=True, capture_output=True,
                   timeout=60)
    tls_port = free_port()
    start_node("--tls-cert-file", str(certs.node_cert), "--tls-key-file", str(certs.node_key),
               "--tls-ca-cert-dir", str(cadir), "--tls-port", str(tls_port))
    client = tls_client(tls_port, certs)
    try:
        assert client.ping()
    finally:
        client.close()
