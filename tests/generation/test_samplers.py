"""Sampler objects and the one decoding loop, for the Transformer and the LM."""

import keras
import numpy as np
import pytest

from keras_attn.generation import (
    BeamSampler,
    GreedySampler,
    RandomSampler,
    SequenceGenerator,
    TopKSampler,
    TopPSampler,
    beam_search,
    generate_lm,
    generate_seq2seq,
    greedy_search,
    samplers,
)
from keras_attn.models import Transformer, TransformerLM

VOCABULARY_SIZE, PAD, START, END = 24, 0, 2, 3
SOURCE = np.array([[5, 6, 7, 8, 0, 0], [4, 9, 10, 11, 12, 13]], "int32")
PROMPTS = np.array([[START, 5, 6, 7], [START, 9, 0, 0]], "int32")
LM_LENGTH = 9


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0
    )


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(1)
    return TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0
    )


def numpy_log_softmax(logits):
    logits = np.asarray(logits, "float64")
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


# === Greedy: the argmax of full passes, computed in NumPy ===


def test_greedy_sampler_equals_numpy_argmax_of_full_passes(model):
    max_length = 6
    out = generate_seq2seq(
        model, SOURCE, START, END, sampler=GreedySampler(), max_length=max_length
    )
    encoder_output, encoder_mask = model.encode(SOURCE)
    # One full decoder pass per step over a fixed-size buffer (causal: the
    # logits at `index` see tokens up to `index` only).
    tokens = np.full((len(SOURCE), max_length + 1), PAD, "int32")
    tokens[:, 0] = START
    done = np.zeros(len(SOURCE), bool)
    for index in range(max_length):
        logits = keras.ops.convert_to_numpy(
            model.decode(tokens, encoder_output, encoder_mask)
        )[:, index].astype("float64")
        logits[:, [PAD, START]] = -np.inf  # never generated
        next_ids = np.where(done, PAD, logits.argmax(-1))
        tokens[:, index + 1] = next_ids
        done |= next_ids == END
    np.testing.assert_array_equal(out["tokens"], tokens[:, 1:])
    np.testing.assert_array_equal(
        out["tokens"], greedy_search(model, SOURCE, START, END, max_length)["tokens"]
    )


def test_greedy_sampler_select_is_argmax():
    logits = np.random.default_rng(0).normal(size=(5, 1, 11)).astype("float32")
    parents, ids = GreedySampler().select(logits, None, None, None)
    np.testing.assert_array_equal(ids, logits.argmax(-1))
    np.testing.assert_array_equal(parents, np.zeros((5, 1)))


# === Beam: the sampler equals beam_search; the LM's beams equal rescoring ===


@pytest.mark.parametrize("alpha", [0.0, 1.5])
def test_beam_sampler_equals_beam_search(model, alpha):
    expected = beam_search(
        model, SOURCE, START, END, beam_size=3, length_penalty_alpha=alpha, max_length=7
    )
    out = generate_seq2seq(
        model,
        SOURCE,
        START,
        END,
        sampler=BeamSampler(num_beams=3, length_penalty_alpha=alpha),
        max_length=7,
    )
    for key in ("tokens", "beam_tokens"):
        np.testing.assert_array_equal(out[key], expected[key])
    np.testing.assert_allclose(out["beam_scores"], expected["beam_scores"], atol=1e-5)


def test_beam_sampler_without_cache_equals_with_cache(model):
    # The options of `test_beam_sampler_equals_beam_search[1.5]`: the cached
    # loop is the program eager JAX compiled there (and keeps compiled).
    sampler = BeamSampler(num_beams=3, length_penalty_alpha=1.5)
    cached = generate_seq2seq(model, SOURCE, START, END, sampler=sampler, max_length=7)
    full = generate_seq2seq(
        model, SOURCE, START, END, sampler=sampler, max_length=7, use_cache=False
    )
    np.testing.assert_array_equal(cached["beam_tokens"], full["beam_tokens"])
    np.testing.assert_allclose(cached["beam_scores"], full["beam_scores"], atol=1e-5)


def test_lm_beams_keep_the_prompt_and_equal_full_pass_rescoring(lm):
    alpha = 0.6
    out = generate_lm(lm, PROMPTS, LM_LENGTH, end_id=END, sampler=BeamSampler(3, alpha))
    uncached = generate_lm(
        lm,
        PROMPTS,
        LM_LENGTH,
        end_id=END,
        sampler=BeamSampler(3, alpha),
        use_cache=False,
    )
    np.testing.assert_array_equal(out["beam_tokens"], uncached["beam_tokens"])
    beam_tokens = np.asarray(out["beam_tokens"])  # (batch, beams, length)
    prompt_lengths = (PROMPTS != PAD).sum(1)
    for row, length in enumerate(prompt_lengths):
        for beam in range(3):
            np.testing.assert_array_equal(
                beam_tokens[row, beam, :length], PROMPTS[row, :length]
            )
    # Each beam's score: its generated tokens' log-probabilities under one
    # full pass (padding suppressed), divided by the GNMT length penalty.
    flat = beam_tokens.reshape(-1, LM_LENGTH)
    logits = keras.ops.convert_to_numpy(lm(flat)).astype("float64")
    logits[..., PAD] = -1e9
    log_probs = numpy_log_softmax(logits)
    scores = np.zeros(len(flat))
    for i, sequence in enumerate(flat):
        start = prompt_lengths[i // 3]
        generated = 0
        for position in range(start, LM_LENGTH):
            token = sequence[position]
            if token == PAD:
                break
            scores[i] += log_probs[i, position - 1, token]
            generated += 1
            if token == END:
                break
        scores[i] /= ((5.0 + generated) / 6.0) ** alpha
    np.testing.assert_allclose(
        np.asarray(out["beam_scores"]).reshape(-1), scores, rtol=1e-4, atol=1e-4
    )
    assert np.all(np.diff(np.asarray(out["beam_scores"]), axis=1) <= 1e-6)


def test_lm_one_beam_is_greedy(lm):
    greedy = generate_lm(lm, PROMPTS, LM_LENGTH, end_id=END)
    one_beam = generate_lm(lm, PROMPTS, LM_LENGTH, end_id=END, sampler=BeamSampler(1))
    np.testing.assert_array_equal(one_beam["tokens"], greedy["tokens"])


# === Top-k / top-p restrict the support; seeds reproduce ===


def test_top_k_and_top_p_samplers_draw_only_from_their_support():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=2.0, size=(1, 1, 30)).astype("float32")
    draws = 400
    tiled = np.tile(logits, (draws, 1, 1))
    uniform = rng.uniform(size=(draws,)).astype("float32")
    order = np.argsort(-logits[0, 0])
    probabilities = np.exp(numpy_log_softmax(logits[0, 0]))
    mass_before = np.cumsum(probabilities[order]) - probabilities[order]
    nucleus = set(order[mass_before < 0.7].tolist())
    cases = {
        TopKSampler(k=4): set(order[:4].tolist()),
        TopPSampler(p=0.7): nucleus,
        TopPSampler(p=0.7, k=2): set(order[:2].tolist()) & nucleus,
    }
    for sampler, support in cases.items():
        _, ids = sampler.select(tiled, None, None, uniform)
        drawn = set(np.asarray(ids)[:, 0].tolist())
        assert drawn <= support, sampler
        assert drawn == support, sampler  # 400 draws reach every member


def test_temperature_sharpens_the_distribution():
    logits = np.array([[[2.0, 1.0, 0.0, -1.0]]], "float32")
    uniform = np.linspace(0.0, 0.999, 500).astype("float32")
    tiled = np.tile(logits, (500, 1, 1))
    counts = {}
    for temperature in (0.25, 1.0):
        _, ids = RandomSampler(temperature=temperature).select(
            tiled, None, None, uniform
        )
        counts[temperature] = np.bincount(np.asarray(ids)[:, 0], minlength=4) / 500
    expected = np.exp(numpy_log_softmax(logits[0, 0] / 0.25))
    np.testing.assert_allclose(counts[0.25], expected, atol=0.01)
    assert counts[0.25][0] > counts[1.0][0]


def test_seeded_sampling_reproduces_and_cache_changes_nothing(model, lm):
    sampler = TopPSampler(p=0.9, k=12, temperature=1.5, seed=3)
    first = generate_seq2seq(model, SOURCE, START, END, sampler=sampler, max_length=8)
    uncached = generate_seq2seq(
        model, SOURCE, START, END, sampler=sampler, max_length=8, use_cache=False
    )
    np.testing.assert_array_equal(first["tokens"], uncached["tokens"])
    other_seed = generate_seq2seq(
        model, SOURCE, START, END, sampler=sampler.with_seed(4), max_length=8
    )
    assert not np.array_equal(first["tokens"], other_seed["tokens"])
    lm_first = generate_lm(lm, PROMPTS, LM_LENGTH, sampler=sampler)
    lm_uncached = generate_lm(lm, PROMPTS, LM_LENGTH, sampler=sampler, use_cache=False)
    np.testing.assert_array_equal(lm_first["tokens"], lm_uncached["tokens"])


def test_compiled_lm_generator_is_reproducible_from_its_seed(lm):
    sampler = TopKSampler(k=8, temperature=1.5, seed=7)
    runs = [
        SequenceGenerator(lm, sampler=sampler, end_id=END, max_length=LM_LENGTH)
        for _ in range(2)
    ]
    outputs = [[run.generate(PROMPTS)["tokens"] for _ in range(2)] for run in runs]
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])
    eager = generate_lm(
        lm,
        PROMPTS,
        LM_LENGTH,
        end_id=END,
        sampler=sampler.with_seed(keras.random.SeedGenerator(7)),
    )
    np.testing.assert_array_equal(outputs[0][0], eager["tokens"])


# === Configuration ===


def test_get_and_serialize_round_trip():
    for sampler in (
        GreedySampler(),
        BeamSampler(num_beams=5, length_penalty_alpha=1.0),
        TopKSampler(k=3, temperature=0.7, seed=2),
        TopPSampler(p=0.8, k=10, seed=None),
    ):
        assert samplers.get(samplers.serialize(sampler)) == sampler
    assert samplers.get("top_p") == TopPSampler()
    assert samplers.get("beam").num_beams == 4


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: BeamSampler(num_beams=0), "num_beams=0"),
        (lambda: BeamSampler(length_penalty_alpha=-1), "length_penalty_alpha=-1"),
        (lambda: TopKSampler(k=0), "k=0"),
        (lambda: TopPSampler(p=1.5), "p=1.5"),
        (lambda: RandomSampler(temperature=0.0), "temperature=0.0"),
        (lambda: samplers.get("nucleus"), "sampler='nucleus'"),
    ],
)
def test_bad_sampler_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_sampler_and_strategy_options_are_exclusive(model, lm):
    with pytest.raises(ValueError, match="strategy='greedy'"):
        SequenceGenerator(model, strategy="greedy", sampler=GreedySampler())
    with pytest.raises(ValueError, match="top_k=3"):
        generate_lm(lm, PROMPTS, LM_LENGTH, sampler=GreedySampler(), top_k=3)
    with pytest.raises(ValueError, match="max_length=None"):
        SequenceGenerator(lm, sampler="greedy")
