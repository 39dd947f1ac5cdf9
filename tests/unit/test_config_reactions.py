"""CONFIG SET's reactions (disq/server/reactions.py): one per directive, each declared
beside what it changes, and only for directives CONFIG SET may change."""

from __future__ import annotations

import pytest

from disq.config import Config
from disq.server import app
from disq.server.reactions import REACTIONS, bind_reactions, reacts_to


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


def test_each_reaction_runs_on_the_part_that_declares_it() -> None:
    """The server binds a reaction to its owner: requirepass's is Access's, which
    changes the server's table of users."""
    config = Config()
    server = app.Server(config)
    assert not server.acl.auth_required
    config.apply("requirepass", ["secret"])
    assert server.acl.auth_required


def test_a_reaction_needs_an_owner_among_the_parts() -> None:
    assert app.Server  # (its parts' reactions registered)
    with pytest.raises(LookupError, match="requirepass"):
        bind_reactions(object())
