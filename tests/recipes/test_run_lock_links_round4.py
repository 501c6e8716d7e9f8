"""The run directory's lock never follows a symbolic link and never opens a
special file (issue 49: robustness round 4).

Before, taking the lock opened `<run>/.run.lock` with `O_CREAT` and then
truncated and rewrote it: a link there to any writable file outside the run
was overwritten with the owner's record, a dangling link created its
target, a link to the run's own `config.json` destroyed the settings, and a
FIFO gave a traceback (the pid-file fallback would wait on it forever).
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest

from keras_attn_recipes import run_lock
from keras_attn_recipes.cli_io import RunDirectoryError
from keras_attn_recipes.run_lock import LOCK_FILE, hold_run_directory
from keras_attn_recipes.translation_config import SETTINGS

# Backend-independent code: one backend runs it when they run side by side.
pytestmark = pytest.mark.split_backend("torch")

# The processes run on JAX whatever the test's backend: they stop at the
# lock, before any model, and Keras imports in half the CPU time of torch's
# or TensorFlow's (6 s against 12 on CI's machine).
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="jax")
VICTIM = b"the user's own file, outside the run directory\n"


def snapshot(directory):
    """Every entry below `directory`: a link's target text, a file's bytes."""
    entries = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if path.is_symlink():
            entries[name] = ("link", os.readlink(path))
        elif path.is_file():
            entries[name] = ("file", path.read_bytes())
        else:
            entries[name] = ("other", None)
    return entries


@pytest.fixture
def run_dir(tmp_path):
    """A run directory `train --setting tiny` would resume: its settings."""
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps(dataclasses.asdict(SETTINGS["tiny"]), indent=2)
    )
    return directory


def plant(kind, run_dir, tmp_path):
    """Puts `kind` where the lock file goes; returns what it points at."""
    lock = run_dir / LOCK_FILE
    if kind == "link_to_victim":
        victim = tmp_path / "victim.txt"
        victim.write_bytes(VICTIM)
        lock.symlink_to(victim)
        return "a symbolic link to", victim
    if kind == "dangling_link":
        target = tmp_path / "created_by_the_lock.txt"
        lock.symlink_to(target)
        return "a symbolic link to", target
    if kind == "link_to_config":
        lock.symlink_to("config.json")
        return "a symbolic link to 'config.json'", run_dir / "config.json"
    os.mkfifo(lock)
    return "a FIFO (named pipe)", None


# Real processes (exit status, no traceback) for three cases; every kind
# meets both lock implementations in-process below.
@pytest.mark.parametrize(
    "kind, command",
    [
        ("link_to_victim", "train"),
        # As reported: `evaluate` overwrote the settings, then ran on the
        # default ones and exited 0.
        ("link_to_config", "evaluate"),
        ("fifo", "train"),
    ],
)
def test_a_planted_lock_file_is_refused_and_left_alone(
    run_dir, tmp_path, kind, command
):
    found, target = plant(kind, run_dir, tmp_path)
    argv = {
        "train": ["train", "--setting", "tiny"],
        # `evaluate` checks that the run is trained (model.keras is there)
        # and then takes the lock; it never reads this stand-in.
        "evaluate": ["evaluate", "--strategy", "greedy"],
    }[command]
    if command == "evaluate":
        (run_dir / "model.keras").write_bytes(b"stand-in")
    before = snapshot(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "keras_attn_recipes.translate_multi30k", *argv]
        + ["--output-dir", str(run_dir)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,  # a FIFO opened for writing would wait for a reader
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        f"error: The run directory {run_dir} cannot be locked: its lock file "
        f"{run_dir / LOCK_FILE} is {found}"
    )
    assert "Expected a regular file" in error
    # Nothing changed: the victim, the run's settings, the link itself; a
    # dangling link's target was not created.
    assert snapshot(tmp_path) == before
    if target is not None:
        assert target.read_bytes() == before[str(target.relative_to(tmp_path))][1]


@contextmanager
def deadline(seconds):
    """Fails the test (instead of hanging) if the block runs too long."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("flock", [True, False], ids=["flock", "pid_file"])
@pytest.mark.parametrize(
    "kind", ["link_to_victim", "dangling_link", "link_to_config", "fifo"]
)
def test_both_lock_kinds_refuse_links_and_special_files(
    run_dir, tmp_path, monkeypatch, kind, flock
):
    if not flock:  # the fallback where `fcntl` is missing
        monkeypatch.setattr(run_lock, "fcntl", None)
    found, target = plant(kind, run_dir, tmp_path)
    before = snapshot(tmp_path)
    with deadline(20):  # the old fallback waited on a FIFO forever
        with pytest.raises(RunDirectoryError, match="cannot be locked") as info:
            with hold_run_directory(run_dir, "train"):
                pass
    assert f"{run_dir / LOCK_FILE} is {found}" in str(info.value)
    assert snapshot(tmp_path) == before
    if kind == "dangling_link":
        assert not target.exists()


@pytest.mark.parametrize("flock", [True, False], ids=["flock", "pid_file"])
def test_a_regular_lock_file_still_works(run_dir, monkeypatch, flock):
    if not flock:
        monkeypatch.setattr(run_lock, "fcntl", None)
    with hold_run_directory(run_dir, "train"):
        owner = json.loads((run_dir / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["command"] == "train"
    # flock keeps the file (its record stays); the pid file is removed.
    assert (run_dir / LOCK_FILE).exists() == flock


def test_a_zoo_plot_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    from keras_attn_recipes.zoo_common import plot_history

    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.png").symlink_to(victim)
    plot_history({"loss": [2.0, 1.0]}, ("loss",), run / "history.png", "run")
    assert victim.read_bytes() == VICTIM
    assert not (run / "history.png").is_symlink()
    assert (run / "history.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in run.iterdir()) == ["history.png"]


def test_the_translation_plots_replace_a_planted_link_instead_of_writing_through_it(
    tmp_path,
):
    from keras_attn_recipes.plots import plot_attention, plot_learning_curves

    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.csv").write_text("epoch,loss,val_loss\n0,2.0,2.5\n1,1.0,1.5\n")
    for name in ("learning_curves.png", "cross_attention.png"):
        (run / name).symlink_to(victim)
    plot_learning_curves(run / "history.csv", run / "learning_curves.png")
    plot_attention(
        [[0.5, 0.5], [0.2, 0.8]],
        ["a", "b"],
        ["x", "y"],
        run / "cross_attention.png",
        "t",
    )
    assert victim.read_bytes() == VICTIM
    for name in ("learning_curves.png", "cross_attention.png"):
        assert not (run / name).is_symlink()
        assert (run / name).read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in run.iterdir()) == [
        "cross_attention.png",
        "history.csv",
        "learning_curves.png",
    ]


@pytest.mark.parametrize("kind", ["link to a victim", "dangling link", "fifo"])
def test_the_training_logs_refuse_a_planted_link_or_special_file(tmp_path, kind):
    """history.csv (CSVLogger) and updates.csv (UpdateBudget) are appended
    to; a link or a FIFO planted there is refused, its target untouched."""
    from keras_attn.file_safety import NotARegularFileError
    from keras_attn_recipes.translation_steps import _claimed
    from keras_attn_recipes.update_budget import _append

    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    for name, open_log in (("history.csv", _claimed), ("updates.csv", _append)):
        path = tmp_path / name
        if kind == "link to a victim":
            path.symlink_to(victim)
        elif kind == "dangling link":
            path.symlink_to(tmp_path / f"created_{name}")
        else:
            os.mkfifo(path)
        with pytest.raises(NotARegularFileError, match=name):
            open_log(path)
        assert victim.read_bytes() == VICTIM
        assert not (tmp_path / f"created_{name}").exists()


def test_the_training_logs_append_to_a_regular_file(tmp_path):
    from keras_attn_recipes.translation_steps import _claimed
    from keras_attn_recipes.update_budget import _append

    history = tmp_path / "history.csv"
    assert _claimed(history) == history and history.read_bytes() == b""
    history.write_text("epoch,loss\n0,1.0\n")
    assert _claimed(history) == history
    assert history.read_text() == "epoch,loss\n0,1.0\n"
    with _append(tmp_path / "updates.csv") as file:
        file.write("a\n")
    with _append(tmp_path / "updates.csv") as file:
        file.write("b\n")
    assert (tmp_path / "updates.csv").read_text() == "a\nb\n"
