"""The translator in ONNX Runtime: text in, text out, without Keras or TensorFlow.

`export_onnx_translator` writes the decoding loop as one ONNX graph; the
client (`onnx_translator.py`, copied beside it) tokenizes with
`sentencepiece` and runs it in a fresh process that imports no Keras,
TensorFlow or keras-attn. Its translations must equal
`keras_attn.text.Translator`'s.
"""

import gzip
import os
import sys

import keras
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="the decoding loop is converted by tf2onnx (TensorFlow backend)",
    ),
]

from keras_attn.export.onnx_export import export_onnx_translator  # noqa: E402
from keras_attn.models import Transformer  # noqa: E402
from keras_attn.text import (  # noqa: E402
    MULTI30K_DIR,  # noqa: E402
    SubwordTokenizer,
    Translator,
)

sys.path.insert(0, os.path.dirname(__file__))
from onnx_client import translate_in_client  # noqa: E402

README_SENTENCES = ["A dog runs.", "A dog is running on the beach.", ""]
TEST_SENTENCES = 20  # of Multi30k's test_2016_flickr


def multi30k_test_sentences(count):
    path = os.path.join(MULTI30K_DIR, "test_2016_flickr.en.gz")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for _, line in zip(range(count), lines)]


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(multi30k_test_sentences(200), vocabulary_size=120)


@pytest.fixture(scope="module")
def model(tokenizer):
    """A random tiny model: the ids still have to agree exactly. One layer:
    tf2onnx's time grows with the graph, and every layer converts alike."""
    keras.utils.set_random_seed(3)
    return Transformer.from_preset(
        "transformer_tiny", vocabulary_size=tokenizer.vocabulary_size, num_layers=1
    )


def test_greedy_translations_equal_the_translator(model, tokenizer, tmp_path):
    directory = export_onnx_translator(
        model, tokenizer, tmp_path / "onnx", strategy="greedy"
    )
    sentences = README_SENTENCES + multi30k_test_sentences(TEST_SENTENCES)
    expected = Translator(model, tokenizer, strategy="greedy")
    served = translate_in_client(directory, sentences)
    assert served["ids"] == expected.translate_ids(sentences)[0]
    assert served["texts"] == expected.translate(sentences)


def test_beam_search_ids_equal_the_translator(model, tokenizer, tmp_path):
    options = dict(beam_size=3, length_penalty_alpha=0.6)
    # Over a previous export: replaced whole, not merged into.
    previous = tmp_path / "onnx"
    previous.mkdir()
    (previous / "translator.onnx").write_bytes(b"previous graph")
    (previous / "stale.txt").write_text("from the previous export")
    directory = export_onnx_translator(
        model, tokenizer, previous, strategy="beam", **options
    )
    assert sorted(p.name for p in directory.iterdir()) == [
        "onnx_translator.py",
        "tokenizer.model",
        "translator.json",
        "translator.onnx",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"]  # nothing beside
    sentences = README_SENTENCES + multi30k_test_sentences(5)
    expected = Translator(model, tokenizer, strategy="beam", **options)
    served = translate_in_client(directory, sentences)
    assert served["ids"] == expected.translate_ids(sentences)[0]
    assert served["texts"] == expected.translate(sentences)
