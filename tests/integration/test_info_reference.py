"""docs/reference/info.md lists every field INFO shows: a node with the AOF on and a
few features used answers every section, Disque's and disq's, and each field name
(the numbered or named ones by their pattern) must be on the page."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from support import DisqProcess, call

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "info.md"
SECTIONS = ("everything", "federation", "dedup", "clock", "failures", "users", "results",
            "batches", "retention")
# Fields named after a command, a user, a peer or a queue, as the page writes them
PATTERNS = ((re.compile(r"cmdstat_\w+"), "cmdstat_<command>"),
            (re.compile(r"user_\w+"), "user_<name>"), (re.compile(r"peer\d+"), "peer<n>"),
            (re.compile(r"qdl\d+"), "qdl<n>"), (re.compile(r"rq\d+"), "rq<n>"))


def test_every_info_field_is_documented(start_node: Callable[..., DisqProcess]) -> None:
    node = start_node("--appendonly", "yes")
    call(node, "ADDJOB", "q", "x", 0, "MAXDELIVERIES", 1)
    call(node, "NACK", call(node, "GETJOB", "FROM", "q")[0][1])  # type: ignore[index]
    call(node, "QPOLICY", "kept", "SET", "RETAIN", 3600)
    kept = call(node, "ADDJOB", "kept", "y", 0)
    call(node, "GETJOB", "FROM", "kept")
    call(node, "ACKJOB", kept)  # retained: INFO retention lists the queue
    page = PAGE.read_text()
    documented = set(re.findall(r"`([a-z0-9_<>]+)`", page))
    missing = set()
    for section in SECTIONS:
        text = call(node, "INFO", section)
        assert isinstance(text, bytes)
        for line in text.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            name = line.split(":", 1)[0]
            for pattern, shown in PATTERNS:
                if pattern.fullmatch(name) and name not in documented:
                    name = shown
            if name not in documented:
                missing.add(name)
    assert not missing, f"INFO fields not on docs/reference/info.md: {sorted(missing)}"
