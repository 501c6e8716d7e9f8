"""Stop sequences and per-token scores, against NumPy references."""

import keras
import numpy as np
import pytest

from keras_attn.generation import (
    BeamSampler,
    generate_lm,
    generate_seq2seq,
    length_penalty,
)
from keras_attn.models import Transformer, TransformerLM

VOCABULARY = 40
PAD = 0
PROMPTS = np.array([[2, 7, 9, 0], [2, 5, 0, 0], [2, 11, 12, 13]], "int32")


# One layer (here and below): the rules checked hold for any model; every
# layer is more to compile.
@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(1)
    return TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY, dropout=0.0, num_layers=1
    )


def _stopped_reference(tokens, prompt_lengths, stop_sequences):
    """NumPy: each row cut after the first generated window equal to a stop
    sequence (all of its tokens generated), padding after it."""
    tokens = tokens.copy()
    for row, prompt_length in zip(tokens, prompt_lengths):
        for last in range(prompt_length, len(row)):
            if any(
                last - len(stop) + 1 >= prompt_length
                and list(row[last - len(stop) + 1 : last + 1]) == list(stop)
                for stop in stop_sequences
            ):
                row[last + 1 :] = PAD
                break
    return tokens


def test_lm_stop_sequences_follow_the_rule(lm):
    max_length = 16
    plain = np.asarray(generate_lm(lm, PROMPTS, max_length)["tokens"])
    prompt_lengths = (PROMPTS != PAD).sum(axis=1)
    # Stop sequences that occur in the plain output (two tokens of row 0,
    # one token of row 1, one spanning row 2's prompt end: it must not
    # count there) and one that does not occur.
    stops = [
        plain[0, 6:8].tolist(),
        plain[1, 5:6].tolist(),
        plain[2, 3:5].tolist(),
        [38, 39, 38],
    ]
    out = generate_lm(lm, PROMPTS, max_length, stop_sequences=stops)
    expected = _stopped_reference(plain, prompt_lengths, stops)
    np.testing.assert_array_equal(np.asarray(out["tokens"]), expected)
    assert (expected != plain).any()  # some row did stop
    with pytest.raises(ValueError, match="non-empty lists of token ids"):
        generate_lm(lm, PROMPTS, max_length, stop_sequences=[[]])
    with pytest.raises(ValueError, match=r"vocabulary_size=40\)\. Received"):
        generate_lm(lm, PROMPTS, max_length, stop_sequences=[[5, 40]])
    with pytest.raises(TypeError, match="list of lists of token ids"):
        generate_lm(lm, PROMPTS, max_length, stop_sequences=[5, 6])


def test_token_scores_sum_to_the_raw_score(lm):
    out = generate_lm(lm, PROMPTS, 10, return_token_scores=True)
    token_scores = np.asarray(out["token_scores"])
    assert (token_scores[:, :4][PROMPTS != PAD] == 0).all()  # the prompt is free
    np.testing.assert_allclose(
        token_scores.sum(axis=1), np.asarray(out["scores"]), rtol=1e-5, atol=1e-5
    )
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY, num_layers=1
    )
    source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    alpha = 0.6
    out = generate_seq2seq(
        model,
        source,
        start_id=2,
        end_id=3,
        sampler=BeamSampler(num_beams=3, length_penalty_alpha=alpha),
        max_length=8,
        return_token_scores=True,
    )
    beam_tokens = np.asarray(out["beam_tokens"])
    beam_token_scores = np.asarray(out["beam_token_scores"])
    lengths = (beam_tokens != PAD).sum(axis=-1)  # generated, end included
    raw = beam_token_scores.sum(axis=-1)
    normalized = raw / np.asarray(length_penalty(lengths, alpha))
    np.testing.assert_allclose(
        normalized, np.asarray(out["beam_scores"]), rtol=1e-5, atol=1e-5
    )
    assert (beam_token_scores[beam_tokens == PAD] == 0).all()
