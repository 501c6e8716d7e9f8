"""Streaming: the decoding loop in compiled chunks gives the unstreamed tokens."""

import math

import keras
import numpy as np
import pytest

from keras_attn.generation import (
    BeamSampler,
    GreedySampler,
    SequenceGenerator,
    TopKSampler,
    streaming,
)
from keras_attn.models import Transformer, TransformerLM

VOCABULARY = 40
PROMPTS = np.array([[2, 7, 9, 0], [2, 5, 0, 0]], "int32")
SOURCE = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
PREFIX = np.array([[9], [0]], "int32")


# One layer each: streaming cuts the loop into chunks whatever the model;
# every layer is more to compile.
@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(0)
    return TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY, dropout=0.0, num_layers=1
    )


@pytest.fixture(scope="module")
def seq2seq():
    keras.utils.set_random_seed(0)
    return Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY, num_layers=1
    )


def _counting(monkeypatch, generator):
    """Counts `generator`'s compiled calls and the traces of a chunk."""
    counts = {"calls": 0, "traces": 0}
    predict_on_batch = generator.predict_on_batch
    resume = streaming.resume

    def counted_predict(inputs):
        counts["calls"] += 1
        return predict_on_batch(inputs)

    def counted_resume(*args):
        counts["traces"] += 1  # traced once on JAX and TensorFlow
        return resume(*args)

    monkeypatch.setattr(generator, "predict_on_batch", counted_predict)
    monkeypatch.setattr(streaming, "resume", counted_resume)
    return counts


@pytest.mark.parametrize(
    "sampler", [GreedySampler(), TopKSampler(k=5, seed=3)], ids=["greedy", "top_k"]
)
def test_lm_stream_equals_generate_in_ceil_steps_over_k_calls(lm, sampler, monkeypatch):
    # 10 steps: two whole chunks and a partial one.
    max_length, chunk = 12, 4
    expected = SequenceGenerator(
        lm, sampler=sampler, end_id=None, max_length=max_length
    ).generate(PROMPTS)["tokens"]
    generator = SequenceGenerator(
        lm, sampler=sampler, end_id=None, max_length=max_length
    )
    counts = _counting(monkeypatch, generator)
    chunks = list(generator.stream(PROMPTS, chunk_tokens=chunk))
    np.testing.assert_array_equal(chunks[-1], expected)
    # No end id: from the shortest prompt's last token to the last position.
    steps = max_length - 1 - (2 - 1)
    assert len(chunks) == math.ceil(steps / chunk)
    assert counts["calls"] == 1 + math.ceil(steps / chunk)  # the start, the chunks
    if keras.backend.backend() == "jax":
        assert counts["traces"] == 1
    # Each chunk extends the last by at most `chunk` tokens per row.
    for before, after in zip(chunks, chunks[1:]):
        changed = np.flatnonzero((before != after).any(axis=0))
        assert changed.size <= chunk
        np.testing.assert_array_equal(
            after[:, : changed.min()], before[:, : changed.min()]
        )


@pytest.mark.parametrize(
    "sampler", [GreedySampler(), TopKSampler(k=5, seed=3)], ids=["greedy", "top_k"]
)
def test_seq2seq_stream_with_prefix_equals_generate(seq2seq, sampler):
    def make():
        return SequenceGenerator(seq2seq, sampler=sampler, end_id=3, max_length=12)

    expected = make().generate(SOURCE, prefix_tokens=PREFIX)["tokens"]
    chunks = list(make().stream(SOURCE, prefix_tokens=PREFIX, chunk_tokens=5))
    np.testing.assert_array_equal(chunks[-1], expected)
    assert chunks[0][0, 0] == 9  # the prefix from the first chunk on


def test_stream_refuses_beams_and_bad_chunks(seq2seq):
    beam = SequenceGenerator(seq2seq, sampler=BeamSampler(num_beams=2), max_length=4)
    with pytest.raises(ValueError, match="beam search's best hypothesis"):
        beam.stream(SOURCE)
    greedy = SequenceGenerator(seq2seq, sampler=GreedySampler(), max_length=4)
    with pytest.raises(ValueError, match="Received: chunk_tokens=0"):
        greedy.stream(SOURCE, chunk_tokens=0)
    assert list(greedy.stream(np.zeros((0, 3), "int32"))) == []
