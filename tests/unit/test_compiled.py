"""The hot path runs compiled where it was built (setup.py, mypyc), and from its .py
files with DISQ_PURE_PYTHON set (disq/__init__.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import disq
import disq.node

CHECK = "import disq, disq.node; print(repr(disq.pure_python), disq.node.__file__)"


def run(**env: str) -> str:
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          check=True, env={**os.environ, **env}).stdout


@pytest.mark.skipif(os.environ.get("DISQ_PURE_PYTHON", "") not in ("", "0"),
                    reason="DISQ_PURE_PYTHON is set")
def test_the_compiled_modules_are_the_ones_loaded() -> None:
    """The install compiles them with the system's gcc and Python headers (`make
    install` again after a change to one of them)."""
    assert disq.pure_python == ""
    assert not disq.node.__file__.endswith(".py")  # type: ignore[union-attr]


def test_disq_pure_python_loads_the_sources() -> None:
    out = run(DISQ_PURE_PYTHON="1")
    assert out.startswith("'DISQ_PURE_PYTHON is set'") and out.rstrip().endswith("node.py")
    assert not run(DISQ_PURE_PYTHON="0").startswith("'DISQ_PURE_PYTHON is set'")


def test_a_build_replaces_the_compiled_files_whole(tmp_path: Path) -> None:
    """setup.py build_in_place (`make compiled`) moves each built file over the old one
    (a new inode): a node that loaded the old one keeps it unchanged, as the file a
    running process maps must stay (writing into it, as build_ext --inplace does, changes
    the code under the process). The C extensions only (DISQ_PURE_PYTHON), in a copy."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "disq").mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", *(
            f"disq/{c}" for c in ("_gcfree.c", "_msgcost.c", "_bustag.c"))):
        shutil.copy(root / name, tmp_path / name)
    suffix = EXTENSION_SUFFIXES[0]
    old = tmp_path / "disq" / f"_gcfree{suffix}"
    old.write_bytes(b"the build before")
    loaded = tmp_path / "loaded"
    os.link(old, loaded)  # what a running node holds
    subprocess.run([sys.executable, "setup.py", "-q", "build_in_place"], cwd=tmp_path,
                   check=True, capture_output=True, env={**os.environ, "DISQ_PURE_PYTHON": "1"})
    assert loaded.read_bytes() == b"the build before"
    assert old.read_bytes().startswith(b"\x7fELF")
    assert not list((tmp_path / "build" / "in-place").rglob(f"*{suffix}"))  # all moved
