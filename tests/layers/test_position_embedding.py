"""`PositionEmbedding`: one learned vector per position (section 3.5)."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import PositionEmbedding


def test_layer_contract():
    run_layer_test(
        PositionEmbedding,
        dict(sequence_length=6),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=1,
    )


@pytest.mark.parametrize("start", [0, 1, 3])
def test_returns_the_position_rows(start):
    layer = PositionEmbedding(sequence_length=8)
    layer.build((2, 5, 4))
    table = np.random.default_rng(1).normal(size=(8, 4)).astype("float32")
    layer.position_embeddings.assign(table)
    output = ops.convert_to_numpy(layer(np.zeros((2, 5, 4)), start_index=start))
    assert output.shape == (2, 5, 4)
    np.testing.assert_array_equal(output[0], table[start : start + 5])
    np.testing.assert_array_equal(output[1], table[start : start + 5])


def test_sequence_longer_than_sequence_length_at_build():
    with pytest.raises(ValueError, match=r"sequence_length=4.*length 5"):
        PositionEmbedding(sequence_length=4)(np.zeros((2, 5, 8), "float32"))


def test_sequence_longer_than_sequence_length_symbolic():
    with pytest.raises(ValueError, match=r"sequence_length=4.*length 5"):
        PositionEmbedding(sequence_length=4)(keras.Input((5, 8)))


def test_sequence_longer_than_sequence_length_after_build():
    layer = PositionEmbedding(sequence_length=4)
    layer(np.zeros((2, 3, 8), "float32"))
    with pytest.raises(ValueError, match=r"4 positions.*length 5"):
        layer(np.zeros((2, 5, 8), "float32"))


def test_start_index_past_the_last_position():
    layer = PositionEmbedding(sequence_length=8)
    layer(np.zeros((2, 5, 8), "float32"), start_index=3)  # Positions 3..7: fine.
    with pytest.raises(ValueError, match=r"length 5 starting at position 4"):
        layer(np.zeros((2, 5, 8), "float32"), start_index=4)


def test_invalid_sequence_length():
    with pytest.raises(ValueError, match="sequence_length=0"):
        PositionEmbedding(sequence_length=0)
