"""The installed disq_client is typed (py.typed): mypy --strict run on code outside the
checkout sees its types, as an editor does, in the editable install `make` makes too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MYPY = Path(sys.executable).with_name("mypy")

USER_CODE = """\
from disq_client import Client, Job


def body_text(job: Job) -> str:
    return job.body


def queued(client: Client) -> int:
    return client.qlen("emails")
"""


def test_mypy_sees_disq_client_types_from_outside_the_checkout(tmp_path: Path) -> None:
    (tmp_path / "user_code.py").write_text(USER_CODE)
    done = subprocess.run(
        [str(MYPY), "--strict", "--cache-dir", str(tmp_path / "cache"), "user_code.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    # Job.body is bytes: mypy knows it only if it found the package and its types
    assert done.stdout.splitlines() == [
        'user_code.py:5: error: Incompatible return value type (got "bytes", expected '
        '"str")  [return-value]',
        "Found 1 error in 1 file (checked 1 source file)"], done.stdout + done.stderr
