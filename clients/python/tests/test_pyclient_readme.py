"""The examples of the Python client's guide (docs/guides/python-client.md) and of
clients/python/README.md run as written, against a
node of the test's own (its address replaces 127.0.0.1:7711, and 127.0.0.1:7712
becomes a port where nothing listens)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from disq_client import Client
from nodes_at import addr
from support import DisqProcess, free_port, wait_for

REPO = Path(__file__).resolve().parents[3]
READMES = [REPO / "docs" / "guides" / "python-client.md",
           REPO / "clients" / "python" / "README.md"]
WORKER_BIN = Path(sys.executable).with_name("disq-worker")
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def examples(readme: Path) -> tuple[str, str, str]:
    """(client script, worker module, worker command) of a README."""
    blocks = BLOCK.findall(readme.read_text())
    python = [code for lang, code in blocks if lang == "python"]
    [client] = [code for code in python if "Client(" in code and "Worker(" not in code]
    [worker] = [code for code in python if "Worker(" in code]
    [command] = [line for lang, code in blocks if lang == "sh" for line in code.splitlines()
                 if "disq-worker " in line]
    return client, worker, command


def localize(code: str, node: DisqProcess) -> str:
    return (code.replace("127.0.0.1:7711", addr(node))
            .replace("127.0.0.1:7712", f"127.0.0.1:{free_port()}"))


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_readme_examples_run(readme: Path, node: DisqProcess, tmp_path: Path) -> None:
    client_code, worker_code, command = examples(readme)
    done = subprocess.run([sys.executable, "-c", localize(client_code, node)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    # The worker module is saved under the name its first line gives, and started with
    # the command the README shows.
    filename = worker_code.splitlines()[0].removeprefix("# ").strip()
    (tmp_path / filename).write_text(localize(worker_code, node))
    argv = command.split("#")[0].split()
    argv[0] = str(WORKER_BIN)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        with Client(addr(node)) as c:
            queues = re.findall(r'@worker\.task\("(\w+)"\)', worker_code)
            for queue in queues:
                c.add_job(queue, '{"to": "someone"}')

            def all_done() -> bool:
                assert proc.poll() is None, proc.communicate()[0]
                return (sum(c.qlen(q) for q in queues) == 0
                        and not list(c.jscan()))  # taken and acknowledged
            wait_for(all_done, timeout=20, interval=0.05, message="the worker to run the jobs")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    # (the client example may have left jobs in the queue: the worker takes them too)
    summary = re.search(r"stopped \((\d+) acked, 0 nacked, 0 given back\)", out)
    assert summary and int(summary[1]) >= len(queues), out
