"""`save-preset` turns a trained run directory into a preset that loads whole."""

import json

import keras
import numpy as np
import pytest
from untrained_runs import write_untrained_run

from keras_attn.text import Translator
from keras_attn_recipes import translate_multi30k
from keras_attn_recipes.translation_config import SETTINGS
from keras_attn_recipes.translation_steps import load_translator

SENTENCES = ["A dog runs.", "Two men talk in the street."]

# The recipe's code (averaging, metadata, files) is the same on every
# backend; the preset's model on each is tested in tests/models and
# tests/zoo. When the backends run side by side, one runs this file
# (tests/conftest.py): torch, whose suite finishes first.
pytestmark = pytest.mark.split_backend("torch")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory as `train` leaves it, from an untrained tiny model."""
    directory = tmp_path_factory.mktemp("run")
    write_untrained_run(directory, epochs=2)
    score = {"bleu": 1.5, "bleu_signature": "nrefs:1|case:mixed|tok:13a"}
    (directory / "test_2016_flickr.beam.avg2.bleu.json").write_text(json.dumps(score))
    return directory


def test_save_preset_writes_a_preset_that_translates(run_dir, tmp_path, capsys):
    preset_dir = tmp_path / "multi30k_en_de"
    translate_multi30k.main(
        [
            "save-preset",
            "--output-dir",
            str(run_dir),
            "--preset-dir",
            str(preset_dir),
            "--average-last",
            "2",
            "--dtype",
            "float16",
        ]
    )
    assert "Saved the preset" in capsys.readouterr().out
    metadata = json.loads((preset_dir / "metadata.json").read_text())
    assert metadata["weights_dtype"] == "float16"
    assert metadata["tokenizer"] is True
    assert metadata["scores_of_these_weights"] == "test_2016_flickr.beam.avg2"
    score = metadata["scores"]["test_2016_flickr.beam.avg2"]
    assert score["bleu_signature"].startswith("nrefs:1")
    assert "non-commercial" in metadata["data"]["license"]
    # The run's config is no named setting (its vocabulary differs): it is
    # recorded whole.
    assert "recipe_config" in metadata["recipe"]["train_command"]
    assert metadata["recipe_config"]["vocabulary_size"] == 120
    assert metadata["recipe"]["average_last"] == 2
    assert metadata["decoding"]["beam_size"] == SETTINGS["tiny"].beam_size
    # The check score that tests/zoo recomputes for the shipped preset.
    check = metadata["check"]
    assert check["pairs"] == 64 and check["backend"] == keras.backend.backend()
    assert np.isfinite(check["score"]) and check["score"] > 1.0

    # The preset holds the averaged weights (to float16 precision).
    averaged, _ = load_translator(run_dir, "beam", average_last=2)
    translator = Translator.from_preset(preset_dir)
    for mine, saved in zip(averaged.model.weights, translator.model.weights):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(saved),
            keras.ops.convert_to_numpy(mine),
            rtol=1e-3,
            atol=1e-3,
        )
    translations = translator.translate(SENTENCES)
    assert len(translations) == 2 and all(isinstance(t, str) for t in translations)


def test_save_preset_without_a_run_names_the_path(tmp_path):
    with pytest.raises(SystemExit, match="^error: No trained model at"):
        translate_multi30k.main(
            ["save-preset", "--output-dir", str(tmp_path), "--preset-dir", "p"]
        )


def test_preset_dir_is_required(capsys):
    with pytest.raises(SystemExit):
        translate_multi30k.parse_args(["save-preset"])
    assert "--preset-dir" in capsys.readouterr().err
