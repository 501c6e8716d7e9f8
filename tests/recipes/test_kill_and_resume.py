"""Recipe training killed with SIGKILL resumes to the uninterrupted result."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import keras_attn

# Backend-independent recipe code: shared out when backends run side by
# side (tests/conftest.py).
pytestmark = pytest.mark.split_backend("tensorflow")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "translate_multi30k.py"
EPOCHS = 3
# Dropout on, so that the restored random state matters too.
TRAIN = [
    "train",
    "--setting",
    "tiny",
    "--set",
    f"epochs={EPOCHS}",
    "--set",
    "dropout=0.1",
]


def command(output_dir, *extra):
    backend = os.environ.get("KERAS_BACKEND", "jax")
    return [
        sys.executable,
        str(RECIPE),
        *TRAIN,
        *extra,
        "--backend",
        backend,
        "--output-dir",
        str(output_dir),
    ]


def run(output_dir, *extra, check=True):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        command(output_dir, *extra),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def epochs_logged(output_dir):
    path = output_dir / "history.csv"
    if not path.exists():
        return []
    with open(path, newline="") as file:
        return [int(row["epoch"]) for row in csv.DictReader(file)]


def backup_epochs(output_dir):
    metadata = output_dir / "backup" / "training_metadata.json"
    return json.loads(metadata.read_text())["epoch"] if metadata.exists() else 0


def final_weights(output_dir):
    model = keras_attn.saving.load_model(output_dir / "model.keras", compile=False)
    return [np.asarray(w) for w in model.get_weights()]


def kill_after_first_epoch(output_dir):
    """Starts training, SIGKILLs it once epoch 0 is logged (epoch 1 running)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.Popen(
        command(output_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.time() + 600
    try:
        while not epochs_logged(output_dir):
            assert process.poll() is None, "training ended before it was killed"
            assert time.time() < deadline, "no epoch finished in 10 minutes"
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_sigkilled_training_resumes_to_the_uninterrupted_weights(tmp_path):
    reference_dir, killed_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    run(reference_dir)

    kill_after_first_epoch(killed_dir)
    completed = backup_epochs(killed_dir)
    assert 1 <= completed < EPOCHS, f"killed after {completed} epochs"
    assert not (killed_dir / "model.keras").exists()

    result = run(killed_dir)
    assert f"Resuming after epoch {completed}" in result.stdout
    # The restart logs only the epochs the killed run had not finished.
    assert epochs_logged(killed_dir) == list(range(EPOCHS))
    assert epochs_logged(reference_dir) == list(range(EPOCHS))
    # Same batches, same dropout masks, same optimizer state: same weights.
    # Exact on CPU: both runs execute the same compiled programs in the same
    # order; the tolerance only absorbs summation-order noise of
    # multi-threaded CPU kernels.
    for expected, actual in zip(
        final_weights(reference_dir), final_weights(killed_dir), strict=True
    ):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_nan_loss_stops_training_and_keeps_the_last_good_state(tmp_path):
    run(tmp_path, "--set", "epochs=1")
    good = final_weights(tmp_path)
    # An absurd learning rate makes the loss overflow in the next epoch.
    result = run(
        tmp_path, "--set", "epochs=2", "--set", "learning_rate_scale=1e30", check=False
    )
    assert result.returncode != 0
    assert "NaN or Inf loss" in result.stderr
    assert "last good state (after epoch 1)" in result.stderr
    assert backup_epochs(tmp_path) == 1
    assert epochs_logged(tmp_path) == [0]
    checkpoint = keras_attn.saving.load_model(
        tmp_path / "checkpoints" / "epoch_001.keras", compile=False
    )
    for expected, actual in zip(good, checkpoint.get_weights(), strict=True):
        np.testing.assert_array_equal(np.asarray(actual), expected)
