"""Translating with an ensemble of presets, and minimum Bayes risk selection."""

import keras
import pytest
from sacrebleu.metrics import CHRF

from keras_attn.models import Transformer, TransformerEnsemble
from keras_attn.text import (
    SubwordTokenizer,
    Translator,
    load_multi30k,
    minimum_bayes_risk,
)

SENTENCES = ["A dog runs in the park.", "", "Two men talk."]
OPTIONS = dict(strategy="beam", beam_size=3, max_length=8, jit_compile=False)


@pytest.fixture(scope="module")
def tokenizer():
    captions, _ = load_multi30k("val")
    return SubwordTokenizer.train(captions[:200], 120)


@pytest.fixture(scope="module")
def presets(tokenizer, tmp_path_factory):
    """Two presets of different untrained tiny models, one tokenizer."""
    keras.utils.set_random_seed(2)
    directories, models = [], []
    for num_layers in (1, 2):
        model = Transformer.from_preset(
            "transformer_tiny",
            vocabulary_size=tokenizer.vocabulary_size,
            num_layers=num_layers,
        )
        directory = tmp_path_factory.mktemp("presets") / f"layers_{num_layers}"
        model.save_to_preset(directory, tokenizer=tokenizer)
        directories.append(directory)
        models.append(model)
    return directories, models


def test_a_list_of_presets_translates_as_their_ensemble(presets, tokenizer):
    directories, models = presets
    translator = Translator.from_preset(directories, **OPTIONS)
    assert isinstance(translator.model, TransformerEnsemble)
    expected = Translator(TransformerEnsemble(models), tokenizer, **OPTIONS)
    n_best = translator.translate(SENTENCES, num_return_sequences=3)
    assert n_best == expected.translate(SENTENCES, num_return_sequences=3)
    assert [texts[0] for texts in n_best] == translator.translate(SENTENCES)
    # MBR picks one of each sentence's candidates.
    chosen = minimum_bayes_risk(n_best)
    assert [text in texts for text, texts in zip(chosen, n_best)] == [True] * 3


def test_presets_with_other_tokenizers_are_refused(presets, tmp_path):
    directories, models = presets
    captions, _ = load_multi30k("train")
    other = SubwordTokenizer.train(captions[:200], models[0].vocabulary_size)
    models[0].save_to_preset(tmp_path / "other", tokenizer=other)
    with pytest.raises(ValueError, match=r"share one tokenizer\. Received: preset\[1\]"):
        Translator.from_preset([directories[0], tmp_path / "other"])
    with pytest.raises(ValueError, match=r"at least one preset\. Received: preset=\[\]"):
        Translator.from_preset([])
    with pytest.raises(ValueError, match=r"not Hugging Face checkpoints.*preset\[1\]"):
        Translator.from_preset([directories[0], "hf://Helsinki-NLP/opus-mt-en-de"])


def _expected_utility(text, texts):
    chrf = CHRF()
    return sum(chrf.sentence_score(text, [ref]).score for ref in texts) / len(texts)


def test_mbr_picks_the_consensus_and_breaks_ties_by_order():
    german = [
        "Ein Hund rennt über die Wiese.",
        "Ein Hund läuft über eine Wiese.",
        "Ein Hund rennt über eine Wiese.",
        "Zwei Männer sitzen.",
    ]
    chosen = minimum_bayes_risk([german, ["Nur einer."], german[::-1]])
    # The consensus wins whatever the order; one candidate is returned.
    assert chosen == [german[2], "Nur einer.", german[2]]
    utilities = [_expected_utility(text, german) for text in german]
    assert max(utilities) == utilities[2] and utilities.count(max(utilities)) == 1
    # A candidate drawn three times outweighs a single closer one.
    samples = ["Ein Mann fährt Rad.", "Ein Mann fährt Fahrrad."] + ["Ein Kind."] * 3
    assert minimum_bayes_risk([samples]) == ["Ein Kind."]
    # Equal utilities: the first (an n-best list's better) one.
    assert minimum_bayes_risk([["Ein Hund.", "Ein Hund."]]) == ["Ein Hund."]
    assert minimum_bayes_risk([["b", "a"]]) == ["b"]


@pytest.mark.parametrize(
    "candidates, error, match",
    [
        ("Ein Hund.", TypeError, "one list of strings per sentence"),
        (["Ein Hund."], TypeError, r"candidates\[0\]='Ein Hund\.'"),
        ([[]], ValueError, r"at least one candidate\. Received: candidates\[0\]"),
        ([["a", 3]], TypeError, r"candidates\[0\]"),
    ],
)
def test_mbr_bad_candidates_are_named(candidates, error, match):
    with pytest.raises(error, match=match):
        minimum_bayes_risk(candidates)
