"""Invalid command lines fail before anything trains, naming what is wrong."""

import os
import subprocess
import sys

import pytest

from keras_attn_recipes import translate_multi30k


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--backend", "mxnet"], "invalid choice: 'mxnet'"),
        (["train", "--setting", "huge"], "invalid choice: 'huge'"),
        (
            ["train", "--set", "epochs"],
            "--set expects key=value. Received: --set 'epochs'",
        ),
        (["evaluate", "--strategy", "top_k"], "invalid choice: 'top_k'"),
        (["train", "--distribute", "pipeline"], "invalid choice: 'pipeline'"),
        (["export"], "the following arguments are required: --output"),
        (["serve"], "invalid choice: 'serve'"),
        (
            ["evaluate", "--average-last", "0"],
            "expected a positive integer. Received: '0'",
        ),
    ],
)
def test_usage_errors_exit_2_and_name_the_argument(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        translate_multi30k.parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, message",
    [
        ("epochs=0", "`epochs` must be a positive integer. Received: epochs=0"),
        ("epochs=2.5", "Received: epochs=2.5"),
        ('vocabulary_size="big"', "Received: vocabulary_size='big'"),
        (
            "label_smoothing=1.0",
            "`label_smoothing` must be a float in [0, 1). "
            "Received: label_smoothing=1.0",
        ),
        ("dropout=-0.1", "Received: dropout=-0.1"),
        (
            "attention_dropout=1.0",
            "`attention_dropout` must be a float in [0, 1). "
            "Received: attention_dropout=1.0",
        ),
        (
            "learning_rate_scale=0",
            "`learning_rate_scale` must be a finite number > 0.0",
        ),
        ("time_budget_minutes=-5", "Received: time_budget_minutes=-5"),
        ("train_steps=0", "`train_steps` must be a positive integer"),
        ("average_checkpoints=0", "Received: average_checkpoints=0"),
        ("subword_nbest_size=0", "Received: subword_nbest_size=0"),
        ("subword_alpha=-1", "Received: subword_alpha=-1"),
        ("r_drop_alpha=-1", "Received: r_drop_alpha=-1"),
        (
            "bucket_lengths=[8,8]",
            "`bucket_lengths` must be an increasing list of integers >= 2. "
            "Received: bucket_lengths=[8, 8]",
        ),
        ("bucket_lengths=8", "Received: bucket_lengths=8"),
    ],
)
def test_invalid_settings_are_rejected_by_name(override, message):
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["train", "--setting", "tiny", "--set", override])
    assert message in str(info.value.code)


@pytest.mark.parametrize("command", ["train", "all"])
def test_distribute_on_torch_is_refused_before_training(command, monkeypatch):
    # Checked on the environment alone: this runs on every backend.
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main([command, "--setting", "tiny", "--distribute", "data"])
    assert "--distribute data needs KERAS_BACKEND=jax or tensorflow" in str(
        info.value.code
    )


def test_translate_without_a_trained_model_names_the_path(tmp_path):
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["translate", "--output-dir", str(tmp_path), "A dog."])
    assert str(info.value.code).startswith(f"error: No trained model at {tmp_path}")


def test_a_setting_names_one_training_length():
    from keras_attn_recipes.translation_config import SETTINGS, TranslationConfig

    # Either unit overrides a setting's length in the other unit.
    assert SETTINGS["full"].replace(epochs=3).train_steps is None
    assert SETTINGS["tiny"].replace(train_steps=7).epochs is None
    with pytest.raises(ValueError, match="exactly one of `train_steps` and `epochs`"):
        TranslationConfig(train_steps=10, epochs=2)
    with pytest.raises(ValueError, match="Received: train_steps=None, epochs=None"):
        TranslationConfig()


def test_fit_epochs_counts_the_updates_a_backup_still_lacks():
    from keras_attn_recipes.update_budget import fit_epochs

    assert fit_epochs(100, 30, 0, 0) == 4  # 30 + 30 + 30 + 10
    assert fit_epochs(100, 30, 2, 60) == 4  # resumed after two epochs
    assert fit_epochs(100, 30, 4, 100) == 4  # done: no further epoch
    # A run cut short at 35 updates, restarted for 70: 35 more updates.
    assert fit_epochs(70, 30, 2, 35) == 4


# --- Expected failures: one `error:` line, exit 1, no traceback (issue 49) ---


def error_line(argv):
    """The `error: ...` line `main(argv)` exits with. A `SystemExit` whose code
    is a string prints it to stderr and exits with status 1, no traceback."""
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(argv)
    message = info.value.code
    assert isinstance(message, str) and message.startswith("error: "), message
    assert "\n" not in message
    return message


@pytest.fixture
def places(tmp_path):
    """Folders and files the failure table points the command line at."""
    untrained = tmp_path / "untrained"
    untrained.mkdir()
    # `train` writes config.json first and model.keras last; epochs between.
    training = tmp_path / "training"
    (training / "checkpoints").mkdir(parents=True)
    (training / "config.json").write_text("{}")
    (training / "checkpoints" / "epoch_001.keras").write_bytes(b"stand-in")
    # A finished run as far as the checks before loading look (never loaded).
    trained = tmp_path / "trained"
    (trained / "checkpoints").mkdir(parents=True)
    (trained / "model.keras").write_bytes(b"stand-in")
    (trained / "checkpoints" / "epoch_001.keras").write_bytes(b"stand-in")
    empty_data = tmp_path / "empty_data"
    empty_data.mkdir()
    (empty_data / "test.en").write_text("")
    (empty_data / "test.de").write_text("")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me\n")
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    return {
        "untrained": untrained,
        "training": training,
        "trained": trained,
        "missing": tmp_path / "missing",
        "empty_data": empty_data,
        "a_file": a_file,
        "read_only": read_only,
        "tmp": tmp_path,
    }


FAILURES = {
    # An untrained run, for every command that reads one.
    "evaluate_untrained": (
        lambda p: ["evaluate", "--output-dir", str(p["untrained"])],
        lambda p: (
            f"error: No trained model at {p['untrained'] / 'model.keras'}: "
            "run the `train` subcommand with this --output-dir first."
        ),
    ),
    "translate_untrained": (
        lambda p: ["translate", "--output-dir", str(p["untrained"]), "A dog."],
        lambda p: f"error: No trained model at {p['untrained'] / 'model.keras'}",
    ),
    "export_untrained": (
        lambda p: (
            ["export", "--output-dir", str(p["untrained"])]
            + ["--output", str(p["tmp"] / "saved_model")]
        ),
        lambda p: f"error: No trained model at {p['untrained'] / 'model.keras'}",
    ),
    "save_preset_untrained": (
        lambda p: (
            ["save-preset", "--output-dir", str(p["untrained"])]
            + ["--preset-dir", str(p["tmp"] / "preset")]
        ),
        lambda p: f"error: No trained model at {p['untrained'] / 'model.keras'}",
    ),
    "translate_still_training": (
        lambda p: ["translate", "--output-dir", str(p["training"]), "A dog."],
        lambda p: (
            f"error: No trained model at {p['training'] / 'model.keras'}: "
            "the run has not finished training (1 epoch checkpoint(s) so far;"
        ),
    ),
    "evaluate_missing_run": (
        lambda p: ["evaluate", "--output-dir", str(p["missing"])],
        lambda p: f"error: --output-dir {str(p['missing'])!r} does not exist",
    ),
    "average_last_beyond_the_checkpoints": (
        lambda p: (
            ["evaluate", "--output-dir", str(p["trained"])] + ["--average-last", "3"]
        ),
        lambda p: (
            "error: --average-last 3 averages the last 3 epoch checkpoints, "
            f"but {p['trained'] / 'checkpoints'} holds 1. Received: --average-last 3"
        ),
    ),
    "bad_split": (
        lambda p: ["evaluate", "--output-dir", str(p["trained"]), "--split", "nope"],
        lambda p: "error: --split 'nope': No 'en' file for split 'nope'",
    ),
    "bad_split_before_training": (
        lambda p: (
            ["all", "--setting", "tiny", "--split", "tset"]
            + ["--output-dir", str(p["missing"])]
        ),
        lambda p: "Splits in the vendored Multi30k: test_2016_flickr, train, val.",
    ),
    "empty_split": (
        lambda p: (
            ["evaluate", "--output-dir", str(p["trained"]), "--split", "test"]
            + ["--data-dir", str(p["empty_data"])]
        ),
        lambda p: (
            "error: --split 'test' holds no sentence pairs in --data-dir "
            f"{str(p['empty_data'])!r}: its files are empty."
        ),
    ),
    "export_onto_a_file": (
        lambda p: (
            ["export", "--output-dir", str(p["trained"])]
            + ["--output", str(p["a_file"])]
        ),
        lambda p: (
            "error: --output must be a folder path (it is written as a "
            f"folder). Received: --output {str(p['a_file'])!r}, which is a file"
        ),
    ),
    "translate_into_a_read_only_folder": (
        lambda p: (
            ["translate", "--output-dir", str(p["trained"]), "A dog."]
            + ["--output", str(p["read_only"] / "out.txt")]
        ),
        lambda p: (
            "error: --output cannot be written: Read-only file system "
            f"({p['read_only']}). Received: --output "
            f"{str(p['read_only'] / 'out.txt')!r}"
        ),
    ),
    "export_into_a_read_only_folder": (
        lambda p: (
            ["export", "--output-dir", str(p["trained"])]
            + ["--output", str(p["read_only"] / "saved_model")]
        ),
        lambda p: "error: --output cannot be written: Read-only file system",
    ),
    "save_preset_into_a_read_only_folder": (
        lambda p: (
            ["save-preset", "--output-dir", str(p["trained"])]
            + ["--preset-dir", str(p["read_only"] / "preset")]
        ),
        lambda p: "error: --preset-dir cannot be written: Read-only file system",
    ),
}


@pytest.fixture
def read_only_folder(places, monkeypatch):
    """`places["read_only"]` refuses new entries as a read-only mount does
    (EROFS; permission bits would not stop a test run as root)."""
    import errno
    import os
    from pathlib import Path

    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and Path(path).parent == places["read_only"]:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


@pytest.mark.split_backend("torch")
@pytest.mark.parametrize("case", sorted(FAILURES))
def test_expected_failures_are_one_error_line(places, read_only_folder, case):
    make_argv, expected = FAILURES[case]
    before = sorted(p.relative_to(places["tmp"]) for p in places["tmp"].rglob("*"))
    message = error_line(make_argv(places))
    assert expected(places) in message
    # Refused before any work: nothing was created or changed.
    after = sorted(p.relative_to(places["tmp"]) for p in places["tmp"].rglob("*"))
    assert after == before
    assert places["a_file"].read_text() == "keep me\n"


@pytest.mark.split_backend("torch")
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_output_device_is_an_error_line(places, monkeypatch):
    from keras_attn_recipes import translation_steps

    # The translation itself is not what this checks: a stand-in.
    monkeypatch.setattr(translation_steps, "translate", lambda *args: ["Ein Hund."])
    argv = ["translate", "--output-dir", str(places["trained"]), "A dog."]
    assert error_line([*argv, "--output", "/dev/full"]) == (
        "error: --output cannot be written: No space left on device. "
        "Received: --output '/dev/full'"
    )


@pytest.mark.split_backend("torch")
@pytest.mark.parametrize("case", ["translate_untrained", "export_onto_a_file"])
def test_the_console_script_exits_1_without_a_traceback(places, case):
    make_argv, expected = FAILURES[case]
    result = subprocess.run(
        [sys.executable, "-m", "keras_attn_recipes.translate_multi30k"]
        + make_argv(places),
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=300,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(expected(places))


def test_an_unexpected_exception_keeps_its_traceback(monkeypatch, tmp_path):
    def bug(args, argv):
        raise KeyError("a bug, not an expected failure")

    monkeypatch.setattr(translate_multi30k, "_run", bug)
    with pytest.raises(KeyError, match="a bug"):
        translate_multi30k.main(["translate", "--output-dir", str(tmp_path), "A."])
