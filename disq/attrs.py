"""Job attributes (ADDJOB ... ATTR key value, a disq extension): a few small string
pairs kept with a job (`JobExt.attrs`), and their checks as a peer's message or an AOF
gives them. GETJOB ... WHERE filters on them (where.py)."""

from __future__ import annotations

from typing import Final

from disq_client.spec import ATTR_KEY_MAX_LEN, ATTR_VALUE_MAX_LEN, MAX_ATTRS

Attrs = tuple[tuple[bytes, bytes], ...]

MAX_KEY_LEN: Final = ATTR_KEY_MAX_LEN
MAX_VALUE_LEN: Final = ATTR_VALUE_MAX_LEN
MAX_PAIRS: Final = MAX_ATTRS


def flat(attrs: Attrs) -> list[bytes]:
    """key, value, key, value...: how SHOW, the bus and the AOF carry them."""
    out: list[bytes] = []
    for key, value in attrs:
        out += (key, value)
    return out


def from_flat(items: object) -> Attrs | None:
    """`flat`'s attributes checked as ADDJOB checks them (1 to MAX_PAIRS pairs, keys of
    1 to MAX_KEY_LEN bytes and distinct, values of at most MAX_VALUE_LEN bytes); None
    if anything is off."""
    if type(items) is not list or not 0 < len(items) <= 2 * MAX_PAIRS or len(items) % 2:
        return None
    pairs: dict[bytes, bytes] = {}
    for i in range(0, len(items), 2):
        key, value = items[i], items[i + 1]
        if not (type(key) is bytes and 0 < len(key) <= MAX_KEY_LEN and key not in pairs
                and type(value) is bytes and len(value) <= MAX_VALUE_LEN):
            return None
        pairs[key] = value
    return tuple(pairs.items())
