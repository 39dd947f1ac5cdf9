"""A plain node (no TLS, HTTP, metrics, CRON schedule or syslog) starts without
importing what only those need: the start-up stays short. The node is
a real process, run through a wrapper that writes its sys.modules when it exits,
after it has answered PING and INFO and shut down on SIGTERM. No timing is asserted
(bench/vs_disque.py measures the start-up)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from support import ROOT, DisqProcess

# the modules, and the packages whose modules, a plain node must not load
NOT_NEEDED = (
    "croniter", "dateutil", "zoneinfo",  # CRON: with the first schedule
    "aiohttp", "swagger_ui_bundle",  # http-port
    "prometheus_client",  # metrics-port
    "logging.handlers",  # syslog-enabled
    "disq_client.aio", "disq_client.client", "disq_client.worker",  # the clients: the
    # server needs only disq_client.spec
    "platform",  # INFO reads os.uname()
    "cryptography",  # aof-encryption-key-file
)
WRAPPER = """\
import atexit, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
runpy.run_module("disq", run_name="__main__", alter_sys=True)
"""


class RecordingNode(DisqProcess):
    """A node whose process writes the names of its modules to `out` at exit."""

    def __init__(self, workdir: Path, out: Path) -> None:
        super().__init__(workdir)
        self.out = out

    def command_line(self) -> list[str]:
        return [sys.executable, "-c", WRAPPER, str(self.out), *super().command_line()[3:]]


def test_a_plain_node_does_not_import_what_it_does_not_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # this checkout's disq_client, whatever checkout the venv's editable install names
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "clients" / "python"))
    out = tmp_path / "modules.txt"
    node = RecordingNode(tmp_path / "node", out).start()
    try:
        assert node.client().ping()
        assert node.client().info("server")["tcp_port"] == node.port
    finally:
        assert node.stop() == 0
    modules = set(out.read_text().split())
    assert "disq.server.app" in modules and "disq_client.spec" in modules
    loaded = sorted(m for m in modules
                    if any(m == name or m.startswith(name + ".") for name in NOT_NEEDED))
    assert loaded == []
    if importlib.util.find_spec("disq._gcfree") is not None:
        assert "ctypes" not in modules  # only the fallback without the extension needs it
