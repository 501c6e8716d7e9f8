"""Invalid command lines fail before anything trains, naming what is wrong."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))

import translate_multi30k  # noqa: E402


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--backend", "torch"], "invalid choice: 'torch'"),
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
        ("label_smoothing=1.0", "`label_smoothing` must be a number in [0.0, 1.0)"),
        ("dropout=-0.1", "Received: dropout=-0.1"),
        ("learning_rate_scale=0", "`learning_rate_scale` must be a positive number"),
        ("time_budget_minutes=-5", "Received: time_budget_minutes=-5"),
    ],
)
def test_invalid_settings_are_rejected_by_name(override, message):
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["train", "--setting", "tiny", "--set", override])
    assert message in str(info.value.code)


def test_translate_without_a_trained_model_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"No trained model at {tmp_path}"):
        translate_multi30k.main(["translate", "--output-dir", str(tmp_path), "A dog."])
