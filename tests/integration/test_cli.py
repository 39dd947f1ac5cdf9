"""The disq-server command line: version/help, config file and --flags, start-up errors,
the node identity kept in the cluster config file, the unix socket, the default bind
address and the Prometheus endpoint."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from support import ROOT, DisqProcess, free_port, wait_for

from disq.config import DIRECTIVES, Config

NODE_ID_RE = re.compile(r"^[0-9a-f]{40}$")


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    """Run `python -m disq ...` for a command that must exit by itself."""
    return subprocess.run([sys.executable, "-m", "disq", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def raw_client(node: DisqProcess) -> redis.Redis:
    client = node.client(protocol=2)
    client.response_callbacks.clear()
    return client


def config_get(client: redis.Redis, name: str) -> bytes:
    reply = client.execute_command("CONFIG", "GET", name)
    assert reply[0] == name.encode()
    return reply[1]


# -- version and help ----------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--version", "-v"])
def test_version(flag):
    done = run_cli(flag)
    assert done.returncode == 0, done.stderr
    assert re.search(r"disq \d+\.\d+\.\d+", done.stdout)
    assert "1.0-rc1" in done.stdout  # the Disque version it is compatible with


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(flag):
    done = run_cli(flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: disq-server")
    assert "--port" in done.stdout and "--version" in done.stdout


def test_help_lists_every_directive_with_its_default_and_meaning():
    """Every config error says to run --help: it names each directive of the table,
    as set to its default, with its one line."""
    done = run_cli("--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name, directive in DIRECTIVES.items():
        assert f"  {name} " in done.stdout, name
        assert f"        {directive.doc}" in lines, name
    assert "  port 7711" in lines and "  maxmemory 1gb" in lines
    assert "  include /path/to/other.conf" in lines


# -- the sample config file ------------------------------------------------------------------

SAMPLE_CONFIG = ROOT / "disq.conf"


def test_sample_config_sets_every_directive_to_its_default():
    """disq.conf (like redis.conf): each directive of the table once, at its default,
    under a comment that is the table's own line for it."""
    lines = SAMPLE_CONFIG.read_text().splitlines()
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines):
        if line and not line.startswith("#"):
            first_line.setdefault(line.split()[0], number)
    assert sorted(first_line) == sorted(DIRECTIVES)
    for name, number in first_line.items():
        assert lines[number - 1] == f"# {DIRECTIVES[name].doc}", name
    config = Config()
    config.load_file(str(SAMPLE_CONFIG))
    for name, directive in DIRECTIVES.items():
        assert config.values[name] == directive.default, name


def test_node_starts_with_the_sample_config_unchanged(start_node):
    node = start_node(config_text=SAMPLE_CONFIG.read_text())  # + --port/--bind/--dir
    client = raw_client(node)
    try:
        assert client.execute_command("PING") == b"PONG"
        assert config_get(client, "maxmemory") == str(1024**3).encode()
        assert config_get(client, "client-output-buffer-limit") == (
            b"normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
        assert client.execute_command("ADDJOB", "sampleq", "body", 0).startswith(b"D-")
    finally:
        client.close()


# -- configuration ---------------------------------------------------------------------------

def test_config_file_and_flags_override_it(start_node):
    text = ("# test configuration\n"
            "maxclients 123\n"
            "hz 20\n"
            "loglevel verbose\n"
            "slowlog-max-len 7\n"
            "cluster-node-timeout 4000\n")
    node = start_node("--hz", "30", "--slowlog-max-len", "9", config_text=text)
    client = raw_client(node)
    try:
        assert config_get(client, "maxclients") == b"123"         # from the file
        assert config_get(client, "loglevel") == b"verbose"
        assert config_get(client, "cluster-node-timeout") == b"4000"
        assert config_get(client, "hz") == b"30"                  # flags win
        assert config_get(client, "slowlog-max-len") == b"9"
        assert config_get(client, "port") == str(node.port).encode()
        info = client.execute_command("INFO", "server").decode()
        assert f"config_file:{node.dir / 'disq.conf'}\r\n" in info
        assert "hz:30\r\n" in info
    finally:
        client.close()


def test_flag_with_several_values(start_node):
    node = start_node("--client-output-buffer-limit", "normal", "1mb", "512kb", "10")
    client = raw_client(node)
    try:
        value = config_get(client, "client-output-buffer-limit").decode()
        assert "normal 1048576 524288 10" in value
    finally:
        client.close()


def test_unknown_directive_in_config_file(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("port 7711\nno-such-directive 42\n")
    done = run_cli(str(conf), "--port", str(free_port()), "--dir", str(tmp_path))
    assert done.returncode != 0
    assert "no-such-directive" in done.stderr
    assert "FATAL CONFIG FILE ERROR" in done.stderr
    assert ":2" in done.stderr  # the line number
    assert not (tmp_path / "nodes.conf").exists()  # it never got as far as starting


def test_bus_port_in_use_stops_the_start(tmp_path):
    """As in Disque, a node that cannot listen on its bus port (client port + 10000)
    exits with an error instead of running unreachable for the cluster."""
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 10000))
        taken.listen()
        # the default bind (127.0.0.1 and ::1): only a missing address is skipped
        done = run_cli("--port", str(port), "--dir", str(tmp_path), timeout=10)
    assert done.returncode != 0
    assert f"cluster bus 127.0.0.1:{port + 10000}" in done.stdout + done.stderr


def test_unknown_directive_as_flag(tmp_path):
    done = run_cli("--port", str(free_port()), "--dir", str(tmp_path), "--no-such-flag", "1")
    assert done.returncode != 0
    assert "no-such-flag" in done.stderr


@pytest.mark.parametrize("args, named", [
    (["--port", "abc"], "port"),
    (["--maxclients", "many"], "maxclients"),
    (["--loglevel", "shouting"], "loglevel"),
    (["--appendonly", "perhaps"], "appendonly"),
    (["--port"], "port"),
])
def test_bad_value_is_a_startup_error_naming_the_directive(tmp_path, args, named):
    done = run_cli("--dir", str(tmp_path), *args)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr


def test_bad_value_in_config_file(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("maxclients lots\n")
    done = run_cli(str(conf), "--port", str(free_port()), "--dir", str(tmp_path))
    assert done.returncode != 0
    assert "maxclients" in done.stderr


def test_missing_config_file(tmp_path):
    done = run_cli(str(tmp_path / "nowhere.conf"), "--port", str(free_port()))
    assert done.returncode != 0
    assert "nowhere.conf" in done.stderr


# -- node identity -----------------------------------------------------------------------------

def test_node_id_is_created_once_and_kept(start_node):
    first = start_node(name="keep")
    client = raw_client(first)
    my_id = client.execute_command("CLUSTER", "MYID").decode()
    client.close()
    assert NODE_ID_RE.match(my_id)
    conf = first.dir / "nodes.conf"
    assert conf.read_text().startswith(f"{my_id} ")
    assert " myself " in conf.read_text()
    assert first.stop() == 0

    again = start_node(name="keep")  # same directory
    assert again.dir == first.dir
    client = raw_client(again)
    try:
        assert client.execute_command("CLUSTER", "MYID").decode() == my_id
        hello = client.execute_command("HELLO")
        assert hello[1].decode() == my_id
    finally:
        client.close()
    # a node in another directory is another node
    other = start_node(name="other")
    client = raw_client(other)
    try:
        assert client.execute_command("CLUSTER", "MYID").decode() != my_id
    finally:
        client.close()


def test_node_id_survives_a_crash(start_node):
    first = start_node(name="crash")
    client = raw_client(first)
    my_id = client.execute_command("CLUSTER", "MYID")
    client.close()
    first.kill()  # SIGKILL: nothing saved at exit; the file was written at creation
    again = start_node(name="crash")
    client = raw_client(again)
    try:
        assert client.execute_command("CLUSTER", "MYID") == my_id
    finally:
        client.close()


def test_cluster_config_file_directive(start_node):
    node = start_node("--cluster-config-file", "custom-nodes.conf")
    client = raw_client(node)
    try:
        my_id = client.execute_command("CLUSTER", "MYID").decode()
    finally:
        client.close()
    assert (node.dir / "custom-nodes.conf").read_text().startswith(f"{my_id} ")
    assert not (node.dir / "nodes.conf").exists()


# -- listeners ------------------------------------------------------------------------------

def test_unixsocket(start_node, tmp_path):
    path = tmp_path / "disq.sock"
    node = start_node("--unixsocket", str(path), "--unixsocketperm", "700")
    assert path.is_socket()
    assert path.stat().st_mode & 0o777 == 0o700
    client = redis.Redis(unix_socket_path=str(path), protocol=2, socket_timeout=10)
    try:
        assert client.ping()
        job_id = client.execute_command("ADDJOB", "unixq", "over a unix socket", 0)
        assert client.execute_command("GETJOB", "FROM", "unixq") == [
            [b"unixq", job_id, b"over a unix socket"]]
    finally:
        client.close()
    tcp = raw_client(node)  # TCP still works alongside
    try:
        assert tcp.execute_command("CONFIG", "GET", "unixsocket") == [
            b"unixsocket", str(path).encode()]
    finally:
        tcp.close()
    assert node.stop() == 0
    assert not path.exists()  # removed at shutdown


class _DefaultBindProcess(DisqProcess):
    """A node started without --bind."""

    def command_line(self) -> list[str]:
        return [sys.executable, "-m", "disq", "--port", str(self.port), "--dir", str(self.dir)]


def _listening_addresses(port: int) -> list[str]:
    """Local addresses with a LISTEN socket on `port`, from /proc/net/tcp{,6}."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr_hex, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:
                found.append(addr_hex)
    return found


def test_default_bind_is_loopback(tmp_path):
    node = _DefaultBindProcess(tmp_path / "nobind")
    node.start()
    try:
        client = raw_client(node)
        try:
            assert config_get(client, "bind") == b"127.0.0.1 ::1"
        finally:
            client.close()
        listening = _listening_addresses(node.port)
        assert listening, "no listening socket found"
        loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
        assert set(listening) <= loopback, listening
        # and not reachable through another local address, if this host has one
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect(("192.0.2.1", 9))  # no packet is sent
                outside_ip = probe.getsockname()[0]
            except OSError:
                outside_ip = "127.0.0.1"
        if not outside_ip.startswith("127."):
            with pytest.raises(OSError):
                socket.create_connection((outside_ip, node.port), timeout=2).close()
    finally:
        node.stop()
    assert "without a password" not in node.log()  # loopback: no exposure warning


# -- metrics -----------------------------------------------------------------------------------

def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_metrics_endpoint(start_node):
    metrics_port = free_port()
    node = start_node("--metrics-port", str(metrics_port))
    client = raw_client(node)
    try:
        before = wait_for(lambda: _try_scrape(metrics_port), message="metrics endpoint")
        for name in ("disq_jobs_added_total", "disq_jobs_delivered_total",
                     "disq_jobs_acked_total", "disq_registered_jobs",
                     "disq_registered_queues", "disq_connected_clients"):
            assert name in before, name
        assert before["disq_jobs_added_total"] == 0
        assert before["disq_registered_jobs"] == 0

        ids = [client.execute_command("ADDJOB", "mq", f"job{i}", 0) for i in range(3)]
        ((_, got_id, _),) = client.execute_command("GETJOB", "FROM", "mq")
        assert client.execute_command("ACKJOB", got_id) == 1
        after = scrape(metrics_port)
        assert after["disq_jobs_added_total"] == 3
        assert after["disq_jobs_delivered_total"] == 1
        assert after["disq_jobs_acked_total"] == 1
        assert after["disq_registered_jobs"] == 2
        assert after["disq_registered_queues"] == 1
        assert after['disq_queue_length{queue="mq"}'] == 2
        assert after["disq_connected_clients"] >= 1
        assert after['disq_command_duration_seconds_count{command="addjob"}'] == 3
        assert got_id in ids
    finally:
        client.close()


def test_metrics_only_at_the_metrics_path(start_node):
    metrics_port = free_port()
    start_node("--metrics-port", str(metrics_port))
    wait_for(lambda: _try_scrape(metrics_port), message="metrics endpoint")
    for path in ("/", "/favicon.ico", "/metricsx", "/metrics/", "/anything"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}{path}", timeout=10)
        assert refused.value.code == 404, path
    assert "disq_jobs_added_total" in scrape(metrics_port)  # still served


def test_busy_metrics_port_stops_the_start_with_one_line(tmp_path):
    """As a busy client port does: an error naming the address, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics_port = taken.getsockname()[1]
        done = run_cli("--port", str(free_port()), "--dir", str(tmp_path),
                       "--metrics-port", str(metrics_port))
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in output, output
    assert f"Could not create metrics listening socket 127.0.0.1:{metrics_port}" in output


def test_metrics_off_by_default(node):
    # nothing listens for HTTP next to the node's port unless asked
    client = raw_client(node)
    try:
        assert client.execute_command("CONFIG", "GET", "metrics-port") == [b"metrics-port", b"0"]
    finally:
        client.close()


def _try_scrape(port: int) -> dict[str, float] | None:
    try:
        return scrape(port)
    except OSError:
        return None


def test_start_and_rewrite_as_disques_own_test_harness_does(tmp_path: Path):
    """Disque's cluster tests write `port`, `dir ./disque_N`, `logfile log.txt` to a
    config file, start the server from the parent directory with a relative config
    path, then CONFIG SET cluster-node-timeout + CONFIG REWRITE, and later restart it
    with the same file: log, nodes.conf and identity must all live in `dir`."""
    port = free_port()
    (tmp_path / "disque_0").mkdir()
    conf = tmp_path / "disque_0" / "disque.conf"
    conf.write_text(f"port {port}\ndir ./disque_0\nlogfile log.txt\nloglevel notice\n")

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "disq", "disque_0/disque.conf"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(64).startswith((b"+", b"-"))
            except OSError:
                return False

        wait_for(answers, timeout=15, message="the node answering PING")
        return proc

    proc = start()
    try:
        client = redis.Redis(port=port, protocol=2)
        node_id = client.execute_command("CLUSTER", "MYID")
        assert client.execute_command("CONFIG", "SET", "cluster-node-timeout", "3000")
        assert client.execute_command("CONFIG", "REWRITE")
        client.close()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert (tmp_path / "disque_0" / "log.txt").exists()
    assert (tmp_path / "disque_0" / "nodes.conf").exists()
    assert not (tmp_path / "log.txt").exists() and not (tmp_path / "nodes.conf").exists()
    text = conf.read_text()
    for line in (f"port {port}", "dir ./disque_0", "logfile log.txt",
                 "cluster-node-timeout 3000"):
        assert line in text.splitlines(), text
    proc = start()
    try:
        client = redis.Redis(port=port, protocol=2)
        assert client.execute_command("CLUSTER", "MYID") == node_id
        assert client.execute_command("CONFIG", "GET", "cluster-node-timeout") == [
            b"cluster-node-timeout", b"3000"]
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
