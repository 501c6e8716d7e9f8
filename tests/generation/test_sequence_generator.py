"""`SequenceGenerator`: compiled decoding equals the eager functions."""

import contextlib

import keras
import numpy as np
import pytest
from tiny_seq2seq import END, PAD, START, VOCABULARY_SIZE, make_model

from keras_attn.generation import (
    SequenceGenerator,
    beam_search,
    greedy_search,
    sample,
)

MAX_LENGTH = 7
SOURCE = np.array(
    [[5, 6, 7, 8, 0, 0], [4, 9, 10, 11, 12, 13], [20, 21, 5, 6, 7, 0]], "int32"
)
EAGER = {"greedy": greedy_search, "beam": beam_search, "sample": sample}
OPTIONS = {
    "greedy": {},
    "beam": {"beam_size": 3, "length_penalty_alpha": 0.6},
    "sample": {"top_k": 5, "temperature": 1.5, "seed": 1},
}


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def compiled(model):
    """`compiled(strategy)`: one generator per deterministic strategy, shared
    by the tests (each new one compiles the decoding loop again)."""
    generators = {}

    def generator(strategy):
        assert strategy != "sample"  # its seed state advances at every call
        if strategy not in generators:
            options = dict(OPTIONS[strategy], max_length=MAX_LENGTH)
            generators[strategy] = SequenceGenerator(
                model, strategy, START, END, **options
            )
        return generators[strategy]

    return generator


@contextlib.contextmanager
def ending_at_once(model):
    """`model` biased to emit the end id first, in every sentence: the end
    id's logit bias at 100 (as `make_model(end_bias=100.0)`), then back.
    The compiled generators read the weights at each call."""
    logits = model.get_layer("logits")
    kernel, bias = logits.get_weights()
    biased = bias.copy()
    biased[END] = 100.0
    logits.set_weights([kernel, biased])
    try:
        yield model
    finally:
        logits.set_weights([kernel, bias])


def eager(strategy, model, **options):
    if strategy == "sample":
        options["seed"] = keras.random.SeedGenerator(options.get("seed"))
    out = EAGER[strategy](model, SOURCE, START, END, **options)
    return {name: np.asarray(value) for name, value in out.items()}


def assert_same(compiled, expected):
    assert sorted(compiled) == sorted(expected)
    np.testing.assert_array_equal(compiled["tokens"], expected["tokens"])
    np.testing.assert_allclose(compiled["scores"], expected["scores"], atol=1e-5)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_compiled_equals_eager(model, compiled, strategy):
    options = dict(OPTIONS[strategy], max_length=MAX_LENGTH)
    assert_same(compiled(strategy).generate(SOURCE), eager(strategy, model, **options))


def test_compiled_sampling_is_reproducible(model):
    options = dict(OPTIONS["sample"], max_length=MAX_LENGTH, seed=5)
    generator = SequenceGenerator(model, "sample", START, END, **options)
    first = generator.generate(SOURCE)
    second = generator.generate(SOURCE)
    # The generator's seed state advances between calls...
    assert np.any(first["tokens"] != second["tokens"])
    # ...and a generator rebuilt with the same seed starts over.
    rebuilt = SequenceGenerator(model, "sample", START, END, **options)
    assert_same(rebuilt.generate(SOURCE), first)
    # The eager function with the same seed state draws the same numbers.
    assert_same(first, eager("sample", model, **options))


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_pad_after_end_when_every_sentence_ends_at_once(model, compiled, strategy):
    options = dict(OPTIONS[strategy], max_length=MAX_LENGTH)
    if strategy == "sample":
        generator = SequenceGenerator(model, strategy, START, END, **options)
    else:
        generator = compiled(strategy)
    with ending_at_once(model):
        expected = eager(strategy, model, **options)
        np.testing.assert_array_equal(expected["tokens"][:, 0], END)
        np.testing.assert_array_equal(expected["tokens"][:, 1:], PAD)
        if strategy == "beam":
            # Every kept hypothesis has ended, and so has the search.
            np.testing.assert_array_equal(
                np.sum(expected["beam_tokens"] == END, axis=-1), 1
            )
        assert_same(generator.generate(SOURCE), expected)


def test_unknown_strategy_raises(model):
    with pytest.raises(ValueError, match="strategy='nucleus'"):
        SequenceGenerator(model, "nucleus")


@pytest.mark.parametrize(
    "strategy, options, match",
    [
        ("beam", {"beam_size": 0}, "beam_size=0"),
        ("beam", {"length_penalty_alpha": -1.0}, "length_penalty_alpha=-1.0"),
        ("sample", {"top_p": 1.5}, "top_p=1.5"),
        ("sample", {"temperature": 0}, "temperature=0"),
        ("greedy", {"start_id": VOCABULARY_SIZE}, f"start_id={VOCABULARY_SIZE}"),
        ("greedy", {"max_length": -3}, "max_length=-3"),
        ("greedy", {"beam_size": 4}, "beam_size"),
    ],
)
def test_bad_options_raise_at_construction(model, strategy, options, match):
    with pytest.raises(ValueError, match=match):
        SequenceGenerator(model, strategy, **options)


@pytest.mark.parametrize("sampler", ["greedy", "beam"])
def test_empty_batch_gives_empty_results(model, sampler):
    empty = np.zeros((0, 6), "int32")
    compiled = SequenceGenerator(model, sampler=sampler, max_length=MAX_LENGTH)
    eager_result = greedy_search(model, empty, START, END, max_length=MAX_LENGTH)
    for result in (compiled.generate(empty), eager_result):
        assert np.asarray(result["tokens"]).shape == (0, MAX_LENGTH)
        assert np.asarray(result["tokens"]).dtype == np.int32
        assert np.asarray(result["scores"]).shape == (0,)
    if sampler == "beam":
        assert compiled.generate(empty)["beam_tokens"].shape == (0, 4, MAX_LENGTH)


@pytest.mark.parametrize(
    "tokens, error, match",
    [
        (SOURCE + 0.0, TypeError, "encoder_tokens.*dtype=float"),
        (SOURCE > 0, TypeError, "encoder_tokens.*dtype=bool"),
        (SOURCE + VOCABULARY_SIZE, ValueError, "encoder_tokens.*ids from 24"),
        ([[5, 6], [5]], ValueError, "encoder_tokens.*rows of different lengths"),
        (np.zeros((2, 0), "int32"), ValueError, "at least one position"),
    ],
)
def test_bad_ids_are_refused_before_compiling(model, tokens, error, match):
    generator = SequenceGenerator(model, sampler="greedy", max_length=MAX_LENGTH)
    with pytest.raises(error, match=match):
        generator.generate(tokens)
    with pytest.raises(error, match=match):
        greedy_search(model, tokens, START, END, max_length=MAX_LENGTH)
