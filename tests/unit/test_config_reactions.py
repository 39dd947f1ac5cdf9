"""CONFIG SET's reactions (disq/server/reactions.py): one per directive, each declared
beside what it changes, and only for directives CONFIG SET may change."""

from __future__ import annotations

import pytest

from disq.server import app
from disq.server.reactions import REACTIONS, reacts_to


def test_the_server_reacts_to_these_directives() -> None:
    assert app.Server  # importing the server registers its parts' reactions
    assert sorted(REACTIONS) == [
        "appendfsync", "appendonly", "client-rate-limit", "dir",
        "latency-monitor-threshold", "loglevel", "maxclients", "maxclients-per-ip",
        "maxmemory", "requirepass", "slowlog-log-slower-than", "slowlog-max-len",
        "watchdog-period"]


@pytest.mark.parametrize("name", ["no-such-directive", "port", "loglevel"])
def test_a_reaction_needs_a_settable_directive_without_one(name: str) -> None:
    """`port` is not settable at run time; `loglevel` has its reaction already."""
    with pytest.raises(ValueError, match=name):
        reacts_to(name)
