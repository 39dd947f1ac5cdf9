"""CONFIG SET's reactions: what the server does at once when a directive changes while
it runs. Each is declared beside what it changes, by `@reacts_to("directive")` on a
method of `Server` or of one of its parts (app.py, clients.py, stats.py, housekeeping.py,
access.py), so a directive's reaction is one method in one place. `Server`'s config
listener runs the one registered for the directive set; a directive without one takes
effect where its value is next read (`config.<name>`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..config import DIRECTIVES

Reaction = TypeVar("Reaction", bound=Callable[..., None])

# directive -> the method (of the Server: its first argument) given the new value
REACTIONS: dict[str, Callable[[Any, Any], None]] = {}


def reacts_to(name: str) -> Callable[[Reaction], Reaction]:
    """Register the decorated method as the reaction to `name`, a directive CONFIG SET
    may change (one reaction a directive)."""
    directive = DIRECTIVES.get(name)
    if directive is None or not directive.settable:
        raise ValueError(f"{name}: not a directive CONFIG SET changes")
    if name in REACTIONS:
        raise ValueError(f"{name}: has a reaction already")

    def register(reaction: Reaction) -> Reaction:
        REACTIONS[name] = reaction
        return reaction
    return register


def react(server: Any, name: str, value: Any) -> None:
    """A directive was set: its reaction, if it has one, runs for `server`."""
    reaction = REACTIONS.get(name)
    if reaction is not None:
        reaction(server, value)
