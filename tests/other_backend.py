"""Runs a Python script in a subprocess on the backend this process is not on."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def run_on_other_backend(script, *args):
    """Runs `script` with `args` under the other backend; returns its name.

    The script must print `keras.backend.backend()` as its last line, which
    proves it ran where it was sent.
    """
    other = {"jax": "tensorflow", "tensorflow": "jax"}[keras.backend.backend()]
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        env=dict(os.environ, KERAS_BACKEND=other, PYTHONPATH=REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == other
    return other
