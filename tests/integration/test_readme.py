"""A newcomer's first hour: the Makefile installing once, not at every `make run`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support import ROOT

# -- the Makefile ----------------------------------------------------------------------------

def make_dry_run(target: str, venv: Path) -> str:
    """What `make <target>` would run with this venv (`make -n`: nothing is run)."""
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
                          capture_output=True, text=True, timeout=60)
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
    assert "pip install" not in make_dry_run("test", venv)
    older = (ROOT / "pyproject.toml").stat().st_mtime - 60  # a pyproject.toml changed since
    os.utime(venv / ".installed", (older, older))
    assert "pip install" in make_dry_run("run", venv)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_run_keeps_the_node_files_in_data(tmp_path: Path) -> None:
    commands = make_dry_run("run", tmp_path / "venv").splitlines()
    assert "mkdir -p data" in commands
    assert any("disq-server --port 7711 --dir data" in line for line in commands), commands
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "data/disq.log"],
                             timeout=30)
    assert ignored.returncode == 0, "data/ is not git-ignored"
