"""`TranslationConfig` is checked by `keras_attn.validation`, field by field,
and the command line still loads no Keras before `--backend` is read."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_attn import validation
from keras_attn_recipes import translation_config
from keras_attn_recipes.translation_config import SETTINGS, TranslationConfig


def test_every_field_has_one_check():
    fields = [field.name for field in dataclasses.fields(TranslationConfig)]
    assert list(translation_config._field_checks()) == fields


@pytest.mark.parametrize(
    "field, value, error, message",
    [
        ("num_heads", "2", TypeError, "`num_heads` must be a positive integer"),
        ("num_heads", 0, ValueError, "`num_heads` must be a positive integer"),
        ("normalize_first", 1, TypeError, "`normalize_first` must be True or False"),
        ("dropout", 1.5, ValueError, "`dropout` must be a float in [0, 1)"),
        ("dropout", "0.1", TypeError, "`dropout` must be a float in [0, 1)"),
        ("seed", 2**32, ValueError, "`seed` must be an integer in [0, 4294967295]"),
        ("length_penalty_alpha", 11, ValueError, "in [0.0, 10.0]"),
        ("learning_rate_decay", "linear", ValueError, "must be one of"),
        ("bucket_lengths", [1, 8], ValueError, "increasing list of integers >= 2"),
        ("bucket_lengths", [8, 2.5], TypeError, "sequence of positive integers"),
        ("preset", 7, TypeError, "`preset` must be a string"),
    ],
)
def test_a_bad_field_names_itself_the_value_and_what_was_expected(
    field, value, error, message
):
    with pytest.raises(error) as info:
        TranslationConfig(epochs=1, **{field: value})
    assert message in str(info.value)
    assert f"Received: {field}=" in str(info.value)


def test_the_errors_are_the_validation_modules():
    # The same value, the same exception and message as the library's check.
    with pytest.raises(TypeError) as ours:
        TranslationConfig(epochs=1, beam_size=True)
    with pytest.raises(TypeError) as library:
        validation.check_positive_int(True, "beam_size")
    assert str(ours.value) == str(library.value)


def test_values_are_stored_in_their_canonical_type():
    config = TranslationConfig(
        epochs=np.int64(2), dropout=0, bucket_lengths=(8, 16), seed=np.uint32(3)
    )
    assert type(config.epochs) is int and type(config.seed) is int
    assert type(config.dropout) is float
    assert config.bucket_lengths == [8, 16]
    json.dumps(dataclasses.asdict(config))  # a run directory's config.json


def test_named_settings_are_configs_made_once():
    assert sorted(SETTINGS) == ["full", "quick", "tiny"]
    assert SETTINGS["tiny"] is SETTINGS["tiny"]
    assert all(isinstance(config, TranslationConfig) for config in SETTINGS.values())
    with pytest.raises(KeyError):
        SETTINGS["huge"]


def test_importing_the_command_line_loads_no_keras():
    # `--backend` must reach Keras before Keras loads; the settings' names
    # (for `--setting`) are read without making a config.
    program = (
        "import sys\n"
        "from keras_attn_recipes import translate_multi30k\n"
        "assert sorted(translate_multi30k.SETTINGS) == ['full', 'quick', 'tiny']\n"
        "print(sorted(m for m in ('keras', 'keras_attn', 'tensorflow', 'jax') "
        "if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"
