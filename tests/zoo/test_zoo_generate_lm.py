"""generate_lm: the cached loop against full recomputation and the full pass."""

import keras
import numpy as np
import pytest

from keras_attn.generation import generate_lm
from keras_attn.models import TransformerLM

VOCABULARY_SIZE, PAD, END, MAX_LENGTH = 24, 0, 3, 9
# Right-padded prompts of lengths 3, 1 and 2.
PROMPTS = np.array([[2, 5, 6], [2, 0, 0], [2, 9, 0]], "int32")
PROMPT_LENGTHS = (3, 1, 2)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1
    )


def full_pass_log_probs(model, tokens):
    """Log-softmax of one uncached pass, padding id excluded (as generated)."""
    logits = np.asarray(model(tokens), "float64")
    logits[..., PAD] = -np.inf
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def check_prompts_kept(tokens):
    for row, length in enumerate(PROMPT_LENGTHS):
        np.testing.assert_array_equal(tokens[row, :length], PROMPTS[row, :length])


@pytest.fixture(scope="module")
def greedy(model):
    return {
        use_cache: {
            key: np.asarray(value)
            for key, value in generate_lm(
                model, PROMPTS, MAX_LENGTH, use_cache=use_cache
            ).items()
        }
        for use_cache in (True, False)
    }


def test_greedy_cached_equals_uncached(greedy):
    np.testing.assert_array_equal(greedy[True]["tokens"], greedy[False]["tokens"])
    np.testing.assert_allclose(
        greedy[True]["scores"], greedy[False]["scores"], atol=1e-5
    )


def test_greedy_takes_the_full_pass_argmax_after_each_prompt(model, greedy):
    tokens, scores = greedy[True]["tokens"], greedy[True]["scores"]
    assert tokens.shape == (3, MAX_LENGTH)
    check_prompts_kept(tokens)
    log_probs = full_pass_log_probs(model, tokens)
    for row, length in enumerate(PROMPT_LENGTHS):
        positions = np.arange(length - 1, MAX_LENGTH - 1)  # predicting t + 1
        np.testing.assert_array_equal(
            tokens[row, positions + 1], log_probs[row, positions].argmax(-1)
        )
        expected = log_probs[row, positions, tokens[row, positions + 1]].sum()
        np.testing.assert_allclose(scores[row], expected, rtol=1e-4, atol=1e-4)


def test_cached_sampling_equals_uncached_sampling(model):
    # A high temperature: the untrained model's distributions are peaked
    # (tied embeddings favour repeating a token), and the test needs draws
    # that depend on the random numbers.
    options = dict(top_k=5, top_p=0.9, temperature=2.0, seed=7)
    cached = generate_lm(model, PROMPTS, MAX_LENGTH, strategy="sample", **options)
    uncached = generate_lm(
        model, PROMPTS, MAX_LENGTH, strategy="sample", use_cache=False, **options
    )
    tokens = np.asarray(cached["tokens"])
    np.testing.assert_array_equal(tokens, uncached["tokens"])
    np.testing.assert_allclose(cached["scores"], uncached["scores"], atol=1e-5)
    check_prompts_kept(tokens)
    assert not np.any(tokens == PAD)  # no end id given: every position filled
    # Every generated token is among the k best of the full pass.
    log_probs = full_pass_log_probs(model, tokens)
    for row, length in enumerate(PROMPT_LENGTHS):
        for t in range(length - 1, MAX_LENGTH - 1):
            best = np.argsort(log_probs[row, t])[::-1][: options["top_k"]]
            assert tokens[row, t + 1] in best
    # Another seed gives other text.
    other = generate_lm(
        model, PROMPTS, MAX_LENGTH, strategy="sample", **{**options, "seed": 8}
    )
    assert not np.array_equal(np.asarray(other["tokens"]), tokens)


def test_end_id_stops_a_row_and_pads_after_it(model, greedy):
    # Use the first token greedy produces for row 1 as the end id.
    end_id = int(greedy[True]["tokens"][1, 1])
    tokens = np.asarray(
        generate_lm(model, PROMPTS, MAX_LENGTH, end_id=end_id)["tokens"]
    )
    assert tokens[1, 1] == end_id
    np.testing.assert_array_equal(tokens[1, 2:], PAD)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "beam"}, "strategy='beam'"),
        ({"max_length": 2}, "max_length=2"),
        ({"max_length": 65}, "max_length=65"),
        ({"strategy": "sample", "top_k": 0}, "top_k=0"),
        ({"strategy": "sample", "top_p": 1.5}, "top_p=1.5"),
        ({"end_id": VOCABULARY_SIZE}, f"end_id={VOCABULARY_SIZE}"),
    ],
)
def test_bad_arguments_name_argument_and_value(model, kwargs, message):
    kwargs = {"max_length": MAX_LENGTH, **kwargs}
    with pytest.raises(ValueError, match=message):
        generate_lm(model, PROMPTS, **kwargs)
