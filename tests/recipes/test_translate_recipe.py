"""The Multi30k recipe end to end on its `tiny` setting, as a user runs it."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_attn_recipes import translate_multi30k

# Backend-independent recipe code: shared out when backends run side by
# side (tests/conftest.py), to torch, whose eager steps need no compilation
# per batch shape: this file took 0.8 times JAX's CPU time (cold
# compilation cache) on one thread per recipe process (ENV).
pytestmark = pytest.mark.split_backend("torch")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "translate_multi30k.py"


# One intra-op thread per recipe process, as in the test process
# (tests/conftest.py): torch's thread pool, sized by OMP_NUM_THREADS, waits
# for all of its threads at every op, which on busy cores costs more than
# it gains on the tiny setting's tensors.
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1")


def run_recipe(*args, stdin=None):
    result = subprocess.run(
        [sys.executable, str(RECIPE), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def epochs_logged(output_dir):
    with open(output_dir / "history.csv", newline="") as file:
        return [int(row["epoch"]) for row in csv.DictReader(file)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("multi30k_tiny")
    backend = os.environ.get("KERAS_BACKEND", "jax")
    common = ["--backend", backend, "--output-dir", str(output_dir)]
    first = run_recipe("train", *common, "--setting", "tiny", "--set", "epochs=1")
    # Restarting with a longer run resumes after the last completed epoch;
    # counted in updates, the second epoch stops after 35 in all.
    resumed = run_recipe(
        "train", *common, "--setting", "tiny", "--set", "train_steps=35"
    )
    output_dir.joinpath("train_stderr.txt").write_text(first.stderr + resumed.stderr)
    return output_dir, common


@pytest.mark.slow
def test_training_stops_at_the_update_count_and_logs_each_update(trained):
    output_dir, _ = trained
    with open(output_dir / "history.csv", newline="") as file:
        updates = [int(row["updates"]) for row in csv.DictReader(file)]
    batches_per_epoch = updates[0]
    assert batches_per_epoch < 35 <= 2 * batches_per_epoch  # 2 epochs, 1 cut.
    assert updates == [batches_per_epoch, 35]
    summary = json.loads((output_dir / "training.json").read_text())
    assert summary["updates"] == 35
    # Its minutes are the resumed process's: the record says where it began.
    assert summary["resumed_after_updates"] == batches_per_epoch
    with open(output_dir / "updates.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(row["update"]) for row in rows] == [25]  # Every 25 updates.
    assert float(rows[0]["learning_rate"]) > 0 and float(rows[0]["loss"]) > 0


@pytest.mark.slow
def test_training_logs_no_python_warning_but_truncation(trained):
    # E.g. Keras's "`shuffle=True` was passed, but will be ignored" for a
    # tf.data dataset, which this recipe shuffles itself. The one expected:
    # the tiny setting's 300-piece vocabulary makes some pairs longer than
    # its max_length, and truncation is never silent.
    output_dir, _ = trained
    stderr = (output_dir / "train_stderr.txt").read_text()
    warned = [line for line in stderr.splitlines() if "Warning:" in line]
    assert any("truncated to max_length=64" in line for line in warned), stderr
    unexpected = [line for line in warned if "truncated to max_length" not in line]
    assert not unexpected, unexpected


@pytest.mark.slow
def test_train_writes_model_checkpoints_and_resumes(trained):
    output_dir, _ = trained
    assert (output_dir / "model.keras").exists()
    assert (output_dir / "tokenizer" / "tokenizer.model").exists()
    assert sorted(p.name for p in (output_dir / "checkpoints").iterdir()) == [
        "epoch_001.keras",
        "epoch_002.keras",
    ]
    # Epoch 0 from the first run, epoch 1 from the resumed one: no restart at 0.
    assert epochs_logged(output_dir) == [0, 1]
    assert (output_dir / "learning_curves.png").stat().st_size > 0
    assert any((output_dir / "logs").rglob("*tfevents*"))


@pytest.mark.slow
def test_evaluate_reports_sacrebleu_and_plots_attention(trained):
    output_dir, common = trained
    result = run_recipe("evaluate", *common, "--strategy", "greedy")
    assert "BLEU" in result.stdout and "chrF" in result.stdout
    report = json.loads((output_dir / "test_2016_flickr.greedy.bleu.json").read_text())
    assert 0.0 <= report["bleu"] <= 100.0
    assert "case:mixed" in report["bleu_signature"]
    translations = (output_dir / "test_2016_flickr.greedy.de").read_text().splitlines()
    assert len(translations) == 16  # the tiny setting's evaluation_pairs
    assert (output_dir / "cross_attention.png").stat().st_size > 0


@pytest.mark.slow
def test_evaluate_averages_the_last_checkpoints(trained):
    output_dir, common = trained
    # In this process (the command line's own run is the test above): the
    # averaging is what this test is about, not a child's imports.
    translate_multi30k.main(
        ["evaluate", *common, "--strategy", "greedy", "--average-last", "2"]
    )
    report = json.loads(
        (output_dir / "test_2016_flickr.greedy.avg2.bleu.json").read_text()
    )
    assert 0.0 <= report["bleu"] <= 100.0
    # Asking for more checkpoints than were written names both numbers: the
    # command line's one way out, `sys.exit("error: ...")` (exit status 1,
    # the message on standard error, no traceback), checked in this process
    # (a child process would spend its time importing Keras and TensorFlow
    # to print one line).
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["evaluate", *common, "--average-last", "3"])
    message = info.value.code
    assert isinstance(message, str)
    assert message.startswith("error: --average-last 3 averages the last 3")
    assert "holds 2" in message


@pytest.mark.slow
def test_a_short_run_averages_the_checkpoints_it_wrote(trained, capsys):
    # A setting that averages more epochs than a short run wrote (quick with
    # `--set train_steps=40`) averages those there are, and says so.
    from keras_attn_recipes.translation_steps import load_translator

    output_dir, _ = trained
    config_path = output_dir / "config.json"
    saved = config_path.read_text()
    config_path.write_text(json.dumps(dict(json.loads(saved), average_checkpoints=5)))
    try:
        translator, config = load_translator(output_dir, "greedy")
    finally:
        config_path.write_text(saved)
    assert config.average_checkpoints == 5
    assert "this run wrote 2: averaging those" in capsys.readouterr().out
    assert len(translator.translate(["A dog runs."])) == 1  # the tiny model may say ""


@pytest.mark.slow
def test_translate_reads_stdin_and_keeps_empty_lines(trained):
    _, common = trained
    lines = ["A dog runs.", "", "Two men are talking on a street."]
    result = run_recipe(
        "translate", *common, "--strategy", "greedy", stdin="\n".join(lines) + "\n"
    )
    outputs = result.stdout.split("\n")[:-1]
    assert len(outputs) == len(lines)
    assert outputs[1] == ""


def test_unknown_setting_is_rejected_by_name(tmp_path):
    # In this process: `main` exits with the message (status 1, no
    # traceback), as the command line does, without a child's imports.
    argv = ["train", "--output-dir", str(tmp_path), "--setting", "tiny"]
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main([*argv, "--set", "no_such_field=3"])
    assert info.value.code not in (0, None)
    assert "no_such_field" in str(info.value.code)
