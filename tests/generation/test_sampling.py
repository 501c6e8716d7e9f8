"""Sampling: reproducibility, top-k / top-p / temperature against NumPy."""

import keras
import numpy as np
import pytest

from keras_attn.generation import filter_logits, greedy_search, sample
from keras_attn.generation.samplers import sample_from_logits
from keras_attn.models import Transformer

VOCABULARY_SIZE, PAD, START, END = 24, 0, 2, 3
MAX_LENGTH = 7
SOURCE = np.array(
    [[5, 6, 7, 8, 0, 0], [4, 9, 10, 11, 12, 13], [20, 21, 5, 6, 7, 0]], "int32"
)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return Transformer.from_preset("transformer_tiny", vocabulary_size=VOCABULARY_SIZE)


def run_sample(model, **kwargs):
    out = sample(model, SOURCE, START, END, max_length=MAX_LENGTH, **kwargs)
    return np.asarray(out["tokens"]), np.asarray(out["scores"])


def test_same_seed_same_tokens_with_and_without_cache(model):
    # Two separate runs with one seed (one of them without the cache).
    tokens, scores = run_sample(model, temperature=2.0, seed=7)
    uncached, uncached_scores = run_sample(
        model, temperature=2.0, seed=7, use_cache=False
    )
    other, _ = run_sample(model, temperature=2.0, seed=8)
    np.testing.assert_array_equal(tokens, uncached)
    np.testing.assert_allclose(scores, uncached_scores, atol=1e-5)
    # 21 tokens at temperature 2 over ~21 ids: another seed differs.
    assert np.any(tokens != other)


def test_top_k_one_is_greedy(model):
    tokens, scores = run_sample(model, top_k=1, seed=3)
    greedy = greedy_search(model, SOURCE, START, END, max_length=MAX_LENGTH)
    np.testing.assert_array_equal(tokens, greedy["tokens"])
    # Scores are log-probabilities under the unfiltered model, like greedy's.
    np.testing.assert_allclose(scores, greedy["scores"], atol=1e-5)


def random_logits(batch=4, vocabulary=12, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, vocabulary)) * 2


def test_top_k_keeps_exactly_k():
    logits = random_logits().astype("float32")
    for k in (1, 3, 12):
        filtered = np.asarray(filter_logits(logits, top_k=k))
        kept = np.isfinite(filtered)
        np.testing.assert_array_equal(kept.sum(axis=1), k)
        top = np.argsort(-logits, axis=1)[:, :k]
        np.testing.assert_array_equal(
            np.sort(np.nonzero(kept)[1].reshape(-1, k)), np.sort(top)
        )
        np.testing.assert_array_equal(filtered[kept], logits[kept])
        assert np.all(filtered[~kept] == -np.inf)
    # More than the vocabulary: nothing to filter.
    np.testing.assert_array_equal(filter_logits(logits, top_k=20), logits)


def reference_nucleus(logits, top_p):
    """The smallest set of most likely ids whose probability reaches `top_p`."""
    kept = np.zeros(logits.shape, bool)
    for row, row_logits in enumerate(np.asarray(logits, "float64")):
        probabilities = np.exp(row_logits - row_logits.max())
        probabilities /= probabilities.sum()
        order = np.argsort(-probabilities)
        size = np.searchsorted(np.cumsum(probabilities[order]), top_p) + 1
        kept[row, order[:size]] = True
    return kept


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.5, 0.9, 0.99, 1.0])
def test_top_p_keeps_the_smallest_nucleus(top_p):
    logits = random_logits(batch=6).astype("float32")
    filtered = np.asarray(filter_logits(logits, top_p=top_p))
    kept = np.isfinite(filtered)
    np.testing.assert_array_equal(kept, reference_nucleus(logits, top_p))
    np.testing.assert_array_equal(filtered[kept], logits[kept])


def test_top_k_then_top_p_and_temperature():
    logits = random_logits().astype("float32")
    temperature = 0.7
    filtered = np.asarray(
        filter_logits(logits, top_k=5, top_p=0.6, temperature=temperature)
    )
    scaled = logits / temperature
    # Top-k first; the nucleus is taken from the renormalised top-k ids.
    top_k = np.where(scaled >= np.sort(scaled)[:, -5:-4], scaled, -np.inf)
    expected = reference_nucleus(top_k, 0.6)
    np.testing.assert_array_equal(np.isfinite(filtered), expected)
    np.testing.assert_allclose(filtered[expected], scaled[expected], rtol=1e-6)
    # Temperature alone only divides.
    np.testing.assert_allclose(
        filter_logits(logits, temperature=temperature), scaled, rtol=1e-6
    )


def test_sample_from_logits_matches_softmax():
    draws = 20000
    logits = np.array([1.0, -0.5, 0.3, 2.0, -np.inf, 0.0], "float32")
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    uniform = np.random.default_rng(0).uniform(size=draws).astype("float32")
    ids = np.asarray(sample_from_logits(np.tile(logits, (draws, 1)), uniform))
    counts = np.bincount(ids, minlength=len(logits))
    assert counts[4] == 0
    allowed = probabilities > 0
    expected = draws * probabilities[allowed]
    chi_square = np.sum((counts[allowed] - expected) ** 2 / expected)
    # 5 degrees of freedom minus one: P(chi-square > 25) is about 5e-5.
    assert chi_square < 25.0, (counts, expected)


def test_sample_from_logits_never_picks_an_excluded_id():
    # A draw just below 1 can exceed the float32 cumulative sum (about 1 -
    # 1e-7); the last id must not be taken when it is filtered out.
    logits = random_logits(batch=512, vocabulary=7, seed=1).astype("float32")
    filtered = np.asarray(filter_logits(logits, top_k=3))
    below_one = np.nextafter(np.float32(1.0), np.float32(0.0))
    for uniform in (0.0, 0.5, below_one):
        ids = np.asarray(
            sample_from_logits(filtered, np.full((512,), uniform, "float32"))
        )
        assert np.all(np.isfinite(filtered[np.arange(512), ids]))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"top_k": 0}, ValueError, "top_k=0"),
        ({"top_k": 2.5}, TypeError, "top_k=2.5"),
        ({"top_p": 0.0}, ValueError, "top_p=0.0"),
        ({"top_p": 1.5}, ValueError, "top_p=1.5"),
        ({"temperature": 0.0}, ValueError, "temperature=0.0"),
        ({"temperature": -1.0}, ValueError, "temperature=-1.0"),
        ({"start_id": -1}, ValueError, "start_id=-1"),
        ({"end_id": VOCABULARY_SIZE}, ValueError, f"end_id={VOCABULARY_SIZE}"),
        (
            {"encoder_tokens": np.ones((5,), "int32")},
            ValueError,
            r"encoder_tokens.shape=\(5,\)",
        ),
    ],
)
def test_bad_arguments_raise(model, kwargs, error, match):
    arguments = {"encoder_tokens": SOURCE, "start_id": START, "end_id": END}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        sample(model, **arguments)
