"""Run directories and presets lose nothing to a second writer, a kill or a
full disk, and the recipe refuses the commands that would overwrite its own
inputs (issue 35: robustness round 3)."""

import dataclasses
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import keras
import pytest
from untrained_runs import write_untrained_run

from keras_attn.text import Translator
from keras_attn_recipes import run_lock, translate_multi30k
from keras_attn_recipes.plots import plot_learning_curves
from keras_attn_recipes.run_lock import (
    LOCK_FILE,
    RunDirectoryBusy,
    hold_run_directory,
)
from keras_attn_recipes.translation_preset import save_preset
from keras_attn_recipes.translation_steps import AtomicEpochCheckpoint

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "translate_multi30k.py"
# One intra-op thread per recipe process, as in the test process
# (tests/conftest.py): torch's thread pool, sized by OMP_NUM_THREADS, waits
# for all of its threads at every op, which on busy cores costs more than
# it gains on the tiny setting's tensors.
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")

# Locks, atomic files, kills and refusals: backend-independent recipe code
# (the weights go through Keras's HDF5 writer on every backend). When the
# backends run side by side, one runs this file (tests/conftest.py): torch,
# whose suite finishes first; there its `slow` tests run too. The module
# fixtures (an untrained run and its preset, checked by decoding 64 pairs)
# are then built once instead of three times.
pytestmark = pytest.mark.split_backend("torch")

# A process that holds a run directory's lock until it is killed.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from keras_attn_recipes.run_lock import hold_run_directory
    with hold_run_directory(sys.argv[1], "train"):
        print("locked", flush=True)
        time.sleep(600)
    """
)


def hold_lock(directory):
    """Starts a process that holds `directory`'s lock; returns it, locked."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def kill(process):
    process.send_signal(signal.SIGKILL)
    process.wait()


def full_disk(write):
    """`write` that writes half of its data, then fails as a full disk does."""

    def failing(self, data, *args, **kwargs):
        write(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    return failing


def leftovers(directory):
    """Hidden temporary files or folders a failed write left behind."""
    return sorted(
        p.name for p in Path(directory).iterdir() if p.name.startswith(".partial-")
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory as `train` leaves it, from an untrained tiny model."""
    directory = tmp_path_factory.mktemp("run")
    write_untrained_run(directory)
    return directory


@pytest.fixture(scope="module")
def old_preset(run_dir, tmp_path_factory):
    """A good preset of `run_dir`: `(directory, its files' bytes)`."""
    directory = tmp_path_factory.mktemp("presets") / "multi30k_en_de"
    save_preset(run_dir, directory)
    return directory, snapshot(directory)


def snapshot(directory):
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(Path(directory).rglob("*"))
        if p.is_file()
    }


def assert_old_preset_whole(old_preset):
    directory, files = old_preset
    assert snapshot(directory) == files
    assert "check" in json.loads((directory / "metadata.json").read_text())
    translator = Translator.from_preset(directory)
    assert isinstance(translator.translate(["A dog."])[0], str)


# --- One writer per run directory -------------------------------------------


def test_a_second_writer_is_refused_naming_the_directory_and_owner(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(RunDirectoryBusy) as info:
            with hold_run_directory(tmp_path, "evaluate"):
                pass
        message = str(info.value)
        assert f"The run directory {tmp_path} is in use" in message
        assert f"pid {holder.pid} on host" in message and "`train`" in message
        # The command line says the same, without a traceback (on a run that
        # has a model: without one, `evaluate` stops before the lock).
        (tmp_path / "model.keras").write_bytes(b"stand-in, never loaded")
        with pytest.raises(SystemExit) as info:
            translate_multi30k.main(["evaluate", "--output-dir", str(tmp_path)])
        assert str(info.value.code).startswith("error: The run directory")
        assert f"pid {holder.pid}" in str(info.value.code)
    finally:
        kill(holder)


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    holder = hold_lock(tmp_path)
    kill(holder)
    # The dead owner's record is still there; its lock went with it.
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
    with hold_run_directory(tmp_path, "train"):
        owner = json.loads((tmp_path / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["command"] == "train"


def test_without_flock_a_pid_file_refuses_a_live_owner_and_replaces_a_dead_one(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(run_lock, "fcntl", None)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": sleeper.pid}))
        with pytest.raises(RunDirectoryBusy, match=f"pid {sleeper.pid}"):
            with hold_run_directory(tmp_path, "train"):
                pass
    finally:
        kill(sleeper)
    with hold_run_directory(tmp_path, "train"):  # its owner is dead now
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_file_system_without_flock_falls_back_to_the_pid_file(tmp_path, monkeypatch):
    import types

    def flock(descriptor, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(
        run_lock, "fcntl", types.SimpleNamespace(flock=flock, LOCK_EX=2, LOCK_NB=4)
    )
    with hold_run_directory(tmp_path, "evaluate"):
        owner = json.loads((tmp_path / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["command"] == "evaluate"
    assert not (tmp_path / LOCK_FILE).exists()


def test_the_lock_holder_removes_what_killed_writers_left(tmp_path):
    from keras_attn_recipes.run_lock import remove_partial_files

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / ".partial-0a1b2c3d.epoch_002.keras").write_bytes(b"x")
    (tmp_path / "checkpoints" / "epoch_001.keras").write_bytes(b"kept")
    (tmp_path / ".partial-0a1b2c3d.tokenizer").mkdir()
    (tmp_path / ".partial-0a1b2c3d.tokenizer" / "tokenizer.model").write_bytes(b"x")
    (tmp_path / "config.json").write_text("{}")
    remove_partial_files(tmp_path)
    assert snapshot(tmp_path) == {
        "checkpoints/epoch_001.keras": b"kept",
        "config.json": b"{}",
    }
    assert leftovers(tmp_path) == []


def test_a_history_broken_by_two_writers_is_plotted_with_a_warning(tmp_path, capsys):
    # What two `train` processes left before the lock: a second header, a
    # duplicate row and a torn last line.
    header = "epoch,loss,masked_accuracy,updates,val_loss,val_masked_accuracy\n"
    row = "0,5.1,0.10,12,4.9,0.12\n"
    history = tmp_path / "history.csv"
    history.write_text(header + row + header + row + "1,4.2,0.2\n")
    updates = tmp_path / "updates.csv"
    updates.write_text("update,loss,learning_rate\n5,5.5,0.001\n12,5.1,0.002\n")
    picture = tmp_path / "curves.png"
    assert plot_learning_curves(history, picture, updates_csv=updates) == picture
    assert picture.stat().st_size > 0
    warning = capsys.readouterr().err
    assert f"Warning: {history}: skipped 2 malformed row(s) (lines 3, 5)" in warning


@pytest.mark.slow
@pytest.mark.split_backend("torch")
def test_two_train_processes_on_one_directory(tmp_path):
    backend = os.environ.get("KERAS_BACKEND", "jax")
    train = [
        sys.executable,
        str(RECIPE),
        "train",
        "--setting",
        "tiny",
        "--set",
        "train_steps=2",
        "--backend",
        backend,
        "--output-dir",
        str(tmp_path),
    ]
    first = subprocess.Popen(
        train, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    try:
        deadline = time.time() + 300
        while True:  # until the first one holds the lock
            try:
                owner = json.loads((tmp_path / LOCK_FILE).read_text())["pid"]
            except (OSError, ValueError, KeyError):
                owner = None
            if owner == first.pid:
                break
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.time() < deadline, "the first train never took the lock"
            time.sleep(0.05)
        second = subprocess.run(
            train, capture_output=True, text=True, env=ENV, timeout=300
        )
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            kill(first)
    assert second.returncode == 1
    assert f"error: The run directory {tmp_path} is in use" in second.stderr
    assert f"pid {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    # The first one ran undisturbed: one header, one row per epoch.
    assert first.returncode == 0, err[-3000:]
    lines = (tmp_path / "history.csv").read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("epoch,")
    assert json.loads((tmp_path / "training.json").read_text())["updates"] > 0


# --- save-preset: a kill or a full disk leaves the old preset ----------------

# Child processes that run `save-preset` over the old preset and SIGKILL
# themselves at a named point.
KILL_POINTS = {
    # Mid-weights: half a file written, as in the report (0 or 96 bytes).
    "weights": """
        import keras
        def save_weights(self, path, *args, **kwargs):
            with open(path, "wb") as file:
                file.write(b"\\x89HDF\\r\\n" + bytes(90))
            os.kill(os.getpid(), signal.SIGKILL)
        keras.Model.save_weights = save_weights
    """,
    # The preset is written; its check runs.
    "check": """
        from keras_attn_recipes import translation_preset
        def check(directory):
            os.kill(os.getpid(), signal.SIGKILL)
        translation_preset._check = check
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_save_preset_killed_at_any_point_keeps_the_old_preset(
    run_dir, old_preset, point
):
    directory, _ = old_preset
    script = "import os, signal, sys\n" + textwrap.dedent(KILL_POINTS[point])
    script += textwrap.dedent(
        """
        from keras_attn_recipes import translate_multi30k
        translate_multi30k.main(sys.argv[1:])
        """
    )
    argv = ["save-preset", "--output-dir", str(run_dir), "--preset-dir"]
    child = subprocess.run(
        [sys.executable, "-c", script, *argv, str(directory)],
        capture_output=True,
        text=True,
        env=dict(ENV, KERAS_BACKEND=keras.backend.backend()),
        timeout=600,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    assert_old_preset_whole(old_preset)


def test_save_preset_on_a_full_disk_keeps_the_old_preset(
    run_dir, old_preset, monkeypatch
):
    directory, _ = old_preset
    before = leftovers(directory.parent)  # a killed run's, if any

    def save_weights(self, path, *args, **kwargs):
        Path(path).write_bytes(b"\x89HDF\r\n")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keras.Model, "save_weights", save_weights)
    with pytest.raises(OSError, match="No space left"):
        save_preset(run_dir, directory)
    monkeypatch.undo()
    assert_old_preset_whole(old_preset)
    assert leftovers(directory.parent) == before


# --- Atomic files of the run ------------------------------------------------


def test_a_full_disk_leaves_checkpoints_and_json_files_whole(tmp_path, monkeypatch):
    from keras_attn.file_safety import write_text_atomically

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    checkpoint = AtomicEpochCheckpoint(tmp_path)
    checkpoint.set_model(model)
    checkpoint.on_epoch_end(0)
    good = (tmp_path / "epoch_001.keras").read_bytes()
    write_text_atomically(tmp_path / "config.json", '{"seed": 0}')

    def save(self, path, *args, **kwargs):
        Path(path).write_bytes(good[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keras.Model, "save", save)
    monkeypatch.setattr(Path, "write_text", full_disk(Path.write_text))
    with pytest.raises(OSError, match="No space left"):
        checkpoint.on_epoch_end(0)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomically(tmp_path / "config.json", '{"seed": 1}')
    monkeypatch.undo()
    assert (tmp_path / "epoch_001.keras").read_bytes() == good
    assert json.loads((tmp_path / "config.json").read_text()) == {"seed": 0}
    assert leftovers(tmp_path) == []
    keras.saving.load_model(tmp_path / "epoch_001.keras")


# --- Commands that would overwrite their own inputs -------------------------


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_a_preset_dir_overlapping_the_run_is_refused(run_dir, where):
    preset_dir = {
        "same": run_dir,
        "inside": run_dir / "preset",
        "around": run_dir.parent,
    }[where]
    before = snapshot(run_dir)
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            [
                "save-preset",
                "--output-dir",
                str(run_dir),
                "--preset-dir",
                str(preset_dir),
            ]
        )
    assert str(info.value.code).startswith(
        "error: --preset-dir must be a directory apart from --output-dir"
    )
    assert f"--preset-dir {str(preset_dir)!r}" in str(info.value.code)
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
def test_translate_output_onto_its_input_is_refused(tmp_path, link):
    source = tmp_path / "in.txt"
    source.write_text("A dog runs.\n")
    output = {
        "same": source,
        "symlink": tmp_path / "s.txt",
        "hardlink": tmp_path / "h.txt",
    }[link]
    if link == "symlink":
        output.symlink_to(source)
    elif link == "hardlink":
        os.link(source, output)
    argv = ["translate", "--output-dir", str(tmp_path), "--input", str(source)]
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main([*argv, "--output", str(output)])
    assert "--output must not be the --input file" in str(info.value.code)
    assert source.read_text() == "A dog runs.\n"


def test_translate_output_is_written_atomically(run_dir, tmp_path, monkeypatch):
    output = tmp_path / "out.txt"
    output.write_text("the last translation\n")
    monkeypatch.setattr(Path, "write_text", full_disk(Path.write_text))
    argv = ["translate", "--output-dir", str(run_dir), "--strategy", "greedy"]
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main([*argv, "--output", str(output), "A dog."])
    monkeypatch.undo()
    assert str(info.value.code) == (
        "error: --output cannot be written: No space left on device; a file "
        f"that was there is unchanged. Received: --output {str(output)!r}"
    )
    assert output.read_text() == "the last translation\n"
    assert leftovers(tmp_path) == []


def test_translate_output_through_a_dangling_link(run_dir, tmp_path):
    # The whole command on a real (untrained) model: the translation lands
    # at the link's target, the link stays, nothing else is written.
    (tmp_path / "out.txt").symlink_to("translations.txt")
    argv = ["translate", "--output-dir", str(run_dir), "--strategy", "greedy"]
    translate_multi30k.main([*argv, "--output", str(tmp_path / "out.txt"), "A dog."])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "out.txt",
        "translations.txt",
    ]
    assert os.readlink(tmp_path / "out.txt") == "translations.txt"
    lines = (tmp_path / "translations.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and lines[0].strip()


# --- Clear messages ---------------------------------------------------------


@pytest.mark.parametrize("command", ["translate", "save-preset", "evaluate"])
@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "config.json is not a readable run configuration (Expecting"),
        ("[1, 2]", "config.json must hold a JSON object of settings. Received: list"),
        ('{"epochs": 1, "dropout": 2}', "config.json holds an invalid setting"),
    ],
)
def test_a_corrupt_run_config_is_named(run_dir, tmp_path, command, content, message):
    import shutil

    broken = tmp_path / "run"
    shutil.copytree(run_dir, broken)
    (broken / "config.json").write_text(content)
    argv = {
        "translate": ["translate", "A dog."],
        "save-preset": ["save-preset", "--preset-dir", str(tmp_path / "preset")],
        "evaluate": ["evaluate"],
    }[command]
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main([*argv, "--output-dir", str(broken)])
    assert str(info.value.code).startswith(f"error: {broken / 'config.json'}")
    assert message in str(info.value.code)
    assert not (tmp_path / "preset").exists()


@pytest.mark.parametrize("command", ["train", "evaluate", "translate", "save-preset"])
def test_an_output_dir_that_is_a_file_is_named(tmp_path, command):
    not_a_directory = tmp_path / "notes.txt"
    not_a_directory.write_text("keep me\n")
    argv = {
        "train": ["train", "--setting", "tiny"],
        "evaluate": ["evaluate"],
        "translate": ["translate", "A dog."],
        "save-preset": ["save-preset", "--preset-dir", str(tmp_path / "p")],
    }[command]
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main([*argv, "--output-dir", str(not_a_directory)])
    assert str(info.value.code) == (
        "error: --output-dir must be a directory (the run directory). "
        f"Received: --output-dir {str(not_a_directory)!r}, which is a file"
    )
    assert not_a_directory.read_text() == "keep me\n"


# --- The model-zoo recipes --------------------------------------------------


@dataclasses.dataclass
class _Setting:
    seed: int = 0


def _zoo_arguments(output_dir):
    import argparse

    return argparse.Namespace(
        quick=True,
        seed=0,
        epochs=None,
        time_budget_minutes=None,
        steps_per_execution=None,
        output_dir=output_dir,
    )


def test_zoo_recipes_lock_their_run_directory(tmp_path):
    from keras_attn_recipes.zoo_common import resolve_config

    settings = {"quick": _Setting(), "default": _Setting()}
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(SystemExit) as info:
            resolve_config(settings, _zoo_arguments(tmp_path))
        assert str(info.value.code).startswith("error: The run directory")
        assert f"pid {holder.pid}" in str(info.value.code)
    finally:
        kill(holder)
    not_a_directory = tmp_path / "summary.txt"
    not_a_directory.write_text("")
    with pytest.raises(SystemExit, match="--output-dir must be a directory"):
        resolve_config(settings, _zoo_arguments(not_a_directory))


def test_save_zoo_preset_refuses_a_preset_dir_in_the_run(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "save_zoo_preset", ROOT / "recipes" / "save_zoo_preset.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = tmp_path / "run"
    run.mkdir()
    argv = ["vit", "--run-dir", str(run), "--preset-dir", str(run / "preset")]
    with pytest.raises(SystemExit) as info:
        module.main(argv)
    assert info.value.code == 2
    assert "--preset-dir must be a directory apart from --run-dir" in (
        capsys.readouterr().err
    )
    assert list(run.iterdir()) == []
