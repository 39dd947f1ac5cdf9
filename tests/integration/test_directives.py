"""Directives that Disque accepts and disq once ignored: each one now either works on a
real node or stops the start with an error naming it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from support import ROOT, DisqProcess, assert_stays, free_port, wait_closed, wait_for


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "disq", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=env)


def raw_client(node: DisqProcess) -> redis.Redis:
    client = node.client(protocol=2)
    client.response_callbacks.clear()
    return client


def error_of(client: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        client.execute_command(*args)
    return str(exc.value)


# -- refused at start-up ---------------------------------------------------------------------

REFUSED = [
    (["--databases", "4"], "only the default 'databases 16' is accepted"),
    (["--syslog-facility", "local9"], "Invalid log facility"),
    (["--rename-command", "nosuchcommand", "x"], "No such command in rename-command"),
    (["--rename-command", "ping", "info"], "Target command name already exists"),
    (["--maxmemory-samples", "0"], "argument out of range"),
    (["--latency-monitor-threshold", "-1"], "argument out of range"),
    (["--watchdog-period", "-5"], "argument out of range"),
    (["--client-output-buffer-limit", "normal", "1mb", "1kb"],
     "Wrong number of arguments in buffer limit configuration"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else "")
def test_a_value_disq_cannot_honour_stops_the_start(tmp_path, args, message):
    done = run_cli("--port", str(free_port()), "--dir", str(tmp_path), *args)
    assert done.returncode != 0
    assert "FATAL CONFIG FILE ERROR" in done.stderr
    line = next(line for line in done.stderr.splitlines() if message in line)
    assert line.startswith(f"{args[0]} ")  # the directive is named
    assert not (tmp_path / "nodes.conf").exists()  # it never got as far as starting


@pytest.mark.skipif(os.path.exists("/dev/log"), reason="this machine has a syslog")
def test_syslog_enabled_without_a_syslog_stops_the_start(tmp_path):
    done = run_cli("--port", str(free_port()), "--dir", str(tmp_path),
                   "--syslog-enabled", "yes")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(
        "syslog-enabled yes: can't reach the syslog at /dev/log")


# -- rename-command --------------------------------------------------------------------------

def test_rename_command_to_empty_removes_the_command(start_node):
    node = start_node(config_text='rename-command CONFIG ""\nrename-command debug ""\n')
    client = raw_client(node)
    try:
        count = client.execute_command("COMMAND", "COUNT")
        for spelling in ("CONFIG", "config", "Config"):
            assert error_of(client, spelling, "GET", "port") == (
                f"unknown command '{spelling}'")
        assert error_of(client, "DEBUG", "SLEEP", "0") == "unknown command 'DEBUG'"
        assert client.execute_command("COMMAND", "INFO", "config") == [None]
        names = [entry[0] for entry in client.execute_command("COMMAND")]
        assert b"config" not in names and b"debug" not in names and len(names) == count
        assert client.execute_command("PING") == b"PONG"  # the others are all there
    finally:
        client.close()


def test_renamed_command_answers_only_under_its_new_name(start_node):
    node = start_node("--rename-command", "CONFIG", "s3cr3t-Config")
    client = raw_client(node)
    try:
        assert error_of(client, "CONFIG", "GET", "port") == "unknown command 'CONFIG'"
        for spelling in ("s3cr3t-config", "S3CR3T-CONFIG", "s3cr3t-Config"):
            assert client.execute_command(spelling, "GET", "port") == [
                b"port", str(node.port).encode()]
        assert client.execute_command("COMMAND", "INFO", "s3cr3t-config")[0][0] == b"config"
        # As in Redis, the statistics keep the command's own name.
        assert "cmdstat_config:calls=3," in client.execute_command(
            "INFO", "commandstats").decode()
    finally:
        client.close()


# -- client-output-buffer-limit --------------------------------------------------------------

def _reader_that_never_reads(node: DisqProcess, job_id: bytes, requests: int) -> socket.socket:
    """A client that pipelines SHOWs of a big job and never reads the replies."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((node.host, node.port))
    sock.sendall((b"SHOW " + job_id + b"\r\n") * requests)
    return sock


@pytest.mark.parametrize("limit", [("1mb", "0", "0"), ("0", "512kb", "1")],
                         ids=["hard", "soft"])
def test_client_that_does_not_read_its_replies_is_dropped_at_the_limit(start_node, limit):
    node = start_node("--client-output-buffer-limit", "normal", *limit)
    client = raw_client(node)
    try:
        job_id = client.execute_command("ADDJOB", "big", b"x" * 100_000, 0)
        sock = _reader_that_never_reads(node, job_id, 100)  # 10 MB of replies
        try:
            # Not a byte read meanwhile: reading would drain what the node holds.
            wait_for(lambda: "overcoming of output buffer limits" in node.log(), timeout=10,
                     message="the client over its output buffer limit dropped")
            sock.settimeout(5)
            wait_closed(sock, 10, "its connection")
        finally:
            sock.close()
        assert len(client.execute_command("CLIENT", "LIST").splitlines()) == 1
        assert client.execute_command("PING") == b"PONG"  # other clients stay
        assert client.execute_command("SHOW", job_id) is not None  # no job lost
    finally:
        client.close()


def test_output_limit_set_at_run_time_drops_a_client_already_behind(start_node):
    """With Disque's default (normal 0 0 0) a client may leave its replies unread for
    ever; CONFIG SET puts a limit in force at once, also for that client. The rest of
    CONFIG SET follows the start-up rules."""
    node = start_node()
    client = raw_client(node)
    try:
        job_id = client.execute_command("ADDJOB", "big", b"x" * 100_000, 0)
        sock = _reader_that_never_reads(node, job_id, 100)
        try:
            def both_connected() -> bool:
                return len(client.execute_command("CLIENT", "LIST").splitlines()) == 2
            wait_for(both_connected, message="the slow reader connected")
            assert_stays(both_connected, 1.0, "the slow reader was disconnected")
            assert client.execute_command(
                "CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0") == b"OK"
            wait_for(lambda: not both_connected(), message="the slow reader dropped")
            sock.settimeout(5)
            wait_closed(sock, 10, "its connection")
        finally:
            sock.close()
        assert error_of(client, "CONFIG", "SET", "databases", "4") == (
            "Unsupported CONFIG parameter: databases")
        assert error_of(client, "CONFIG", "SET", "maxmemory-samples", "0").startswith(
            "Invalid argument '0' for CONFIG SET 'maxmemory-samples'")
        assert client.execute_command("CONFIG", "SET", "activerehashing", "no") == b"OK"
    finally:
        client.close()


# -- watchdog-period -------------------------------------------------------------------------

def test_watchdog_logs_a_stack_trace_when_the_loop_is_blocked(start_node):
    node = start_node("--watchdog-period", "300")
    client = raw_client(node)
    try:
        wait_for(lambda: "ready to accept connections" in node.log(), message="the start")
        assert client.execute_command("DEBUG", "SLEEP", "1") == b"OK"
        log = wait_for(lambda: "Timeout (" in node.log() and node.log(),
                       message="the watchdog's stack trace")
        trace = log[log.index("Timeout ("):]
        assert "most recent call first" in trace and "in debug" in trace  # DEBUG SLEEP
        # CONFIG SET turns it off (and on) at run time.
        assert client.execute_command("CONFIG", "SET", "watchdog-period", "0") == b"OK"
        assert client.execute_command("DEBUG", "SLEEP", "1") == b"OK"
        assert client.execute_command("PING") == b"PONG"
        assert node.log().count("Timeout (") == 1
        assert client.execute_command("CONFIG", "SET", "watchdog-period", "300") == b"OK"
        assert client.execute_command("DEBUG", "SLEEP", "1") == b"OK"
        wait_for(lambda: node.log().count("Timeout (") == 2, message="a second trace")
    finally:
        client.close()


# -- latency-monitor-threshold ---------------------------------------------------------------

def test_latency_monitor_records_commands_over_the_threshold(start_node):
    node = start_node("--latency-monitor-threshold", "100")
    client = raw_client(node)
    try:
        assert client.execute_command("LATENCY", "LATEST") == []
        client.execute_command("DEBUG", "SLEEP", "0.01")  # under the threshold
        assert client.execute_command("LATENCY", "LATEST") == []
        before = int(time.time())
        client.execute_command("DEBUG", "SLEEP", "0.2")
        [[event, when, last, worst]] = client.execute_command("LATENCY", "LATEST")
        assert event == b"command" and when >= before and 200 <= last == worst < 5000
        [[sampled, ms]] = client.execute_command("LATENCY", "HISTORY", "command")
        assert (sampled, ms) == (when, last)
        assert b"command: 1 latency spikes" in client.execute_command("LATENCY", "DOCTOR")
        assert client.execute_command("LATENCY", "RESET") == 1
        assert client.execute_command("LATENCY", "LATEST") == []
        assert client.execute_command("CONFIG", "SET", "latency-monitor-threshold", "0") == (
            b"OK")
        client.execute_command("DEBUG", "SLEEP", "0.2")
        assert client.execute_command("LATENCY", "LATEST") == []
    finally:
        client.close()


# -- daemonize -------------------------------------------------------------------------------

def test_daemonize_detaches_and_writes_the_pidfile(tmp_path):
    port = free_port()
    pidfile = tmp_path / "disq.pid"
    done = run_cli("--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                   "--daemonize", "yes", "--pidfile", str(pidfile), "--logfile", "disq.log")
    assert done.returncode == 0, done.stderr  # the foreground process is done
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(),
                       timeout=15, message="the pidfile"))
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        try:
            wait_for(lambda: _pings(client), timeout=15, message="the daemon answering")
            info = client.info("server")
            assert info["process_id"] == pid
        finally:
            client.close()
        assert os.getsid(pid) == pid  # its own session, away from the terminal
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pidfile.exists(), timeout=10, message="a clean exit")
        assert "ready to exit" in (tmp_path / "disq.log").read_text()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
