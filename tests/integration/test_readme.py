"""A newcomer's first hour: the README's cluster walkthrough run as written (its shell
block, on free ports, in a temporary directory), the README's order (prerequisites, then
the quick start, then the reference) and the Makefile installing once, not at every
`make run`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support import ROOT, free_port, wait_for

README = ROOT / "README.md"
WALKTHROUGH_HEADING = "### A cluster of three nodes"
README_PORTS = ("7711", "7712", "7713")
README_DIR = "/tmp/disq"

# A stand-in for redis-cli where the machine has none: `redis-cli [-h host] [-p port]
# command args...`, printing replies as redis-cli does when its output is not a terminal
# (one element per line), exit status 1 when it cannot connect.
REDIS_CLI_STANDIN = '''#!{python}
import sys

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

args = sys.argv[1:]
host, port = "127.0.0.1", 6379
while args and args[0] in ("-h", "-p"):
    if args[0] == "-h":
        host = args[1]
    else:
        port = int(args[1])
    args = args[2:]
client = redis.Redis(host=host, port=port, protocol=2, socket_timeout=30,
                     retry=Retry(NoBackoff(), 0))
client.response_callbacks.clear()


def lines(reply):
    if isinstance(reply, list):
        for item in reply:
            yield from lines(item)
    elif reply is None:
        yield ""
    elif isinstance(reply, bytes):
        yield reply.decode(errors="replace")
    else:
        yield str(reply)


try:
    reply = client.execute_command(*args)
except redis.exceptions.ConnectionError as exc:
    if args and args[0].upper() == "SHUTDOWN" and "refused" not in str(exc):
        sys.exit(0)  # the node closed the connection: shut down
    print(f"Could not connect to Redis at {{host}}:{{port}}: Connection refused",
          file=sys.stderr)
    sys.exit(1)
except redis.exceptions.ResponseError as exc:
    print(f"(error) {{exc}}")
    sys.exit(1)
print("\\n".join(lines(reply)))
'''


def readme_block_after(heading: str) -> str:
    """The first ```sh block after `heading` in the README."""
    text = README.read_text()
    start = text.index(heading + "\n")
    match = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M).search(text, start)
    assert match is not None, f"no sh block after {heading!r}"
    return match.group(1)


def group_members(pgid: int) -> list[int]:
    """PIDs of the processes in process group `pgid` (from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def stop_by_pid(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), timeout=10,
                 message="the nodes to stop")
    except AssertionError:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextmanager
def shell_session(script: str, cwd: Path, env: dict[str, str], output: Path
                  ) -> Iterator[subprocess.Popen[bytes]]:
    """`bash -e -c script` in a process group of its own, printing to `output` (a file:
    the nodes it starts with `&` keep it open); whatever it leaves running is stopped
    by PID at the end."""
    with output.open("wb") as out:
        shell = subprocess.Popen(["bash", "-e", "-c", script], cwd=cwd, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield shell
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
        stop_by_pid(group_members(shell.pid))


def test_readme_cluster_walkthrough_runs_as_written(tmp_path: Path) -> None:
    script = readme_block_after(WALKTHROUGH_HEADING)
    for word in ("CLUSTER MEET", "ADDJOB", "GETJOB", "SHUTDOWN", README_DIR, *README_PORTS):
        assert word in script, word
    # the only changes: free ports for 7711-7713, a private directory for /tmp/disq
    ports = []
    while len(ports) < len(README_PORTS):
        port = free_port()
        if port not in ports:
            ports.append(port)
    for readme_port, port in zip(README_PORTS, ports, strict=True):
        script = re.sub(rf"\b{readme_port}\b", str(port), script)
    base = tmp_path / "disq"
    script = script.replace(README_DIR, str(base))

    # .venv/bin/disq-server of a checkout: this checkout's server
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    server = bin_dir / "disq-server"
    server.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m disq "$@"\n')
    server.chmod(0o755)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if shutil.which("redis-cli") is None:
        tools = tmp_path / "tools"
        tools.mkdir()
        standin = tools / "redis-cli"
        standin.write_text(REDIS_CLI_STANDIN.format(python=sys.executable))
        standin.chmod(0o755)
        path = f"{tools}{os.pathsep}{path}"
    env = dict(os.environ, PATH=path, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    printed = tmp_path / "walkthrough.out"
    with shell_session(script, tmp_path, env, printed) as shell:
        try:
            shell.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the walkthrough did not finish:\n{printed.read_text()}")
        output = printed.read_text()
        assert shell.returncode == 0, output
        lines = output.splitlines()
        assert "repl" in lines and lines[lines.index("repl") + 1] == "3", output  # SHOW
        job_ids = [line for line in lines if line.startswith("D-")]
        assert job_ids and lines[lines.index(job_ids[0]) - 1] == "q", output  # GETJOB
        assert lines[lines.index(job_ids[0]) + 1] == "work", output
        assert lines[lines.index("work") + 1] == "1", output  # ACKJOB
        # SHUTDOWN stopped every node; each kept its files in its own --dir
        wait_for(lambda: not group_members(shell.pid), timeout=15, message="the nodes to exit")
    for port in ports:
        assert (base / str(port) / "nodes.conf").exists()
        assert "ready to accept connections" in (base / str(port) / "disq.log").read_text()


def test_readme_prerequisites_then_quick_start_then_reference() -> None:
    text = README.read_text()
    prerequisites = text.index("Prerequisites:")
    quick_start = text.index("\n## Quick start\n")
    walkthrough = text.index(f"\n{WALKTHROUGH_HEADING}\n")
    reference = text.index("\n## Documentation\n")
    assert prerequisites < quick_start < walkthrough < reference
    line = " ".join(text[prerequisites:quick_start].split())
    for needed in ("Python ≥ 3.11", "Java", "1 GB", "redis-cli"):
        assert needed in line, needed


# -- the Makefile ----------------------------------------------------------------------------

def make_dry_run(target: str, venv: Path) -> str:
    """What `make <target>` would run with this venv (`make -n`: nothing is run)."""
    env = {name: value for name, value in os.environ.items()  # not a `make test`'s flags
           if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_installs_once_and_again_when_a_pyproject_changes(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.touch()
    an_hour_ago = time.time() - 3600
    os.utime(python, (an_hour_ago, an_hour_ago))
    assert "pip install" in make_dry_run("run", venv)  # a new venv: installed
    for stamp in (".installed", ".installed-test"):
        (venv / stamp).touch()  # as the install steps leave them, after the pyproject.tomls
    assert "pip install" not in make_dry_run("run", venv)
    # the compiled modules: built by `make test` (and `make run` in the background only)
    assert "build_in_place" not in make_dry_run("run", venv)
    assert "build_in_place" in make_dry_run("test", venv)
    for stamp in (".compiled", ".compiled-c-only"):  # (DISQ_PURE_PYTHON: the C ones only)
        (venv / stamp).touch()  # as the build leaves it: `make test` installs nothing
    test = make_dry_run("test", venv)
    assert "pip install" not in test and "build_in_place" not in test
    older = (ROOT / "pyproject.toml").stat().st_mtime - 60  # a pyproject.toml changed since
    os.utime(venv / ".installed", (older, older))
    assert "pip install" in make_dry_run("run", venv)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_run_keeps_the_node_files_in_data(tmp_path: Path) -> None:
    commands = make_dry_run("run", tmp_path / "venv").splitlines()
    assert "mkdir -p data" in commands
    started = [line for line in commands if "disq-server --port 7711" in line]
    assert started and "--dir data" in started[0], commands
    assert "--http-port 7780" in started[0], commands  # the URL README gives
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "data/disq.log"],
                             timeout=30)
    assert ignored.returncode == 0, "data/ is not git-ignored"
