"""Invalid command lines fail before anything trains, naming what is wrong."""

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
    with pytest.raises(FileNotFoundError, match=f"No trained model at {tmp_path}"):
        translate_multi30k.main(["translate", "--output-dir", str(tmp_path), "A dog."])


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
