"""A run's per-epoch records agree with its backup; averaging refuses a gap.

`repair_epoch_records` (before a resumed `train`) and the consumers that
average a run's last epochs (`evaluate --average-last`, `save-preset`,
through `load_translator`), without a training run.
"""

import csv
import json
import shutil

import pytest
from untrained_runs import write_untrained_run

from keras_attn_recipes import translate_multi30k
from keras_attn_recipes.cli_io import RunDirectoryError
from keras_attn_recipes.epoch_records import repair_epoch_records
from keras_attn_recipes.translation_steps import load_translator

# The recipe's file handling, the same on every backend: when the backends
# run side by side, one runs this file (tests/conftest.py): torch, whose
# suite finishes first.
pytestmark = pytest.mark.split_backend("torch")

HISTORY_FIELDS = ["epoch", "loss", "updates"]
UPDATES_FIELDS = ["update", "epoch", "loss", "learning_rate", "minutes"]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def read_column(path, column):
    with open(path, newline="") as file:
        return [int(row[column]) for row in csv.DictReader(file)]


def write_records(directory, history_epochs, logged_updates, checkpoint_epochs):
    """`history.csv`, `updates.csv` and placeholder checkpoints, as `train`
    leaves them (10 updates per epoch)."""
    write_csv(
        directory / "history.csv",
        HISTORY_FIELDS,
        [[e, 1.0, 10 * (e + 1)] for e in history_epochs],
    )
    write_csv(
        directory / "updates.csv",
        UPDATES_FIELDS,
        [[u, (u - 1) // 10, 1.0, 0.1, 0.0] for u in logged_updates],
    )
    (directory / "checkpoints").mkdir()
    for epoch in checkpoint_epochs:
        (directory / "checkpoints" / f"epoch_{epoch:03d}.keras").write_bytes(b"x")


def checkpoints(directory):
    return sorted(p.name for p in (directory / "checkpoints").iterdir())


def test_records_of_epochs_the_backup_does_not_count_are_removed(tmp_path, capsys):
    # Killed after epoch 2 (counted from 0) wrote its checkpoint and row,
    # before the backup counted it; a row cut short by the kill too.
    write_records(tmp_path, [0, 1, 2], [5, 10, 15, 20, 25], [1, 2, 3])
    with open(tmp_path / "history.csv", "a") as file:
        file.write("3,0.9")
    assert repair_epoch_records(tmp_path, 2, 20) is False
    assert read_column(tmp_path / "history.csv", "epoch") == [0, 1]
    assert read_column(tmp_path / "history.csv", "updates") == [10, 20]
    assert read_column(tmp_path / "updates.csv", "update") == [5, 10, 15, 20]
    assert checkpoints(tmp_path) == ["epoch_001.keras", "epoch_002.keras"]
    out = capsys.readouterr()
    assert "counts 2 finished epoch(s)" in out.out
    assert "2 row(s) of history.csv, 1 of updates.csv" in out.out
    assert "checkpoints ['epoch_003.keras']" in out.out
    assert out.err == ""
    # Nothing more to remove: nothing changes, nothing is said.
    assert repair_epoch_records(tmp_path, 2, 20) is False
    assert capsys.readouterr().out == ""


def test_no_finished_epoch_leaves_no_records(tmp_path):
    write_records(tmp_path, [0], [5, 10], [1])
    assert repair_epoch_records(tmp_path, 0, 0) is False
    # Removed whole: their writers start them again with their headers.
    assert not (tmp_path / "history.csv").exists()
    assert not (tmp_path / "updates.csv").exists()
    assert checkpoints(tmp_path) == []


def test_a_missing_checkpoint_of_the_last_counted_epoch_is_to_be_rewritten(tmp_path):
    # The backup was written first (before this order) and the kill came
    # before the checkpoint and the row of epoch 2.
    write_records(tmp_path, [0], [5, 10], [1])
    assert repair_epoch_records(tmp_path, 2, 20) is True


def test_an_older_gap_is_reported_naming_the_epoch(tmp_path, capsys):
    write_records(tmp_path, [0, 2], [5, 10, 15, 20, 25, 30], [1, 3])
    assert repair_epoch_records(tmp_path, 3, 30) is False
    err = capsys.readouterr().err
    assert "checkpoints ['epoch_002.keras']" in err
    assert "history.csv rows of epochs [1]" in err
    assert "refuse to average across a missing checkpoint" in err


@pytest.fixture(scope="module")
def three_epoch_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run") / "run"
    directory.mkdir()
    write_untrained_run(directory, epochs=3)
    return directory


@pytest.fixture
def run_dir(three_epoch_run, tmp_path):
    directory = tmp_path / "run"
    shutil.copytree(three_epoch_run, directory)
    return directory


@pytest.mark.parametrize("average_last", [2, 3])
def test_averaging_refuses_a_run_with_a_missing_epoch(run_dir, average_last):
    (run_dir / "checkpoints" / "epoch_002.keras").unlink()
    with pytest.raises(RunDirectoryError) as info:
        load_translator(run_dir, "greedy", average_last=average_last)
    message = str(info.value)
    assert "The checkpoint of epoch 2 is missing" in message
    assert f"count={average_last}, last_epoch=3" in message


def test_averaging_refuses_a_missing_last_epoch_the_backup_counts(run_dir):
    # `train` keeps its backup: the run trained 4 epochs, the 4th has no
    # checkpoint; "the last 2 files" would be epochs 2 and 3.
    backup = run_dir / "backup"
    backup.mkdir()
    (backup / "epoch_00004.weights.h5").write_bytes(b"")
    (backup / "training_metadata.json").write_text(
        json.dumps({"epoch": 4, "weights": "epoch_00004.weights.h5"})
    )
    with pytest.raises(RunDirectoryError, match="checkpoint of epoch 4 is missing"):
        load_translator(run_dir, "greedy", average_last=2)


def test_save_preset_refuses_a_gap_and_writes_nothing(run_dir, tmp_path, capsys):
    (run_dir / "checkpoints" / "epoch_002.keras").unlink()
    preset_dir = tmp_path / "preset"
    arguments = ["save-preset", "--output-dir", str(run_dir)]
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            [*arguments, "--preset-dir", str(preset_dir), "--average-last", "2"]
        )
    # Epochs 2 and 3: "the last 2 files" would be epochs 1 and 3.
    assert "error: The checkpoint of epoch 2 is missing" in str(info.value.code)
    assert not preset_dir.exists()


def test_averaging_the_epochs_after_a_gap_works(run_dir, capsys):
    (run_dir / "checkpoints" / "epoch_001.keras").unlink()
    load_translator(run_dir, "greedy", average_last=2)
    assert "['epoch_002.keras', 'epoch_003.keras']" in capsys.readouterr().out
