"""Shared settings and strategies of the property-based (hypothesis) tests.

The runs are bounded so that `make test` stays quick; `DISQ_FUZZ_EXAMPLES=5000` (an
environment variable) runs every property that many times instead.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

DEFAULT_EXAMPLES = 200


def examples(default: int = DEFAULT_EXAMPLES) -> int:
    """How many examples a property runs: `default`, or DISQ_FUZZ_EXAMPLES."""
    value = os.environ.get("DISQ_FUZZ_EXAMPLES")
    return int(value) if value else default


def fuzz_settings(default: int = DEFAULT_EXAMPLES) -> settings:
    """Bounded, no per-example deadline (real processes and the shared CPU vary), no
    example database written into the checkout."""
    return settings(max_examples=examples(default), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


JOB_ID_SHAPED = st.sampled_from([
    b"D-00000000-aaaaaaaaaaaaaaaaaaaaaaaa-05a1",
    b"D-5d5322f8-HSfHByjJCeMDw0309GQa2mX5-05a1",
    b"D-5d5322f8-HSfHByjJCeMDw0309GQa2mX5-05a",
    b"D-5d5322f8-HSfHByjJCeMDw0309GQa2mX5-05a1x",
    b"D-zzzzzzzz-aaaaaaaaaaaaaaaaaaaaaaaa-ffff",
    b"DI5d5322f8-HSfHByjJCeMDw0309GQa2mX5-05a1",
])
NUMBERS = st.one_of(
    st.integers(-2**70, 2**70).map(lambda n: str(n).encode()),
    st.sampled_from([b"0", b"-1", b"1", b"4294967295", b"4294967296", b"9223372036854775807",
                     b"9223372036854775808", b"-9223372036854775809", b"1e3", b"0x10",
                     b" 5", b"5 ", b"+5", b"1.5", b"nan", b"inf", b"00", b"-0"]),
)
WORDS = st.binary(max_size=12) | st.text(max_size=12).map(str.encode)


def word_strategy(options: list[bytes]) -> st.SearchStrategy[bytes]:
    """One argument: an option name of the command (any case), a number, a job-ID-shaped
    string, an empty string or arbitrary bytes."""
    cased = st.sampled_from(options or [b"x"]).flatmap(
        lambda w: st.sampled_from([w, w.lower(), w.upper()]))
    return st.one_of(cased, cased, NUMBERS, JOB_ID_SHAPED, st.just(b""), WORDS)
