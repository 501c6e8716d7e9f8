"""`TransformerEnsemble`: the members' mean log-probabilities, decoded in one loop.

References: each member's own full pass, combined in NumPy; a greedy loop in
NumPy over those full passes; the uncached loop for beam search (whose cache
the ensemble reorders member by member); the model itself for an ensemble
of one. The decodings run eagerly (no whole-loop compilation per test).
"""

import keras
import numpy as np
import pytest

from keras_attn.generation import BeamSampler, generate_seq2seq
from keras_attn.models import Transformer, TransformerEnsemble

VOCABULARY_SIZE = 24
START, END = 2, 3
SOURCE = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]], "int32")
MAX_LENGTH = 7


def _log_softmax(x):
    x = np.asarray(x, "float64")
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture(scope="module")
def members():
    """Two untrained tiny Transformers of different depth and width."""
    keras.utils.set_random_seed(1)
    return [
        Transformer.from_preset(
            "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1
        ),
        Transformer.from_preset(
            "transformer_tiny",
            vocabulary_size=VOCABULARY_SIZE,
            num_layers=2,
            hidden_dim=48,
            num_heads=2,
            intermediate_dim=64,
        ),
    ]


def _inputs(decoder_tokens):
    return {"encoder_tokens": SOURCE, "decoder_tokens": decoder_tokens}


def _reference(members, weights, decoder_tokens):
    """The weighted mean of the members' log-softmax, in NumPy."""
    outputs = [
        _log_softmax(keras.ops.convert_to_numpy(member(_inputs(decoder_tokens))))
        for member in members
    ]
    weights = np.asarray(weights, "float64") / np.sum(weights)
    return sum(w * out for w, out in zip(weights, outputs))


def test_full_pass_is_the_weighted_mean_of_log_probabilities(members):
    decoder_tokens = np.array([[2, 5, 6], [2, 7, 0], [2, 0, 0]], "int32")
    for weights in (None, [3.0, 1.0]):
        ensemble = TransformerEnsemble(members, weights=weights)
        got = keras.ops.convert_to_numpy(ensemble(_inputs(decoder_tokens)))
        expected = _reference(members, weights or [1, 1], decoder_tokens)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, atol=2e-5)


def test_cached_greedy_equals_a_numpy_loop_over_full_passes(members):
    tokens = generate_seq2seq(
        TransformerEnsemble(members), SOURCE, START, END, max_length=MAX_LENGTH
    )["tokens"]
    # Greedy in NumPy: the argmax of the ensemble's full pass over the
    # tokens so far (the start id and pad ids suppressed, as the loop does).
    # One buffer width for every step: the decoder is causal and padding
    # (id 0) after the decoded tokens is masked, so each pass is one shape.
    decoded = np.zeros((len(SOURCE), MAX_LENGTH + 1), "int32")
    decoded[:, 0] = START
    for step in range(MAX_LENGTH):
        scores = _reference(members, [1, 1], decoded)[:, step]
        scores[:, [0, START]] = -np.inf
        decoded[:, step + 1] = scores.argmax(-1)
    expected = decoded[:, 1:].copy()
    for row in expected:  # padding after the end id
        ends = np.flatnonzero(row == END)
        if ends.size:
            row[ends[0] + 1 :] = 0
    np.testing.assert_array_equal(np.asarray(tokens), expected)


def test_beam_search_with_the_cache_equals_without(members):
    """The ensemble's cache holds each member's slots, reordered with the beams."""
    ensemble = TransformerEnsemble(members)
    sampler = BeamSampler(num_beams=3, length_penalty_alpha=0.6)
    cached, uncached = (
        generate_seq2seq(
            ensemble,
            SOURCE,
            START,
            END,
            sampler=sampler,
            max_length=MAX_LENGTH,
            use_cache=use_cache,
        )
        for use_cache in (True, False)
    )
    np.testing.assert_array_equal(cached["beam_tokens"], uncached["beam_tokens"])
    np.testing.assert_allclose(cached["beam_scores"], uncached["beam_scores"], atol=1e-4)
    # The beams differ: the reordering was exercised.
    assert len({tuple(beam) for beam in np.asarray(cached["beam_tokens"])[0]}) > 1


def test_an_ensemble_of_one_is_its_model(members):
    """The full pass and a cached step: the model's log-softmax."""
    model, ensemble = members[0], TransformerEnsemble(members[:1])
    decoder_tokens = np.array([[2, 5, 6], [2, 7, 0], [2, 0, 0]], "int32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(ensemble(_inputs(decoder_tokens))),
        _log_softmax(keras.ops.convert_to_numpy(model(_inputs(decoder_tokens)))),
        atol=1e-5,
    )
    outputs = []
    for decoder in (ensemble, model):
        encoded, mask = decoder.encode(SOURCE)
        cache = decoder.initial_cache(encoded, mask, MAX_LENGTH)
        logits, _ = decoder.decode_step(decoder_tokens[:, :1], cache, 0)
        outputs.append(keras.ops.convert_to_numpy(logits))
    np.testing.assert_allclose(outputs[0], _log_softmax(outputs[1]), atol=1e-5)


def test_keras_file_round_trip(members, tmp_path):
    ensemble = TransformerEnsemble(members, weights=[2.0, 1.0])
    decoder_tokens = np.array([[2, 5], [2, 7], [2, 9]], "int32")
    expected = keras.ops.convert_to_numpy(ensemble(_inputs(decoder_tokens)))
    path = tmp_path / "ensemble.keras"
    ensemble.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, TransformerEnsemble)
    assert loaded.member_weights == pytest.approx((2 / 3, 1 / 3))
    assert [type(m) for m in loaded.members] == [Transformer, Transformer]
    got = keras.ops.convert_to_numpy(loaded(_inputs(decoder_tokens)))
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_bad_members_and_weights_are_named(members):
    other = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE + 1, num_layers=1
    )
    cases = [
        (members[0], TypeError, "must be a list of `keras_attn.models.Transformer`"),
        ([], ValueError, "at least one model"),
        ([members[0], "model"], TypeError, r"members\[1\] of type str"),
        (
            [members[0], other],
            ValueError,
            rf"vocabulary_size={VOCABULARY_SIZE}\. Received: "
            rf"members\[1\]\.vocabulary_size={VOCABULARY_SIZE + 1}",
        ),
    ]
    for given, error, match in cases:
        with pytest.raises(error, match=match):
            TransformerEnsemble(given)
    with pytest.raises(ValueError, match=r"one positive float per member, 2"):
        TransformerEnsemble(members, weights=[1.0])
    with pytest.raises(ValueError, match=r"weights\[1\]"):
        TransformerEnsemble(members, weights=[1.0, -1.0])
