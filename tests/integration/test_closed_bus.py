"""Who reaches the bus and the metrics, with real nodes: without
cluster-secret the bus listens on loopback only and refuses far peers (CLUSTER MEET,
nodes.conf), `cluster-open-bus yes` keeps Disque's open bus; with a secret, frames
forged in a real peer's name (MEET, DELJOB, PAUSE) change nothing; the metrics
endpoint asks for requirepass, and refuses to start beyond loopback without one.

Addresses: the tests bind 0.0.0.0 and reach the node at 127.0.0.2, an address the
wildcard serves but a loopback-only listener on 127.0.0.1 does not (no network
needed). 192.0.2.1 (TEST-NET-1) stands for a far host: nothing is ever sent there.
"""

from __future__ import annotations

import base64
import socket
import struct
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
import redis
from support import (
    NODE_TIMEOUT,
    DisqProcess,
    call,
    cluster_nodes,
    form_cluster,
    free_port,
    myid,
    wait_for,
)
from test_directives import run_cli

from disq.cluster import messages as m
from disq.ids import new_node_id

FAR = "192.0.2.1"
OTHER_LOOPBACK = "127.0.0.2"  # served by a 0.0.0.0 listener, not by one on 127.0.0.1


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def error_of(node: DisqProcess, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as info:
        call(node, *args)
    return str(info.value)


# -- the closed bus ---------------------------------------------------------------------------
def test_without_a_secret_the_bus_stays_on_loopback(start_node) -> None:
    """`bind 0.0.0.0` for a single node's remote clients: the client port takes it, the
    bus stays on loopback, the log says so and how to open it."""
    node = start_node("--bind", "0.0.0.0")
    bus = node.port + 10000
    assert reachable(OTHER_LOOPBACK, node.port)  # the client port is on 0.0.0.0
    assert reachable("127.0.0.1", bus)
    assert not reachable(OTHER_LOOPBACK, bus)
    assert (f"The cluster bus listens on 127.0.0.1, ::1 port {bus} only" in node.log()
            or f"The cluster bus listens on 127.0.0.1 port {bus} only" in node.log())
    assert "cluster-open-bus yes" in node.log()
    assert call(node, "CONFIG", "GET", "cluster-open-bus") == [b"cluster-open-bus", b"no"]
    assert "Unsupported CONFIG parameter" in error_of(
        node, "CONFIG", "SET", "cluster-open-bus", "yes")  # at start-up only


def test_a_closed_bus_meets_no_far_node(start_node) -> None:
    node = start_node()
    error = error_of(node, "CLUSTER", "MEET", FAR, 7711)
    assert error.startswith(f"the cluster bus is closed: it reaches loopback addresses "
                            f"only, not {FAR}:7711")
    assert "cluster-secret <the same secret on every node>" in error
    assert "cluster-open-bus yes" in error
    assert list(cluster_nodes(node)) == [myid(node)]  # not even a handshake
    assert call(node, "CLUSTER", "MEET", "127.0.0.1", free_port()) == b"OK"  # loopback is


def nodes_conf_with_a_far_peer(workdir: Path) -> None:
    workdir.mkdir(parents=True)
    (workdir / "nodes.conf").write_text(
        f"{new_node_id()} 127.0.0.1:7711 myself 0 0 connected\n"
        f"{new_node_id()} {FAR}:7711 - 0 0 disconnected\n")


def test_a_closed_bus_refuses_to_start_with_far_peers(tmp_path: Path) -> None:
    """An existing cluster across hosts, started again without its secret: refused
    with the way out, not left cut off from its peers."""
    nodes_conf_with_a_far_peer(tmp_path / "n")
    done = run_cli("--port", str(free_port()), "--dir", str(tmp_path / "n"))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert (f"The cluster config file lists peers beyond loopback ({FAR}:7711), but "
            f"without cluster-secret the cluster bus is closed (loopback only): set "
            f"cluster-secret <the same secret on every node>") in output


@pytest.mark.parametrize("opening", [("--cluster-secret", "s3cret"),
                                     ("--cluster-open-bus", "yes")])
def test_an_open_bus_keeps_far_peers_and_listens_on_bind(start_node, tmp_path: Path,
                                                         opening: tuple[str, str]) -> None:
    nodes_conf_with_a_far_peer(tmp_path / "open")
    node = start_node("--bind", "0.0.0.0", *opening, name="open")
    assert reachable(OTHER_LOOPBACK, node.port + 10000)  # the bus is on bind
    assert len(cluster_nodes(node)) == 2
    assert call(node, "CLUSTER", "MEET", FAR, 7712) == b"OK"
    assert "The cluster bus listens on" not in node.log()


# -- forged frames ------------------------------------------------------------------------------
def frame(sender: str, port: int, messages: list[list[object]]) -> bytes:
    payload = msgpack.packb([m.VERSION, sender, port, [], messages], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def forge(target: DisqProcess, impostor: DisqProcess, messages: list[list[object]]) -> None:
    """Frames in `impostor`'s name (its ID and port) to `target`'s bus, each on a
    connection of its own, as a stranger without the secret sends them: the messages
    alone, after a made-up AUTH_PROOF, and after the AUTH a real peer would answer."""
    sender, port = myid(impostor), impostor.port
    attempts = [messages, [[m.AUTH_PROOF, b"\0" * 32], *messages],
                [[m.AUTH, b"n" * 16], *messages]]
    for attempt in attempts:
        with socket.create_connection(("127.0.0.1", target.port + 10000), timeout=5) as sock:
            sock.sendall(frame(sender, port, attempt))
            sock.sendall(frame(sender, port, messages))  # and again, once "in"
            sock.settimeout(5)
            try:  # the node closes the link (or it would wait 5 s for a proof)
                while sock.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass


def forged_attack(a: DisqProcess, b: DisqProcess) -> tuple[bytes, str]:
    """A job on both nodes, then MEET (a fake node), DELJOB (the job) and PAUSE (the
    queue) forged to `b` in `a`'s name; returns the job and the fake node's ID."""
    job_id = call(a, "ADDJOB", "q", "body", 5000, "REPLICATE", 2)
    assert isinstance(job_id, bytes)
    wait_for(lambda: call(b, "SHOW", job_id) is not None, message="the copy on b")
    fake = new_node_id()
    fake_port = free_port()
    forge(b, a, [[m.DELJOB, job_id], [m.PAUSE, b"q", 3]])  # PAUSE all
    with socket.create_connection(("127.0.0.1", b.port + 10000), timeout=5) as sock:
        sock.sendall(frame(fake, fake_port, [[m.MEET, [], 0]]))
        sock.settimeout(2)
        try:
            while sock.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    return job_id, fake


def test_with_a_secret_forged_frames_change_nothing(start_node) -> None:
    a, b = form_cluster([start_node("--cluster-node-timeout", str(NODE_TIMEOUT),
                                    "--cluster-secret", "s3cret") for _ in range(2)])
    job_id, fake = forged_attack(a, b)
    assert call(b, "SHOW", job_id) is not None  # not deleted
    assert call(b, "PAUSE", "q", "state") == b"none"  # not paused
    assert fake not in cluster_nodes(b)  # not met
    assert set(cluster_nodes(b)) == {myid(a), myid(b)}
    assert "did not prove the cluster secret" in b.log()


def test_without_a_secret_a_local_process_can_forge_them(start_node) -> None:
    """The control of the test above: the very same frames work on a bus without a
    secret, closed or not. A closed bus keeps other hosts out, not this host's users:
    cluster-secret is what authenticates peers."""
    a, b = form_cluster([start_node("--cluster-node-timeout", str(NODE_TIMEOUT))
                         for _ in range(2)])
    job_id, fake = forged_attack(a, b)
    wait_for(lambda: call(b, "SHOW", job_id) is None, message="the forged DELJOB")
    assert call(b, "PAUSE", "q", "state") == b"all"
    wait_for(lambda: fake in cluster_nodes(b), message="the forged MEET")


# -- the metrics endpoint -----------------------------------------------------------------------
def scrape(host: str, port: int, auth: str | None = None) -> tuple[int, str, str]:
    """(status, WWW-Authenticate, body) of GET /metrics."""
    request = urllib.request.Request(f"http://{host}:{port}/metrics")
    if auth is not None:
        request.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.headers.get("WWW-Authenticate", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("WWW-Authenticate", ""), exc.read().decode()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_metrics_beyond_loopback_without_a_password_stop_the_start(tmp_path: Path) -> None:
    done = run_cli("--port", str(free_port()), "--dir", str(tmp_path),
                   "--metrics-port", str(free_port()), "--metrics-bind", "0.0.0.0")
    assert done.returncode == 1
    assert "FATAL CONFIG FILE ERROR" in done.stderr
    assert ("metrics-bind 0.0.0.0 without requirepass or aclfile: the metrics would have "
            "no user to ask for. Set requirepass <password>") in done.stderr
    assert "or metrics-bind 127.0.0.1" in done.stderr
    assert not (tmp_path / "nodes.conf").exists()  # it never got as far as starting


def test_metrics_ask_for_requirepass(start_node: Callable[..., DisqProcess]) -> None:
    port = free_port()
    node = start_node("--requirepass", "s3cret", "--metrics-port", str(port),
                      "--metrics-bind", "0.0.0.0", client_kwargs={"password": "s3cret"})
    for auth in (None, "Bearer wrong", basic("x", "wrong"), "Bearer", "Basic !!",
                 "Digest s3cret", "s3cret"):
        status, challenge, body = scrape(OTHER_LOOPBACK, port, auth)
        assert status == 401, auth
        assert challenge == 'Bearer realm="disq", Basic realm="disq"'
        assert "disq_jobs" not in body
        assert "Authentication required" in body or "invalid username-password" in body
    for auth in ("Bearer s3cret", basic("prometheus", "s3cret"), basic("", "s3cret")):
        status, _, body = scrape(OTHER_LOOPBACK, port, auth)
        assert status == 200 and "disq_jobs_added_total" in body, auth
    # a new password replaces the old one; without one, no request gets in beyond
    # loopback (not even as the default user, now without a password)
    client = node.client()
    try:
        client.config_set("requirepass", "n3w")
        assert scrape("127.0.0.1", port, "Bearer s3cret")[0] == 401
        assert scrape("127.0.0.1", port, "Bearer n3w")[0] == 200
        client.config_set("requirepass", "")
        for auth in (None, "Bearer n3w", "Bearer ", basic("default", "")):
            assert scrape("127.0.0.1", port, auth)[0] == 401, auth
    finally:
        client.close()


def test_metrics_ask_for_the_nodes_users(start_node: Callable[..., DisqProcess],
                                         tmp_path: Path) -> None:
    """With an aclfile (no requirepass): a user allowed INFO scrapes, one who is not
    gets 403, a wrong password 401; the default user, without a password, never gets
    in beyond loopback."""
    aclfile = tmp_path / "users.acl"
    aclfile.write_text("user default on nopass ~* +@all\n"
                       "user prom on >prom-pw +info\n"
                       "user app on >app-pw ~app:* +@write +@read\n")
    port = free_port()
    node = start_node("--aclfile", str(aclfile), "--metrics-port", str(port),
                      "--metrics-bind", "0.0.0.0")
    status, _, body = wait_for(lambda: _scraped(OTHER_LOOPBACK, port, basic("prom", "prom-pw")),
                               message="the metrics endpoint")
    assert status == 200 and "disq_jobs_added_total" in body
    status, _, body = scrape(OTHER_LOOPBACK, port, basic("app", "app-pw"))
    assert status == 403 and "User app has no permissions to run the 'info' command" in body
    for auth in (None, basic("prom", "wrong"), basic("nobody", "x"), "Bearer anything",
                 basic("default", "")):
        status, challenge, _ = scrape(OTHER_LOOPBACK, port, auth)
        assert status == 401 and challenge, auth
    assert node.client().info("stats")["acl_access_denied_auth"] == 4  # (None: no attempt)


def test_metrics_on_loopback_without_a_password_answer(start_node) -> None:
    port = free_port()
    start_node("--metrics-port", str(port))
    status, _, body = wait_for(lambda: _answered(port), message="the metrics endpoint")
    assert status == 200 and "disq_jobs_added_total" in body


def _answered(port: int) -> tuple[int, str, str] | None:
    return _scraped("127.0.0.1", port, "Bearer anything")  # ignored without a password


def _scraped(host: str, port: int, auth: str) -> tuple[int, str, str] | None:
    try:
        return scrape(host, port, auth)
    except (urllib.error.URLError, ConnectionError):
        return None
