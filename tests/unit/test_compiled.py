"""The hot path runs compiled where it was built (setup.py, mypyc), and from its .py
files with DISQ_PURE_PYTHON set (disq/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys

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
