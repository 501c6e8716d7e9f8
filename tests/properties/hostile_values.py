"""Hypothesis strategies of hostile argument values, shared by the
property tests of every package (see `docs/reliability.md`, "Method").

Each strategy draws values of the wrong type or out of range for one kind
of argument; the property tests assert that a public call given such a
value either works (finite outputs of the documented shape) or raises
`TypeError`/`ValueError` whose message names the argument, and never
another exception type, a hang or NaN.

Settings: `PROPERTY_SETTINGS` is derandomized (a CI failure reproduces)
and small, so the property tests stay within CI's time budget.
"""

import math

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)

# Values that are not numbers at all.
NOT_A_NUMBER = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.just("1"),
    st.lists(st.integers(0, 3), max_size=2),
    st.just({}),
    st.just(b"2"),
)
BOOLEANS = st.sampled_from([True, False, np.bool_(True)])
FLOAT_SPECIALS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308])

# Anything that is not a positive integer (for sizes, counts, lengths).
NOT_A_POSITIVE_INT = st.one_of(
    NOT_A_NUMBER,
    BOOLEANS,
    FLOAT_SPECIALS,
    st.integers(max_value=0),
    st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda x: x != int(x) if math.isfinite(x) else True
    ),
    st.just(2.0),
)
# Anything that is not a rate in [0, 1).
NOT_A_RATE = st.one_of(
    NOT_A_NUMBER,
    BOOLEANS,
    FLOAT_SPECIALS,
    st.floats(min_value=1.0, allow_infinity=False),
    st.floats(max_value=-1e-9, allow_infinity=False),
)
# Anything that is not a finite number.
NOT_A_FINITE_NUMBER = st.one_of(
    NOT_A_NUMBER, BOOLEANS, FLOAT_SPECIALS.filter(lambda x: not math.isfinite(x))
)
# Anything that is not a boolean (truthiness would misread these).
NOT_A_BOOL = st.one_of(
    NOT_A_NUMBER.filter(lambda x: x is not None),
    st.sampled_from([0, 1, 0.5, "no", "False", np.int64(1)]),
)


def assert_names_argument(error, name):
    """The error is a TypeError/ValueError whose message names `name`."""
    assert isinstance(error, (TypeError, ValueError)), (
        f"{type(error).__name__} instead of TypeError/ValueError: {error}"
    )
    assert name in str(error), f"message does not name `{name}`: {error}"
