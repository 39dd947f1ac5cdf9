"""The docs site builds in strict mode (mkdocs.yml): a broken link or anchor, a page
missing from the nav, a README section the site includes that is gone, a client
docstring mkdocstrings cannot read: each fails the build, and this test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: `make test` installs it (the test extra)")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # (the theme's notice, not the site's)
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "reference/commands/index.html",
                 "reference/python-client/index.html", "guides/spark/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
