"""The small named layers that make the models' summaries read well.

`PaddingMask`, `SequencePooling` and `TiedVocabularyProjection` against
NumPy and against the embedding's own reverse call.
"""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import (
    PaddingMask,
    SequencePooling,
    TiedVocabularyProjection,
    TokenAndPositionEmbedding,
)

TOKENS = np.array([[5, 3, 0, 0], [0, 7, 7, 1]], "int32")


def test_padding_mask_contract_and_values():
    output = run_layer_test(
        PaddingMask,
        {"pad_id": 7},
        TOKENS,
        expected_output_shape=(2, 4),
        expected_num_trainable_weights=0,
        run_mixed_precision=False,  # A boolean output has no compute dtype.
    )
    np.testing.assert_array_equal(output, TOKENS != 7)
    mask = PaddingMask()(TOKENS)
    assert keras.backend.standardize_dtype(mask.dtype) == "bool"
    np.testing.assert_array_equal(ops.convert_to_numpy(mask), TOKENS != 0)


@pytest.mark.parametrize(
    "pad_id, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_padding_mask_rejects_a_bad_pad_id(pad_id, error):
    with pytest.raises(error, match="Received: pad_id="):
        PaddingMask(pad_id)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_pooling_matches_numpy(pooling):
    rng = np.random.default_rng(0)
    sequence = rng.normal(size=(2, 4, 6)).astype("float32")
    output = run_layer_test(
        SequencePooling,
        {"pooling": pooling},
        {"sequence": sequence, "padding_mask": TOKENS != 0},
        expected_output_shape=(2, 6),
        expected_num_trainable_weights=0,
    )
    if pooling == "cls":
        expected = sequence[:, 0]
    else:
        weights = (TOKENS != 0)[:, :, None]
        expected = (sequence * weights).sum(1) / weights.sum(1)
    np.testing.assert_allclose(output, expected, rtol=1e-6, atol=1e-6)


def test_mean_pooling_of_all_padding_is_zero():
    pooled = SequencePooling("mean")(
        np.ones((1, 3, 2), "float32"), np.zeros((1, 3), bool)
    )
    np.testing.assert_array_equal(ops.convert_to_numpy(pooled), np.zeros((1, 2)))


def test_sequence_pooling_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="Received: pooling='max'"):
        SequencePooling("max")


def _embedding(**kwargs):
    # Sinusoidal positions: no position weights, which the reverse call
    # would leave without a gradient in the harness's `fit` step.
    return TokenAndPositionEmbedding(11, 8, 6, position="sinusoidal", **kwargs)


def test_tied_projection_is_the_embedding_reversed_and_holds_no_weights():
    embedding = _embedding()
    embedding(TOKENS)
    projection = TiedVocabularyProjection(embedding)
    hidden = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    logits = ops.convert_to_numpy(projection(hidden))
    table = ops.convert_to_numpy(embedding.token_embedding.embeddings)
    np.testing.assert_allclose(logits, hidden @ table.T, rtol=1e-5, atol=1e-5)
    # The embedding's owner tracks (and saves) the table, not the projection.
    assert projection.weights == [] and projection.count_params() == 0
    symbolic = projection(keras.Input((None, 6)))
    assert tuple(symbolic.shape) == (None, None, 11)


def test_tied_projection_restored_from_its_config_owns_its_embedding():
    config = keras.layers.serialize(_embedding())
    # No dtype in the config: the harness's mixed-precision call sets the
    # global policy, which the rebuilt embedding then follows.
    config["config"].pop("dtype")
    run_layer_test(
        TiedVocabularyProjection,
        {"embedding": config},
        np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32"),
        expected_output_shape=(2, 4, 11),
        expected_num_trainable_weights=1,  # the token table
    )


def test_tied_projection_rejects_a_non_layer():
    with pytest.raises(TypeError, match="Received: embedding="):
        TiedVocabularyProjection(np.zeros((3, 2)))
