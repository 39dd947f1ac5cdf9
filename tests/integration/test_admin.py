"""Server and cluster administration commands of one node: PING TIME COMMAND INFO AUTH
CONFIG DEBUG CLIENT SHUTDOWN HELLO CLUSTER SLOWLOG, and redis-cli against the node."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

import pytest
import redis
from support import raw_command, wait_for

NODE_ID_RE = re.compile(r"^[0-9a-f]{40}$")
REDIS_CLI = "/usr/bin/redis-cli"


def raw_client(node, **kwargs) -> redis.Redis:
    """A redis-py client that shows replies as they come (RESP2, no reply parsing)."""
    client = node.client(protocol=2, **kwargs)
    client.response_callbacks.clear()
    return client


@pytest.fixture
def rc(node):
    client = raw_client(node)
    yield client
    client.close()


def err_text(client: redis.Redis, *args) -> str:
    with pytest.raises(redis.ResponseError) as info:
        client.execute_command(*args)
    return str(info.value)


def info_fields(client: redis.Redis, section: str | None = None) -> dict[str, str]:
    text = client.execute_command("INFO", *([section] if section else [])).decode()
    fields = {}
    for line in text.split("\r\n"):
        if line and not line.startswith("#"):
            key, _, value = line.partition(":")
            fields[key] = value
    return fields


def read_until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        except TimeoutError:
            raise AssertionError(f"connection not closed; got {data!r}") from None
        if not chunk:
            return data
        data += chunk


def my_addr(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


# -- PING TIME COMMAND ---------------------------------------------------------------------

def test_ping(rc):
    assert rc.execute_command("PING") == b"PONG"
    assert rc.execute_command("PING", "hello") == b"hello"
    assert rc.execute_command("ping", "") == b""
    assert err_text(rc, "PING", "a", "b") == "wrong number of arguments for 'ping' command"


def test_time(rc):
    seconds, micros = rc.execute_command("TIME")
    assert isinstance(seconds, bytes) and isinstance(micros, bytes)  # bulk strings
    assert abs(int(seconds) - time.time()) < 5
    assert 0 <= int(micros) < 1_000_000
    later = rc.execute_command("TIME")
    assert (int(later[0]), int(later[1])) >= (int(seconds), int(micros))
    assert "wrong number of arguments" in err_text(rc, "TIME", "now")


# Disque's command table (antirez/disque src/server.c, serverCommandTable): name, arity,
# flags (w write, r readonly, m denyoom, a admin, l loading, F fast), as COMMAND names them.
DISQUE_TABLE = """
auth 2 rlF         ping -1 rF        info -1 rl        shutdown -1 arl   monitor 1 ar
debug -2 a         config -2 ar      cluster -2 ar     client -2 ar      slowlog -2 r
time 1 rF          command 0 rl      latency -2 arl    hello 1 rF
addjob -4 wmF      getjob -2 wF      ackjob -1 wF      fastack -1 wF     deljob -1 wF
show 2 rF          loadjob 2 w       bgrewriteaof 1 ar
qlen 2 rF          qpeek 3 r         qstat 2 rF        qscan -1 r        jscan -1 r
enqueue -1 mwF     nack -1 mwF       dequeue -1 wF     working 2 wF      pause -3 rF
"""
DISQUE_FLAG_NAMES = {"w": b"write", "r": b"readonly", "m": b"denyoom", "a": b"admin",
                     "l": b"loading", "F": b"fast"}
# COMMAND lists the flags in Disque's order (Redis 3's), then noauth
FLAG_ORDER = [b"write", b"readonly", b"denyoom", b"admin", b"loading", b"fast", b"noauth"]


def disque_table() -> dict[bytes, tuple[int, list[bytes]]]:
    words = DISQUE_TABLE.split()
    return {name.encode(): (int(arity), [DISQUE_FLAG_NAMES[f] for f in flags])
            for name, arity, flags in zip(words[::3], words[1::3], words[2::3], strict=True)}


def test_command(rc):
    """COMMAND: every command of Disque's table with Disque's arity and flags, exactly
    (where disq accepts more, AUTH user pass or HELLO 3, or answers before AUTH or while
    loading, it still shows Disque's), in Disque's order of flags; disq's own too."""
    table = rc.execute_command("COMMAND")
    assert len(table) == rc.execute_command("COMMAND", "COUNT")
    by_name = {entry[0]: entry for entry in table}
    assert len(by_name) == len(table)
    disque = disque_table()
    assert len(disque) == 32 and set(disque) <= set(by_name)
    for entry in table:
        assert len(entry) == 6
        name, arity, flags, first, last, step = entry
        assert isinstance(arity, int) and isinstance(flags, list)
        assert (first, last, step) == (0, 0, 0)
        assert flags == sorted(flags, key=FLAG_ORDER.index), name
    for name, (arity, flags) in disque.items():
        assert by_name[name][1:3] == [arity, sorted(flags, key=FLAG_ORDER.index)], name
    # disq's own commands
    assert by_name[b"addjobs"][1:3] == [-5, [b"write", b"denyoom"]]
    assert by_name[b"jobset"][1:3] == [-2, [b"write", b"fast"]]
    assert by_name[b"globalqlen"][1:3] == [2, [b"readonly"]]
    assert by_name[b"acl"][1:3] == [-2, [b"admin"]]
    for name in (b"qpolicy", b"deadletter"):
        assert by_name[name][1:3] == [-3, [b"write", b"denyoom"]]
    assert by_name[b"cron"][1:3] == [-2, [b"write", b"denyoom"]]
    info = rc.execute_command("COMMAND", "INFO", "addjob", "GETJOB", "nosuchcommand")
    assert len(info) == 3
    assert info[0] == by_name[b"addjob"] and info[1] == by_name[b"getjob"]
    assert info[2] is None
    assert "Unknown subcommand" in err_text(rc, "COMMAND", "FOO")


def test_command_info_unknown_is_null_bulk(node):
    with node.connect() as sock:
        assert raw_command(sock, b"COMMAND INFO nosuchcommand\r\n") == b"*1\r\n$-1\r\n"
        assert raw_command(sock, b"COMMAND COUNT extra\r\n").startswith(b"-ERR Unknown subcommand")


# -- INFO ----------------------------------------------------------------------------------

DEFAULT_SECTIONS = ["# Server", "# Clients", "# Memory", "# Jobs", "# Queues",
                    "# Persistence", "# Stats", "# CPU"]


def test_info_default_sections(node, rc):
    text = rc.execute_command("INFO").decode()
    headers = [line for line in text.split("\r\n") if line.startswith("#")]
    assert headers == DEFAULT_SECTIONS
    assert "# Commandstats" not in text
    # sections are separated by one empty line, every field line ends with CRLF
    blocks = text.split("\r\n\r\n")
    assert [b.split("\r\n")[0] for b in blocks] == DEFAULT_SECTIONS
    assert text.endswith("\r\n") and not text.endswith("\r\n\r\n")
    for line in text.split("\r\n"):
        assert line == "" or line.startswith("# ") or re.match(r"^[a-z0-9_]+:", line), line
    assert rc.execute_command("INFO", "default").decode() .split("\r\n")[0] == "# Server"
    fields = info_fields(rc)
    assert fields["disque_version"] == "1.0-rc1"
    assert fields["tcp_port"] == str(node.port)
    assert fields["process_id"] == str(node.pid)
    assert re.match(r"^[0-9a-f]{40}$", fields["run_id"])
    assert int(fields["uptime_in_seconds"]) >= 0 and fields["hz"] == "10"
    assert fields["connected_clients"] == "1" and fields["blocked_clients"] == "0"
    assert int(fields["used_memory"]) > 0 and fields["used_memory_human"]
    assert fields["aof_enabled"] == "0" and fields["loading"] == "0"
    assert int(fields["total_commands_processed"]) >= 1
    assert float(fields["used_cpu_user"]) >= 0
    for key in ("registered_jobs", "registered_queues", "total_connections_received",
                "instantaneous_ops_per_sec", "rejected_connections", "used_memory_peak",
                "mem_fragmentation_ratio", "aof_state", "used_cpu_sys"):
        assert key in fields, key
    # RSS over what the process uses (the interpreter's start-up RSS plus the jobs):
    # about 1 on a fresh node, not RSS over the jobs' 1 MiB estimate (55 then)
    assert 0.5 <= float(fields["mem_fragmentation_ratio"]) <= 5, fields


def test_info_jobs_and_queues_follow_the_data(rc):
    def counts() -> tuple[int, int]:
        f = info_fields(rc)
        return int(f["registered_jobs"]), int(f["registered_queues"])

    assert counts() == (0, 0)
    a = rc.execute_command("ADDJOB", "q1", "a", 0)
    rc.execute_command("ADDJOB", "q1", "b", 0)
    rc.execute_command("ADDJOB", "q2", "c", 0)
    assert counts() == (3, 2)
    assert rc.execute_command("ACKJOB", a) == 1
    assert counts()[0] == 2
    rc.execute_command("DEBUG", "FLUSHALL")
    assert counts() == (0, 0)


def test_info_single_section(rc):
    rc.execute_command("ADDJOB", "q", "x", 0)
    assert rc.execute_command("INFO", "jobs") == b"# Jobs\r\nregistered_jobs:1\r\n"
    assert rc.execute_command("INFO", "JOBS") == b"# Jobs\r\nregistered_jobs:1\r\n"
    assert rc.execute_command("INFO", "queues") == b"# Queues\r\nregistered_queues:1\r\n"
    for section, header in [("server", "# Server"), ("clients", "# Clients"),
                            ("memory", "# Memory"), ("persistence", "# Persistence"),
                            ("stats", "# Stats"), ("cpu", "# CPU")]:
        text = rc.execute_command("INFO", section).decode()
        assert [x for x in text.split("\r\n") if x.startswith("#")] == [header]
    assert rc.execute_command("INFO", "nosuchsection") == b""
    assert err_text(rc, "INFO", "jobs", "queues") == "syntax error"


def test_info_commandstats(rc):
    rc.execute_command("CONFIG", "RESETSTAT")  # forget the start-up probe and handshakes
    for _ in range(3):
        rc.execute_command("PING")
    rc.execute_command("QLEN", "q")
    with pytest.raises(redis.ResponseError):
        rc.execute_command("QPEEK", "q", "notanumber")  # errors inside a command count
    with pytest.raises(redis.ResponseError):
        rc.execute_command("NOSUCHCOMMAND")  # never reaches a command: not counted
    text = rc.execute_command("INFO", "commandstats").decode()
    assert text.startswith("# Commandstats\r\n")
    stats = dict(re.findall(r"cmdstat_(\w+):(\S+)\r\n", text))
    assert re.match(r"^calls=3,usec=\d+,usec_per_call=\d+\.\d\d$", stats["ping"])
    assert stats["qlen"].startswith("calls=1,")
    assert stats["qpeek"].startswith("calls=1,")
    assert "nosuchcommand" not in stats
    assert "info" not in stats  # counted after it runs
    everything = rc.execute_command("INFO", "all").decode()
    headers = [x for x in everything.split("\r\n") if x.startswith("#")]
    assert headers == DEFAULT_SECTIONS + ["# Commandstats"]
    assert "cmdstat_info:calls=1," in everything


def test_info_stats_counters(node, rc):
    before = info_fields(rc, "stats")
    for _ in range(5):
        rc.execute_command("PING")
    with node.connect() as sock:
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"
    after = info_fields(rc, "stats")
    assert int(after["total_commands_processed"]) - int(before["total_commands_processed"]) \
        == 7  # INFO + 5 PING + PING on the other connection
    assert int(after["total_connections_received"]) == int(
        before["total_connections_received"]) + 1
    assert int(after["total_net_input_bytes"]) > int(before["total_net_input_bytes"])
    assert int(after["total_net_output_bytes"]) > int(before["total_net_output_bytes"])


# -- AUTH ----------------------------------------------------------------------------------

def test_auth_with_requirepass(start_node):
    node = start_node("--requirepass", "s3cret")
    noauth = b"-NOAUTH Authentication required.\r\n"
    with node.connect() as sock:
        assert raw_command(sock, b"PING\r\n") == noauth
        assert raw_command(sock, b"ADDJOB q x 0\r\n") == noauth
        assert raw_command(sock, b"HELLO\r\n") == noauth
        assert raw_command(sock, b"INFO\r\n") == noauth
        # unknown command and arity are checked first, as in Redis
        assert raw_command(sock, b"NOSUCH\r\n") == b"-ERR unknown command 'NOSUCH'\r\n"
        assert raw_command(sock, b"ADDJOB q\r\n") == (
            b"-ERR wrong number of arguments for 'addjob' command\r\n")
        assert raw_command(sock, b"AUTH wrong\r\n") == b"-ERR invalid password\r\n"
        assert raw_command(sock, b"PING\r\n") == noauth
        assert raw_command(sock, b"AUTH s3cret\r\n") == b"+OK\r\n"
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"
        assert raw_command(sock, b"ADDJOB q x 0\r\n").startswith(b"+D-")
        # a wrong password de-authenticates
        assert raw_command(sock, b"AUTH nope\r\n") == b"-ERR invalid password\r\n"
        assert raw_command(sock, b"QLEN q\r\n") == noauth
    # redis-py given the password works directly
    good = node.client(password="s3cret")
    try:
        assert good.execute_command("QLEN", "q") == 1
    finally:
        good.close()
    with node.connect() as sock:  # QUIT needs no password
        sock.sendall(b"QUIT\r\n")
        assert read_until_closed(sock) == b"+OK\r\n"


def test_auth_without_password_configured(node):
    with node.connect() as sock:
        assert raw_command(sock, b"AUTH x\r\n") == (
            b"-ERR Client sent AUTH, but no password is set\r\n")
        assert raw_command(sock, b"AUTH\r\n") == (
            b"-ERR wrong number of arguments for 'auth' command\r\n")


def test_config_set_requirepass_takes_effect(node, rc):
    assert rc.execute_command("CONFIG", "SET", "requirepass", "pw") == b"OK"
    assert rc.execute_command("CONFIG", "GET", "requirepass") == [b"requirepass", b"pw"]
    assert rc.execute_command("PING") == b"PONG"  # this connection stays usable
    with node.connect() as other:
        assert raw_command(other, b"PING\r\n") == b"-NOAUTH Authentication required.\r\n"
        # clearing the password opens the node to everyone, already connected or not
        assert rc.execute_command("CONFIG", "SET", "requirepass", "") == b"OK"
        assert raw_command(other, b"PING\r\n") == b"+PONG\r\n"
        assert raw_command(other, b"AUTH pw\r\n") == (
            b"-ERR Client sent AUTH, but no password is set\r\n")


# -- CONFIG ----------------------------------------------------------------------------------

def test_config_get(node, rc):
    assert rc.execute_command("CONFIG", "GET", "port") == [b"port", str(node.port).encode()]
    everything = rc.execute_command("CONFIG", "GET", "*")
    assert len(everything) % 2 == 0
    pairs = dict(zip(everything[::2], everything[1::2], strict=True))
    assert len(pairs) == len(everything) // 2
    defaults = {b"hz": b"10", b"cluster-node-timeout": b"15000", b"maxmemory": b"1073741824",
                b"maxmemory-policy": b"acks", b"appendonly": b"no", b"timeout": b"0",
                b"tcp-backlog": b"511", b"maxclients": b"10000", b"loglevel": b"notice",
                b"slowlog-log-slower-than": b"10000", b"slowlog-max-len": b"128",
                b"appendfsync": b"everysec", b"requirepass": b"", b"databases": b"16"}
    for name, value in defaults.items():
        assert pairs[name] == value, name
    assert pairs[b"port"] == str(node.port).encode()
    for name in (b"bind", b"dir", b"unixsocket", b"logfile", b"maxmemory-samples",
                 b"tcp-keepalive", b"activerehashing", b"aof-load-truncated",
                 b"client-output-buffer-limit"):
        assert name in pairs, name
    maxes = rc.execute_command("CONFIG", "GET", "max*")
    names = maxes[::2]
    assert set(names) == {n for n in pairs if n.startswith(b"max")} and len(names) >= 4
    assert rc.execute_command("CONFIG", "GET", "nosuchparameter") == []
    assert err_text(rc, "CONFIG", "GET") == "Wrong number of arguments for CONFIG GET"
    assert err_text(rc, "CONFIG", "NOSUCH") == (
        "CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


def test_config_set_values_take_effect(node, rc):
    assert rc.execute_command("CONFIG", "SET", "hz", "20") == b"OK"
    assert info_fields(rc, "server")["hz"] == "20"
    assert rc.execute_command("CONFIG", "SET", "maxmemory", "2gb") == b"OK"
    assert rc.execute_command("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"2147483648"]
    assert rc.execute_command("CONFIG", "SET", "MAXMEMORY-POLICY", "noeviction") == b"OK"
    assert rc.execute_command("CONFIG", "GET", "maxmemory-policy") == [
        b"maxmemory-policy", b"noeviction"]
    assert rc.execute_command("CONFIG", "SET", "cluster-node-timeout", "5000") == b"OK"
    assert rc.execute_command("CONFIG", "GET", "cluster-node-timeout")[1] == b"5000"


def test_config_set_errors(rc):
    assert err_text(rc, "CONFIG", "SET", "port", "1234") == (
        "Unsupported CONFIG parameter: port")
    assert err_text(rc, "CONFIG", "SET", "nosuch", "1") == (
        "Unsupported CONFIG parameter: nosuch")
    assert err_text(rc, "CONFIG", "SET", "maxclients", "abc") == (
        "Invalid argument 'abc' for CONFIG SET 'maxclients'")
    assert err_text(rc, "CONFIG", "SET", "loglevel", "loud") == (
        "Invalid argument 'loud' for CONFIG SET 'loglevel'")
    assert err_text(rc, "CONFIG", "SET", "maxmemory-policy", "lru") == (
        "Invalid argument 'lru' for CONFIG SET 'maxmemory-policy'")
    assert err_text(rc, "CONFIG", "SET", "maxclients") == (
        "Wrong number of arguments for CONFIG SET")
    # nothing changed
    assert rc.execute_command("CONFIG", "GET", "maxclients") == [b"maxclients", b"10000"]
    assert rc.execute_command("CONFIG", "GET", "loglevel") == [b"loglevel", b"notice"]


def test_config_set_maxclients(node, rc):
    wait_for(lambda: info_fields(rc, "clients")["connected_clients"] == "1")
    assert rc.execute_command("CONFIG", "SET", "maxclients", "1") == b"OK"
    with node.connect() as sock:
        assert read_until_closed(sock) == b"-ERR max number of clients reached\r\n"
    assert rc.execute_command("PING") == b"PONG"  # already connected: unaffected
    assert rc.execute_command("CONFIG", "SET", "maxclients", "10") == b"OK"
    with node.connect() as sock:
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"


def test_config_set_loglevel(node, rc):
    with node.connect() as quiet:
        quiet_addr = my_addr(quiet)
        quiet.sendall(b"*x\r\n")  # a protocol error is logged at verbose level only
        assert read_until_closed(quiet).startswith(b"-ERR Protocol error")
    assert rc.execute_command("CONFIG", "SET", "loglevel", "verbose") == b"OK"
    assert rc.execute_command("CONFIG", "GET", "loglevel") == [b"loglevel", b"verbose"]
    with node.connect() as loud:
        loud_addr = my_addr(loud)
        loud.sendall(b"*x\r\n")
        assert read_until_closed(loud).startswith(b"-ERR Protocol error")
    wait_for(lambda: loud_addr in node.log(), message="protocol error logged")
    assert quiet_addr not in node.log()


def test_config_set_timeout_closes_idle_clients(node, rc):
    assert rc.execute_command("CONFIG", "SET", "timeout", "1") == b"OK"
    with node.connect() as idle:
        start = time.monotonic()
        assert read_until_closed(idle, timeout=5) == b""
        assert 0.9 <= time.monotonic() - start < 4


def test_config_rewrite(start_node):
    original = "# my own comment\nmaxclients 500\nhz 15\nloglevel notice\n"
    node = start_node(config_text=original)
    rc = raw_client(node)
    try:
        assert rc.execute_command("CONFIG", "GET", "maxclients") == [b"maxclients", b"500"]
        assert info_fields(rc, "server")["config_file"] == str(node.dir / "disq.conf")
        rc.execute_command("CONFIG", "SET", "maxclients", "600")
        rc.execute_command("CONFIG", "SET", "loglevel", "verbose")
        rc.execute_command("CONFIG", "SET", "slowlog-max-len", "33")
        assert rc.execute_command("CONFIG", "REWRITE") == b"OK"
        rc.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "777")
        assert rc.execute_command("CONFIG", "REWRITE") == b"OK"  # a second time
    finally:
        rc.close()
    text = (node.dir / "disq.conf").read_text()
    lines = text.splitlines()
    assert lines.count("# Generated by CONFIG REWRITE") == 1  # once, as Redis
    assert "slowlog-log-slower-than 777" in lines
    assert "# my own comment" in lines
    assert "maxclients 600" in lines and "maxclients 500" not in lines
    assert "loglevel verbose" in lines and "slowlog-max-len 33" in lines
    assert "hz 15" in lines
    assert lines.index("maxclients 600") < lines.index("hz 15")  # order kept
    assert not (node.dir / "disq.conf.tmp").exists()
    # the rewritten file loads
    again = start_node(config_text=text)
    rc2 = raw_client(again)
    try:
        assert rc2.execute_command("CONFIG", "GET", "maxclients") == [b"maxclients", b"600"]
        assert rc2.execute_command("CONFIG", "GET", "loglevel") == [b"loglevel", b"verbose"]
        assert rc2.execute_command("CONFIG", "GET", "slowlog-max-len")[1] == b"33"
        assert rc2.execute_command("CONFIG", "GET", "hz")[1] == b"15"
    finally:
        rc2.close()


def test_config_rewrite_without_config_file(rc):
    assert err_text(rc, "CONFIG", "REWRITE") == "The server is running without a config file"


def test_config_resetstat(node, rc):
    rc.execute_command("CONFIG", "RESETSTAT")
    for _ in range(4):
        rc.execute_command("PING")
    with node.connect() as sock:
        raw_command(sock, b"PING\r\n")
    assert "cmdstat_ping:calls=5," in rc.execute_command("INFO", "commandstats").decode()
    assert rc.execute_command("CONFIG", "RESETSTAT") == b"OK"
    text = rc.execute_command("INFO", "commandstats").decode()
    assert "cmdstat_ping" not in text
    assert "cmdstat_config:calls=1," in text  # RESETSTAT itself, counted after it ran
    stats = info_fields(rc, "stats")
    assert stats["total_connections_received"] == "0"
    assert int(stats["total_commands_processed"]) == 2  # RESETSTAT and INFO commandstats
    assert err_text(rc, "CONFIG", "RESETSTAT", "x") == (
        "Wrong number of arguments for CONFIG RESETSTAT")


# -- DEBUG -----------------------------------------------------------------------------------

def test_debug_flushall(rc):
    ids = [rc.execute_command("ADDJOB", q, "body", 0) for q in ("a", "a", "b")]
    assert rc.execute_command("QLEN", "a") == 2
    assert rc.execute_command("DEBUG", "FLUSHALL") == b"OK"
    assert rc.execute_command("QLEN", "a") == 0 and rc.execute_command("QLEN", "b") == 0
    for job_id in ids:
        assert rc.execute_command("SHOW", job_id) is None
    fields = info_fields(rc)
    assert (fields["registered_jobs"], fields["registered_queues"]) == ("0", "0")
    assert rc.execute_command("GETJOB", "NOHANG", "FROM", "a", "b") is None
    # the node works as before
    new_id = rc.execute_command("ADDJOB", "a", "again", 0)
    assert rc.execute_command("GETJOB", "FROM", "a") == [[b"a", new_id, b"again"]]


def test_debug_flushall_releases_blocked_consumers(node, rc):
    with node.connect() as sock:
        sock.sendall(b"GETJOB FROM emptyq\r\n")
        wait_for(lambda: info_fields(rc, "clients")["blocked_clients"] == "1")
        assert rc.execute_command("DEBUG", "FLUSHALL") == b"OK"
        assert raw_command(sock, b"") == b"*-1\r\n"
        assert raw_command(sock, b"PING\r\n") == b"+PONG\r\n"
    assert info_fields(rc, "clients")["blocked_clients"] == "0"


def test_debug_sleep(rc):
    start = time.monotonic()
    assert rc.execute_command("DEBUG", "SLEEP", "0") == b"OK"
    assert time.monotonic() - start < 0.5
    start = time.monotonic()
    assert rc.execute_command("DEBUG", "SLEEP", "0.2") == b"OK"
    assert time.monotonic() - start >= 0.2
    assert err_text(rc, "DEBUG", "SLEEP") == (
        "Unknown DEBUG subcommand or wrong number of arguments for 'SLEEP'")
    assert err_text(rc, "DEBUG", "NOSUCH") == (
        "Unknown DEBUG subcommand or wrong number of arguments for 'NOSUCH'")
    assert err_text(rc, "DEBUG", "ERROR", "CUSTOM failure here") == "CUSTOM failure here"


def test_debug_sleep_blocks_the_whole_node(node, rc):
    with node.connect() as sleeper, node.connect() as other:
        sleeper.sendall(b"DEBUG SLEEP 0.3\r\nPING\r\n")
        start = time.monotonic()
        # the sleeper's pipelined PING is answered after the sleep, and so is ours
        assert raw_command(sleeper, b"") in (b"+OK\r\n", b"+OK\r\n+PONG\r\n")
        assert raw_command(other, b"PING\r\n") == b"+PONG\r\n"
        assert time.monotonic() - start >= 0.25


# -- CLIENT ----------------------------------------------------------------------------------

def client_lines(rc) -> list[dict[str, str]]:
    text = rc.execute_command("CLIENT", "LIST").decode()
    assert text.endswith("\n")
    return [dict(f.split("=", 1) for f in line.split(" ")) for line in text.splitlines()]


def test_client_list_id_setname_getname(node, rc):
    my_id = rc.execute_command("CLIENT", "ID")
    assert isinstance(my_id, int) and my_id > 0
    assert rc.execute_command("CLIENT", "GETNAME") is None
    assert rc.execute_command("CLIENT", "SETNAME", "worker-1") == b"OK"
    assert rc.execute_command("CLIENT", "GETNAME") == b"worker-1"
    with node.connect() as sock:
        raw_command(sock, b"QLEN q\r\n")
        lines = client_lines(rc)
        assert len(lines) == 2
        mine = next(x for x in lines if x["id"] == str(my_id))
        assert mine["name"] == "worker-1" and mine["cmd"] == "client"
        other = next(x for x in lines if x["id"] != str(my_id))
        assert other["addr"] == my_addr(sock) and other["name"] == "" and other["cmd"] == "qlen"
        for key in ("addr", "fd", "age", "idle", "flags", "qbuf", "obl", "oll", "omem",
                    "events"):
            assert key in mine, key
    assert err_text(rc, "CLIENT", "SETNAME", "has space") == (
        "Client names cannot contain spaces, newlines or special characters.")
    assert rc.execute_command("CLIENT", "GETNAME") == b"worker-1"
    assert rc.execute_command("CLIENT", "SETNAME", "") == b"OK"
    assert rc.execute_command("CLIENT", "GETNAME") is None
    assert err_text(rc, "CLIENT", "NOSUCH").startswith("Syntax error, try CLIENT")


def test_client_kill_by_address(node, rc):
    with node.connect() as victim, node.connect() as bystander:
        assert raw_command(victim, b"PING\r\n") == b"+PONG\r\n"
        assert raw_command(bystander, b"PING\r\n") == b"+PONG\r\n"
        assert rc.execute_command("CLIENT", "KILL", my_addr(victim)) == b"OK"
        assert read_until_closed(victim) == b""
        assert raw_command(bystander, b"PING\r\n") == b"+PONG\r\n"
        assert err_text(rc, "CLIENT", "KILL", my_addr(victim)) == "No such client"
        assert err_text(rc, "CLIENT", "KILL", "1.2.3.4:5") == "No such client"


def test_client_kill_with_filters(node, rc):
    with node.connect() as victim, node.connect() as bystander:
        raw_command(victim, b"PING\r\n")
        raw_command(bystander, b"PING\r\n")
        victim_id = next(int(x["id"]) for x in client_lines(rc)
                         if x["addr"] == my_addr(victim))
        # a bare CLIENT KILL is an error, not "kill everybody"
        assert err_text(rc, "CLIENT", "KILL").startswith("Syntax error")
        assert raw_command(bystander, b"PING\r\n") == b"+PONG\r\n"
        assert rc.execute_command("CLIENT", "KILL", "ID", victim_id) == 1
        assert read_until_closed(victim) == b""
        assert rc.execute_command("CLIENT", "KILL", "ID", 999999) == 0
        assert rc.execute_command("CLIENT", "KILL", "ADDR", my_addr(bystander),
                                  "TYPE", "normal") == 1
        assert read_until_closed(bystander) == b""
    assert err_text(rc, "CLIENT", "KILL", "TYPE", "master") == "Unknown client type 'master'"
    assert err_text(rc, "CLIENT", "KILL", "ID") == "No such client"  # old form: an addr
    assert err_text(rc, "CLIENT", "KILL", "ID", "1", "SKIPME") == "syntax error"
    assert err_text(rc, "CLIENT", "KILL", "COLOR", "red") == "syntax error"
    # SKIPME yes (the default) spares the caller; SKIPME no does not
    my_id = rc.execute_command("CLIENT", "ID")
    assert rc.execute_command("CLIENT", "KILL", "ID", my_id) == 0
    with node.connect() as sock:
        sock.sendall(b"CLIENT KILL ADDR %s SKIPME no\r\n" % my_addr(sock).encode())
        assert read_until_closed(sock) == b":1\r\n"
    assert rc.execute_command("PING") == b"PONG"


# -- SHUTDOWN --------------------------------------------------------------------------------

def test_shutdown(node, rc):
    my_id = rc.execute_command("CLUSTER", "MYID").decode()
    conf = node.dir / "nodes.conf"
    conf.unlink()  # SHUTDOWN must write it again
    assert err_text(rc, "SHUTDOWN", "now") == "syntax error"
    assert node.alive()
    with node.connect() as sock:
        sock.sendall(b"SHUTDOWN\r\n")
        assert read_until_closed(sock, timeout=10) == b""  # no reply: the process exits
    assert node.proc.wait(timeout=10) == 0
    assert f"{my_id} " in conf.read_text() and "myself" in conf.read_text()
    assert "bye bye" in node.log()
    assert "Traceback" not in node.log()


def test_sigterm_shuts_down_cleanly(node):
    assert node.stop() == 0
    assert "bye bye" in node.log()


# -- HELLO and CLUSTER -----------------------------------------------------------------------

def test_hello(node, rc):
    hello = rc.execute_command("HELLO")
    my_id = rc.execute_command("CLUSTER", "MYID")
    assert hello[0] == 1 and hello[1] == my_id
    assert len(hello) == 3
    node_id, ip, port, priority = hello[2]
    assert node_id == my_id and ip in (b"", b"127.0.0.1")
    assert (port, priority) == (str(node.port).encode(), b"1")  # both bulk strings
    assert rc.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    assert rc.execute_command("HELLO")[2][3] == b"100"


def test_cluster_myid_and_nodes(node, rc):
    my_id = rc.execute_command("CLUSTER", "MYID").decode()
    assert NODE_ID_RE.match(my_id)
    nodes = rc.execute_command("CLUSTER", "NODES").decode()
    assert re.fullmatch(rf"{my_id} (127\.0\.0\.1)?:{node.port} myself 0 0 connected\n", nodes)
    saved = (node.dir / "nodes.conf").read_text()
    assert saved.startswith(f"{my_id} ") and " myself " in saved
    assert rc.execute_command("CLUSTER", "SAVECONFIG") == b"OK"


def test_cluster_info(rc):
    text = rc.execute_command("CLUSTER", "INFO").decode()
    assert text.endswith("\r\n")
    fields = dict(line.split(":", 1) for line in text.split("\r\n") if line)
    assert list(fields) == ["cluster_state", "cluster_known_nodes", "cluster_reachable_nodes",
                            "cluster_size", "cluster_stats_messages_sent",
                            "cluster_stats_messages_received"]
    assert fields["cluster_state"] == "ok"
    assert fields["cluster_known_nodes"] == "1"
    assert fields["cluster_reachable_nodes"] == "0"
    assert fields["cluster_size"] == "1"
    assert int(fields["cluster_stats_messages_sent"]) >= 0


def test_cluster_leaving(node, rc):
    assert rc.execute_command("CLUSTER", "LEAVING") == b"no"
    job_id = rc.execute_command("ADDJOB", "q", "queued before leaving", 0)
    assert rc.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    assert rc.execute_command("CLUSTER", "LEAVING") == b"yes"
    assert " myself,leaving " in rc.execute_command("CLUSTER", "NODES").decode()
    # queued jobs are still served; a consumer that would block is told to go away
    assert rc.execute_command("GETJOB", "FROM", "q") == [[b"q", job_id,
                                                          b"queued before leaving"]]
    assert err_text(rc, "GETJOB", "FROM", "q").startswith("LEAVING")
    assert rc.execute_command("CLUSTER", "LEAVING", "no") == b"OK"
    assert rc.execute_command("CLUSTER", "LEAVING") == b"no"
    assert " myself " in rc.execute_command("CLUSTER", "NODES").decode()
    assert err_text(rc, "CLUSTER", "LEAVING", "maybe") == (
        "Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")


def test_cluster_leaving_releases_blocked_consumers(node, rc):
    with node.connect() as sock:
        sock.sendall(b"GETJOB FROM nothing\r\n")
        wait_for(lambda: info_fields(rc, "clients")["blocked_clients"] == "1")
        assert rc.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
        assert raw_command(sock, b"").startswith(b"-LEAVING ")


def test_cluster_wrong_subcommand(rc):
    for args in (["FOO"], ["MYID", "extra"], ["NODES", "x"], ["LEAVING", "yes", "no"]):
        assert err_text(rc, "CLUSTER", *args) == (
            "Wrong CLUSTER subcommand or number of arguments"), args
    assert "wrong number of arguments for 'cluster'" in err_text(rc, "CLUSTER")


# -- SLOWLOG ---------------------------------------------------------------------------------

def test_slowlog(rc):
    assert rc.execute_command("SLOWLOG", "LEN") == 0
    rc.execute_command("PING")  # much faster than the 10 ms default threshold
    rc.execute_command("DEBUG", "SLEEP", "0.05")  # slower
    entries = rc.execute_command("SLOWLOG", "GET")
    assert len(entries) == 1
    entry_id, when, usec, argv = entries[0]
    assert argv == [b"DEBUG", b"SLEEP", b"0.05"]
    assert usec >= 50_000 and abs(when - time.time()) < 10
    # threshold 0 logs everything; newest first
    rc.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "0")
    rc.execute_command("PING", "marker")
    latest = rc.execute_command("SLOWLOG", "GET", "2")
    assert [e[3] for e in latest] == [
        [b"PING", b"marker"], [b"CONFIG", b"SET", b"slowlog-log-slower-than", b"0"]]
    assert latest[0][0] > latest[1][0] > entry_id  # ids grow
    # long arguments are cut
    rc.execute_command("PING", "x" * 500)
    (cut,) = rc.execute_command("SLOWLOG", "GET", "1")
    assert cut[3][1] == b"x" * 128 + b"... (372 more bytes)"
    # a negative threshold logs nothing; RESET empties the log
    rc.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    assert rc.execute_command("SLOWLOG", "RESET") == b"OK"
    rc.execute_command("DEBUG", "SLEEP", "0.02")
    assert rc.execute_command("SLOWLOG", "LEN") == 0
    assert rc.execute_command("SLOWLOG", "GET") == []
    assert err_text(rc, "SLOWLOG", "NOSUCH") == (
        "Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")


def test_slowlog_max_len(rc):
    rc.execute_command("CONFIG", "SET", "slowlog-log-slower-than", "0")
    rc.execute_command("CONFIG", "SET", "slowlog-max-len", "3")
    for i in range(10):
        rc.execute_command("PING", str(i))
    assert rc.execute_command("SLOWLOG", "LEN") == 3
    assert len(rc.execute_command("SLOWLOG", "GET", "100")) == 3


# -- redis-cli -------------------------------------------------------------------------------

def cli(node, *args: str, stdin: str | None = None) -> str:
    if not os.path.exists(REDIS_CLI) and not shutil.which("redis-cli"):
        pytest.skip("redis-cli not installed")
    exe = REDIS_CLI if os.path.exists(REDIS_CLI) else shutil.which("redis-cli")
    done = subprocess.run([exe, "-p", str(node.port), *args], input=stdin,
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_redis_cli(node):
    assert cli(node, "PING") == "PONG\n"
    job_id = cli(node, "ADDJOB", "cliq", "hello world", "0").strip()
    assert re.fullmatch(r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}", job_id)
    assert cli(node, "QLEN", "cliq") == "1\n"
    assert cli(node, "GETJOB", "FROM", "cliq").splitlines() == ["cliq", job_id, "hello world"]
    assert cli(node, "ACKJOB", job_id) == "1\n"
    info = cli(node, "INFO")
    assert "# Server" in info and "disque_version:1.0-rc1" in info
    assert "unknown command" in cli(node, "NOSUCH")


def test_redis_cli_session_from_stdin(node):
    session = ("PING\n"
               "ADDJOB stdinq \"two words\" 0\n"
               "ADDJOB stdinq 'second job' 0\n"
               "QLEN stdinq\n"
               "GETJOB NOHANG COUNT 2 FROM stdinq\n"
               "QLEN stdinq\n")
    lines = cli(node, stdin=session).splitlines()
    assert lines[0] == "PONG"
    first, second = lines[1], lines[2]
    assert first.startswith("D-") and second.startswith("D-")
    assert lines[3] == "2"
    assert lines[4:10] == ["stdinq", first, "two words", "stdinq", second, "second job"]
    assert lines[10] == "0"


def test_monitor_streams_commands_of_other_clients(node):
    """MONITOR answers +OK, then one line per command of every other client, with
    arguments quoted as Redis does; AUTH arguments are never shown."""
    with node.connect() as mon:
        assert raw_command(mon, b"MONITOR\r\n") == b"+OK\r\n"
        other = node.client()
        other.execute_command("ADDJOB", "mq", 'a "quoted"\nbody', 0)
        lines: list[bytes] = []

        def saw_addjob() -> bool:
            mon.settimeout(0.2)
            try:
                lines.extend(mon.recv(65536).split(b"\r\n"))
            except TimeoutError:
                pass
            return any(b'"ADDJOB" "mq" "a \\"quoted\\"\\nbody" "0"' in line for line in lines)

        wait_for(saw_addjob, message="ADDJOB on the monitor")
        line = next(x for x in lines if b'"ADDJOB"' in x)
        assert line.startswith(b"+") and b" [127.0.0.1:" in line
        other.close()
