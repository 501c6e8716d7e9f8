"""`FeedForward`: FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3)."""

import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import FeedForward


def test_layer_contract():
    run_layer_test(
        FeedForward,
        dict(intermediate_dim=16, dropout=0.1),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=4,
    )


def test_layer_contract_without_bias():
    run_layer_test(
        FeedForward,
        dict(intermediate_dim=16, use_bias=False, activation="gelu"),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=2,
        run_mixed_precision=False,
        run_fit=False,
    )


def test_matches_numpy_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = FeedForward(intermediate_dim=16, bias_initializer="random_normal")
    layer.build(x.shape)
    w1, b1 = (ops.convert_to_numpy(w) for w in layer.intermediate_dense.weights)
    w2, b2 = (ops.convert_to_numpy(w) for w in layer.output_dense.weights)
    assert np.any(b1 != 0)
    expected = np.maximum(0.0, x @ w1 + b1) @ w2 + b2
    output = ops.convert_to_numpy(layer(x, training=False))
    np.testing.assert_allclose(output, expected, atol=1e-5)


@pytest.mark.parametrize("dropout", [1.0, -0.5, 2])
def test_invalid_dropout(dropout):
    with pytest.raises(ValueError, match=f"dropout={dropout}"):
        FeedForward(intermediate_dim=16, dropout=dropout)


def test_invalid_intermediate_dim():
    with pytest.raises(ValueError, match="intermediate_dim=0"):
        FeedForward(intermediate_dim=0)
