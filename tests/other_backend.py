"""Runs a Python script in a subprocess on another Keras backend.

JAX and TensorFlow are always installed (the `dev` extra); torch only with
the `torch` extra. `OTHER_BACKENDS` lists the installed backends this
process is not on, so a cross-backend test parametrized over it covers
every pair in both directions once each backend's suite has run, and skips
torch cleanly where it is not installed.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras

REPO_ROOT = str(Path(__file__).resolve().parents[1])
BACKENDS = ("jax", "tensorflow", "torch")


def installed_backends():
    """The backends whose framework can be imported here."""
    return [name for name in BACKENDS if importlib.util.find_spec(name) is not None]


OTHER_BACKENDS = [
    name for name in installed_backends() if name != keras.backend.backend()
]


def run_on_backend(backend, script, *args):
    """Runs `script` with `args` under `backend`; returns the backend's name.

    The script must print `keras.backend.backend()` as its last line, which
    proves it ran where it was sent.
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        env=dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == backend
    return backend


def run_on_other_backend(script, *args):
    """Runs `script` under the first other backend (JAX or TensorFlow)."""
    return run_on_backend(OTHER_BACKENDS[0], script, *args)
