"""The cases of a cross-backend test: each pair of backends once in CI.

A test parametrized over `OTHER_BACKENDS` (tests/other_backend.py) runs a
case for every other installed backend. When it checks both directions
(saved here and loaded there, saved there and loaded here), the case of
`other` on backend `here` covers the same pair as the case of `here` on
`other`. When scripts/test.sh runs the backends side by side, each case
of `other` runs only on the backend before `other` in the cycle jax ->
tensorflow -> torch -> jax (`split_backend`): jax and TensorFlow on JAX,
TensorFlow and torch on TensorFlow, torch and JAX on torch; each pair
once, each backend one subprocess. A backend run alone runs every case.
"""

import pytest
from other_backend import OTHER_BACKENDS

_RUNS_ON = {"tensorflow": "jax", "torch": "tensorflow", "jax": "torch"}


def other_backend_cases():
    """`OTHER_BACKENDS`, each marked with the backend that runs its pair."""
    return [
        pytest.param(other, marks=pytest.mark.split_backend(_RUNS_ON[other]))
        for other in OTHER_BACKENDS
    ]
