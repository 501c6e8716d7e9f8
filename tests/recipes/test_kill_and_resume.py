"""Recipe training killed with SIGKILL resumes to the uninterrupted result.

Killed during an epoch, or at any point between the writes at an epoch's
end (checkpoint, history row, backup), a resumed run logs each epoch once,
keeps a checkpoint of every epoch, and ends with the uninterrupted weights.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import keras_attn

# Backend-independent recipe code: shared out when backends run side by
# side (tests/conftest.py), to the lightest suite.
pytestmark = pytest.mark.split_backend("torch")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "translate_multi30k.py"
# Two epochs are enough for every kill point: epoch 0's end writes, and a
# kill during epoch 1 (the resumed run then ends the training). 120 pairs:
# 14 updates per epoch, still seconds of training to kill into, and a 300-piece
# vocabulary trains on them (the tiny setting's 300 pairs took 29 per epoch).
EPOCHS = 2
# Dropout on, so that the restored random state matters too.
TRAIN = [
    "train",
    "--setting",
    "tiny",
    "--set",
    f"epochs={EPOCHS}",
    "--set",
    "train_pairs=120",
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


def recipe_env(**extra):
    """The recipe processes' environment: one intra-op thread each.

    As the test process (tests/conftest.py): torch's thread pool (sized by
    OMP_NUM_THREADS) waits for all of its threads at every op, and on CI's
    2 busy cores 2 threads made a tiny epoch several times slower than 1.
    """
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1", **extra)


def run(output_dir, *extra, check=True):
    result = subprocess.run(
        command(output_dir, *extra),
        capture_output=True,
        text=True,
        env=recipe_env(),
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


def checkpoint_epochs(output_dir):
    return sorted(
        int(path.name[len("epoch_") : -len(".keras")])
        for path in (output_dir / "checkpoints").glob("epoch_*.keras")
    )


def kill_after_first_epoch(output_dir):
    """Starts training, SIGKILLs it once epoch 0 is backed up (epoch 1 running)."""
    process = subprocess.Popen(
        command(output_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=recipe_env(),
    )
    deadline = time.time() + 600
    try:
        while not backup_epochs(output_dir):
            assert process.poll() is None, "training ended before it was killed"
            assert time.time() < deadline, "no epoch finished in 10 minutes"
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory):
    """A run trained without interruption (with the same seed)."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    run(directory)
    return directory


@pytest.mark.slow
def test_sigkilled_training_resumes_to_the_uninterrupted_weights(
    tmp_path, reference_dir
):
    killed_dir = tmp_path / "killed"

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
def test_nan_loss_stops_training_and_keeps_the_last_good_state(
    tmp_path, reference_dir
):
    # A finished run (a copy of the uninterrupted one) trained one epoch
    # more at an absurd learning rate: the loss overflows in that epoch.
    run_dir = tmp_path / "run"
    shutil.copytree(reference_dir, run_dir, symlinks=True)
    good = final_weights(run_dir)
    result = run(
        run_dir,
        "--set",
        f"epochs={EPOCHS + 1}",
        "--set",
        "learning_rate_scale=1e30",
        check=False,
    )
    assert result.returncode != 0
    assert "NaN or Inf loss" in result.stderr
    assert f"last good state (after epoch {EPOCHS})" in result.stderr
    assert backup_epochs(run_dir) == EPOCHS
    assert epochs_logged(run_dir) == list(range(EPOCHS))
    checkpoint = keras_attn.saving.load_model(
        run_dir / "checkpoints" / f"epoch_{EPOCHS:03d}.keras", compile=False
    )
    for expected, actual in zip(good, checkpoint.get_weights(), strict=True):
        np.testing.assert_array_equal(np.asarray(actual), expected)


# `train` with a callback that SIGKILLs the process at one point of epoch
# 0's end, put where the recipe's own callbacks write: `KILL_AT` names it.
KILLING_TRAIN = """
import os, signal, sys
import keras
from keras_attn_recipes import translate_multi30k, translation_steps

point = os.environ["KILL_AT"]


class Kill(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if point != "after-backup":
            os.kill(os.getpid(), signal.SIGKILL)

    def on_epoch_begin(self, epoch, logs=None):
        if point == "after-backup" and epoch == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def training_callbacks(*args, **kwargs):
    callbacks = make_callbacks(*args, **kwargs)
    if point == "after-checkpoint":  # before the history row
        writer = translation_steps.AtomicEpochCheckpoint
        at = next(i for i, c in enumerate(callbacks) if isinstance(c, writer))
        callbacks.insert(at + 1, Kill())
    else:  # after every end-of-epoch write; then after the next epoch's start
        callbacks.append(Kill())
    return callbacks


make_callbacks = translation_steps._training_callbacks
translation_steps._training_callbacks = training_callbacks
translate_multi30k.main(sys.argv[1:])
"""


def killed_at(output_dir, point):
    """Runs `train` (the test's command) until it is SIGKILLed at `point`."""
    result = subprocess.run(
        [sys.executable, "-c", KILLING_TRAIN, *command(output_dir)[2:]],
        capture_output=True,
        text=True,
        # Unbuffered: what it printed before the kill is not lost.
        env=recipe_env(KILL_AT=point, PYTHONUNBUFFERED="1"),
        timeout=600,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    return result


def updates_logged(output_dir):
    with open(output_dir / "updates.csv", newline="") as file:
        return [int(row["update"]) for row in csv.DictReader(file)]


@pytest.mark.slow
def test_a_kill_between_the_epoch_end_writes_leaves_no_gap(tmp_path, reference_dir):
    """Killed at each point between epoch 0's writes, then resumed: every
    epoch has its checkpoint and one history row, and the weights are those
    of the uninterrupted run."""
    run_dir = tmp_path / "killed"
    # The checkpoint is written, not the history row: epoch 0 is not done.
    killed_at(run_dir, "after-checkpoint")
    assert (backup_epochs(run_dir), checkpoint_epochs(run_dir)) == (0, [1])
    assert epochs_logged(run_dir) == []
    # Resumed: the stale checkpoint goes, epoch 0 is trained again; killed
    # after its history row, before the backup marked it done.
    result = killed_at(run_dir, "after-history")
    assert "checkpoints ['epoch_001.keras']" in result.stdout
    assert (backup_epochs(run_dir), checkpoint_epochs(run_dir)) == (0, [1])
    assert epochs_logged(run_dir) == [0]
    # Resumed: the stale row goes; killed once the backup marked epoch 0 done.
    result = killed_at(run_dir, "after-backup")
    assert "1 row(s) of history.csv" in result.stdout
    assert (backup_epochs(run_dir), checkpoint_epochs(run_dir)) == (1, [1])
    assert epochs_logged(run_dir) == [0]

    # A run from before this order (the backup written first) could lose
    # the checkpoint of the epoch the backup counts; the resume writes it
    # again from the restored weights, which are exactly that epoch's.
    checkpoint = run_dir / "checkpoints" / "epoch_001.keras"
    model = keras_attn.saving.load_model(checkpoint, compile=False)
    at_epoch_end = [np.asarray(w) for w in model.get_weights()]
    model.load_weights(run_dir / "backup" / "epoch_00001.weights.h5")
    for want, got in zip(at_epoch_end, model.get_weights(), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    checkpoint.unlink()

    result = run(run_dir)
    assert "Resuming after epoch 1" in result.stdout
    assert epochs_logged(run_dir) == list(range(EPOCHS))
    assert checkpoint_epochs(run_dir) == list(range(1, EPOCHS + 1))
    updates = updates_logged(run_dir)
    assert updates == sorted(set(updates)), updates  # each update logged once
    rewritten = keras_attn.saving.load_model(checkpoint, compile=False)
    for want, got in zip(at_epoch_end, rewritten.get_weights(), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    # Averaging sees every epoch: the last EPOCHS checkpoints are there.
    from keras_attn_recipes.translation_steps import load_translator

    load_translator(run_dir, "greedy", average_last=EPOCHS)
    # And the kills changed nothing: the uninterrupted run's weights.
    for want, got in zip(
        final_weights(reference_dir), final_weights(run_dir), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for epoch in range(1, EPOCHS + 1):
        name = f"epoch_{epoch:03d}.keras"
        want = keras_attn.saving.load_model(
            reference_dir / "checkpoints" / name, compile=False
        ).get_weights()
        got = keras_attn.saving.load_model(
            run_dir / "checkpoints" / name, compile=False
        ).get_weights()
        for a, b in zip(want, got, strict=True):
            np.testing.assert_allclose(
                np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6
            )
