"""`VocabularyProjection`: `keras.layers.Dense` computed as one 2-D product."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import assert_same_sgd_step, run_layer_test

from keras_attn.layers import VocabularyProjection
from keras_attn.layers._last_axis_matmul import last_axis_matmul


def test_layer_contract():
    run_layer_test(
        VocabularyProjection,
        dict(units=12),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 12),
        expected_num_trainable_weights=2,
    )


def _pair(units, input_dim, **kwargs):
    """A `VocabularyProjection` and a `keras.layers.Dense` with equal weights."""
    ours = VocabularyProjection(units, bias_initializer="random_normal", **kwargs)
    reference = keras.layers.Dense(units, **kwargs)
    ours.build((None, input_dim))
    reference.build((None, input_dim))
    reference.set_weights(ours.get_weights())
    assert np.any(ours.get_weights()[-1] != 0)
    return ours, reference


@pytest.mark.parametrize("shape", [(6, 8), (2, 5, 8), (2, 3, 4, 8)])
def test_matches_keras_dense(shape):
    x = np.random.default_rng(1).normal(size=shape).astype("float32")
    ours, reference = _pair(7, 8, activation="relu")
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x)),
        ops.convert_to_numpy(reference(x)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_training_step_matches_keras_dense():
    """Same weights, one SGD step on the same batch: the same new weights."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 5, 8)).astype("float32")
    y = rng.normal(size=(4, 5, 7)).astype("float32")
    assert_same_sgd_step(*_pair(7, 8), x, y)


def test_lora_matches_keras_dense():
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    ours, reference = _pair(7, 8)
    for layer in (ours, reference):
        layer.enable_lora(2)
    rng = np.random.default_rng(4)
    # Non-zero LoRA factors (B starts at zero), the same in both layers.
    values = [rng.normal(size=(8, 2)), rng.normal(size=(2, 7))]
    for layer in (ours, reference):
        layer.lora_kernel_a.assign(values[0].astype("float32"))
        layer.lora_kernel_b.assign(values[1].astype("float32"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x)),
        ops.convert_to_numpy(reference(x)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_last_axis_matmul_matches_numpy():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    kernel = rng.normal(size=(8, 6)).astype("float32")
    bias = rng.normal(size=(6,)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(last_axis_matmul(x, kernel, bias)),
        x @ kernel + bias,
        rtol=1e-5,
        atol=1e-5,
    )


def test_sequences_never_run_the_3d_product(monkeypatch):
    """Rank-3 inputs take the 2-D path; rank-2 inputs run as `Dense`."""
    layer, _ = _pair(7, 8)

    def dense_call(self, inputs, training=None):
        raise AssertionError("Dense.call ran")

    monkeypatch.setattr(keras.layers.Dense, "call", dense_call)
    layer(np.ones((2, 5, 8), "float32"))
    with pytest.raises(AssertionError, match="Dense.call ran"):
        layer(np.ones((2, 8), "float32"))
