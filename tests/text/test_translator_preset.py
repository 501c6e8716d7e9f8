"""A translator saved as a preset (model + SentencePiece tokenizer) loads whole."""

import json

import pytest
from untrained_runs import untrained_model_and_tokenizer

from keras_attn.text import SubwordTokenizer, Translator

SENTENCES = ["A dog runs.", "", "Two men talk in the street."]


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    model, tokenizer = untrained_model_and_tokenizer()
    directory = tmp_path_factory.mktemp("preset")
    model.save_to_preset(
        directory,
        tokenizer=tokenizer,
        metadata={"decoding": {"beam_size": 3, "length_penalty_alpha": 0.6}},
    )
    return directory, model, tokenizer


def test_the_tokenizer_is_saved_in_the_keras_hub_layout(preset):
    directory, _, tokenizer = preset
    config = json.loads((directory / "tokenizer.json").read_text())
    assert config["model_file"] == "assets/tokenizer/tokenizer.model"
    assert config["vocabulary_size"] == tokenizer.vocabulary_size
    loaded = SubwordTokenizer.from_preset(directory)
    assert loaded.model_proto == tokenizer.model_proto
    assert json.loads((directory / "metadata.json").read_text())["tokenizer"]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_translator_from_preset_equals_the_one_it_was_saved_from(preset, strategy):
    directory, model, tokenizer = preset
    # 12 tokens, not the model's 64: the untrained model seldom ends a
    # sentence, and each step is a decoding step of every call (eager on
    # torch); equal translations need no more.
    options = {"max_length": 12}
    if strategy == "beam":
        options.update(beam_size=3, length_penalty_alpha=0.6)
    expected = Translator(model, tokenizer, strategy=strategy, **options).translate(
        SENTENCES
    )
    loaded = Translator.from_preset(
        str(directory), strategy=strategy, max_length=options["max_length"]
    )
    translations = loaded.translate(SENTENCES)
    assert translations == expected
    assert loaded.generate(SENTENCES) == expected
    assert translations[1] == ""
    if strategy == "beam":  # the preset's decoding settings are its defaults
        assert loaded.generator.options["beam_size"] == 3


def test_a_preset_without_a_tokenizer_says_so(tmp_path, preset):
    _, model, _ = preset
    model.save_to_preset(tmp_path)
    with pytest.raises(FileNotFoundError, match="has no tokenizer"):
        Translator.from_preset(tmp_path)


def test_missing_tokenizer_model_file_is_named(tmp_path, preset):
    _, model, tokenizer = preset
    model.save_to_preset(tmp_path, tokenizer=tokenizer)
    (tmp_path / "assets" / "tokenizer" / "tokenizer.model").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.model"):
        SubwordTokenizer.from_preset(tmp_path)


def test_the_tokenizer_file_must_lie_inside_the_preset(tmp_path, preset):
    _, model, tokenizer = preset
    model.save_to_preset(tmp_path, tokenizer=tokenizer)
    config = json.loads((tmp_path / "tokenizer.json").read_text())
    config["model_file"] = "../elsewhere.model"
    (tmp_path / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="inside the preset"):
        SubwordTokenizer.from_preset(tmp_path)


def test_beam_options_with_greedy_are_refused(preset):
    with pytest.raises(ValueError, match="Received: strategy='greedy'"):
        Translator.from_preset(preset[0], strategy="greedy", beam_size=4)
