"""Hostile command lines: each fails before any work, names what is wrong,
and leaves the run directory exactly as it was (issue: robustness round 2)."""

import dataclasses
import io
import json

import pytest

from keras_attn_recipes import translate_multi30k
from keras_attn_recipes.cli_io import split_lines
from keras_attn_recipes.translation_config import SETTINGS, check_resumable


def snapshot(directory):
    """Every file below `directory` with its bytes (empty if it is absent)."""
    if not directory.exists():
        return None
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def run_dir(tmp_path):
    """A run directory as `train` leaves it: settings plus a stand-in file."""
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps(dataclasses.asdict(SETTINGS["tiny"]), indent=2)
    )
    (directory / "backup").mkdir()
    (directory / "backup" / "backup.json").write_text('{"epoch": 1}')
    return directory


class NoStdin(io.StringIO):
    """Standard input that is an open pipe: reading it would wait forever."""

    def isatty(self):
        return False

    def read(self, *args):
        raise AssertionError("standard input was read")


@pytest.mark.parametrize(
    "override, message",
    [
        ("time_budget_minutes=Infinity", "Received: time_budget_minutes=inf"),
        ("learning_rate_scale=Infinity", "Received: learning_rate_scale=inf"),
        ("label_smoothing=NaN", "Received: label_smoothing=nan"),
        ("length_penalty_alpha=Infinity", "Received: length_penalty_alpha=inf"),
        (
            "seed=-1",
            "`seed` must be an integer in [0, 4294967295]. Received: seed=-1",
        ),
        ("seed=4294967296", "Received: seed=4294967296"),
        ("seed=true", "Received: seed=True"),
        ('preset="transformer_huge"', "Received: preset='transformer_huge'"),
        ('dropout={"rate": 0.1}', "Received: dropout={'rate': 0.1}"),
        ("vocabulary_size=[8000]", "Received: vocabulary_size=[8000]"),
        ('normalize_first="no"', "Received: normalize_first='no'"),
        ("beam_size=2.0", "Received: beam_size=2.0"),
    ],
)
def test_hostile_settings_fail_before_anything_is_written(tmp_path, override, message):
    output_dir = tmp_path / "never_created"
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            [
                "train",
                "--setting",
                "tiny",
                "--output-dir",
                str(output_dir),
                "--set",
                override,
            ]
        )
    assert message in str(info.value.code)
    assert not output_dir.exists()


@pytest.mark.parametrize(
    "override, named",
    [
        ("hidden_dim=64", "hidden_dim: None in config.json, 64 requested"),
        ("vocabulary_size=200", "vocabulary_size: 300 in config.json, 200"),
        ("seed=3", "seed: 0 in config.json, 3 requested"),
    ],
)
def test_resuming_with_other_model_settings_is_refused_unchanged(
    run_dir, override, named
):
    before = snapshot(run_dir)
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            [
                "train",
                "--setting",
                "tiny",
                "--output-dir",
                str(run_dir),
                "--set",
                override,
            ]
        )
    assert named in str(info.value.code)
    assert snapshot(run_dir) == before


def test_resuming_may_change_the_training_but_not_the_model(run_dir):
    longer = SETTINGS["tiny"].replace(
        train_steps=500, beam_size=5, learning_rate_scale=0.5, warmup_steps=10
    )
    check_resumable(longer, run_dir)  # no error: same model, other training
    check_resumable(SETTINGS["full"], run_dir.parent / "fresh")  # no config yet
    with pytest.raises(ValueError, match="Differing: .*preset"):
        check_resumable(SETTINGS["full"], run_dir)


def test_an_unreadable_stored_config_is_named(run_dir):
    (run_dir / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not a readable run"):
        check_resumable(SETTINGS["tiny"], run_dir)


def write_bytes(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda d: ["--input", str(d)], "--input must be a file"),
        (lambda d: ["--input", str(d / "absent.txt")], "--input: no such file"),
        (
            lambda d: [
                "--input",
                str(write_bytes(d / "bad.txt", b"A dog.\n\xff\xfe\n")),
            ],
            "bad.txt: line 2 is not valid UTF-8",
        ),
        (lambda d: ["A dog.", "--output", str(d)], "--output must be a file path"),
        (
            lambda d: ["A dog.", "--output", str(d / "missing" / "out.txt")],
            "--output cannot be written: No such file or directory",
        ),
    ],
)
def test_translate_checks_its_files_before_loading_a_model(
    run_dir, monkeypatch, make_args, message
):
    monkeypatch.setattr("sys.stdin", NoStdin())
    before = snapshot(run_dir)
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            ["translate", "--output-dir", str(run_dir), *make_args(run_dir.parent)]
        )
    assert message in str(info.value.code)
    assert snapshot(run_dir) == before


def test_an_empty_input_file_does_not_wait_on_standard_input(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", NoStdin())
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    # Past the input checks, the missing run is what stops it; stdin is
    # never read (NoStdin would fail the test).
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            ["translate", "--output-dir", str(tmp_path / "run"), "--input", str(empty)]
        )
    assert "there is no trained run to translate" in str(info.value.code)


def test_a_checked_output_file_is_not_left_behind(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", NoStdin())
    output = tmp_path / "out.txt"
    with pytest.raises(SystemExit, match="no trained run"):
        translate_multi30k.main(
            [
                "translate",
                "--output-dir",
                str(tmp_path / "run"),
                "A dog.",
                "--output",
                str(output),
            ]
        )
    assert list(tmp_path.iterdir()) == []  # neither the output nor a probe


def test_lines_split_on_newline_only():
    text = "A dog\fruns.\r\nTwo\u2028men.\n\nA cat.\n"
    assert split_lines(text) == ["A dog\fruns.", "Two\u2028men.", "", "A cat."]
    assert split_lines("") == []
    assert split_lines("no newline") == ["no newline"]
