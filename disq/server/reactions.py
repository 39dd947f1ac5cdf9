"""CONFIG SET's reactions: what the server does at once when a directive changes while
it runs. Each is declared beside what it changes, by `@reacts_to("directive")` on a
method of `Server` or of one of its parts (app.py, clients.py, stats.py, housekeeping.py,
access.py), so a directive's reaction is one method in one place. The server binds each
to the object that owns it (`bind_reactions`), and its config listener runs the one for
the directive set; a directive without one takes effect where its value is next read
(`config.<name>`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..config import DIRECTIVES

Reaction = TypeVar("Reaction", bound=Callable[..., None])

# directive -> the method (of the Server or a part: its first argument) given the new value
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


def bind_reactions(*owners: object, every: bool = True) -> dict[str, Callable[[Any], None]]:
    """directive -> its reaction, bound to the one of `owners` whose class declares it.
    With `every`, each reaction registered needs an owner among them."""
    bound: dict[str, Callable[[Any], None]] = {}
    for name, reaction in REACTIONS.items():
        for owner in owners:
            if getattr(type(owner), reaction.__name__, None) is reaction:
                bound[name] = getattr(owner, reaction.__name__)
                break
        else:
            if every:
                raise LookupError(f"{name}: {reaction.__qualname__} belongs to none of "
                                  f"{[type(owner).__name__ for owner in owners]}")
    return bound
