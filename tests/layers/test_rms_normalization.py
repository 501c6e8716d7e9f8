"""`RMSNormalization` against NumPy and `keras.layers.RMSNormalization`."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import assert_same_sgd_step, run_layer_test

from keras_attn.layers import RMSNormalization


def numpy_rms_normalization(x, scale, axis, epsilon=1e-6):
    """Zhang and Sennrich (2019), equation 4, in float64; `scale` is already
    shaped to broadcast against `x`.
    """
    x = np.asarray(x, "float64")
    mean_square = np.mean(x**2, axis=tuple(np.atleast_1d(axis)), keepdims=True)
    return x / np.sqrt(mean_square + epsilon) * scale


def random(shape, seed=0):
    return (np.random.default_rng(seed).normal(size=shape) * 3 + 1).astype("float32")


def to_numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize(
    "axis, broadcast_shape",
    [(-1, (1, 1, 5)), ([-2, -1], (1, 4, 5)), (1, (1, 4, 1)), ([2, 0], (3, 1, 5))],
)
def test_values_equal_the_numpy_reference(axis, broadcast_shape):
    x = random((3, 4, 5))
    layer = RMSNormalization(axis=axis, epsilon=1e-5)
    layer.build(x.shape)
    scale = random(layer.scale.shape, seed=1)
    layer.scale.assign(scale)
    expected = numpy_rms_normalization(
        x, scale.reshape(broadcast_shape), axis, epsilon=1e-5
    )
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)


def test_negative_axis_follows_the_rank_of_each_call():
    layer = RMSNormalization()
    layer.build((2, 2, 2))
    x = random((5, 2, 2, 2))
    expected = numpy_rms_normalization(x, np.ones(2), -1)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, [-2, -1], [-1, -2]])
def test_same_outputs_as_keras_rms_normalization(axis):
    x = random((2, 3, 4))
    ours, peer = RMSNormalization(axis=axis), keras.layers.RMSNormalization(axis=axis)
    for layer in (ours, peer):
        layer.build(x.shape)
    peer.set_weights([random(peer.scale.shape, seed=1)])
    ours.set_weights(peer.get_weights())
    np.testing.assert_allclose(to_numpy(ours(x)), to_numpy(peer(x)), atol=1e-6)


def test_same_training_step_as_keras_rms_normalization():
    x, y = random((4, 3, 8)), random((4, 3, 8), seed=2)
    ours, peer = RMSNormalization(), keras.layers.RMSNormalization()
    assert_same_sgd_step(ours, peer, x, y)


@pytest.mark.parametrize("axis", [-1, [-2, -1]])
def test_layer_contract(axis):
    run_layer_test(
        RMSNormalization,
        {"axis": axis, "epsilon": 1e-5},
        random((2, 3, 4)),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=1,
    )


def test_float16_policy_computes_in_float32():
    # 300 ** 2 overflows float16 (largest 65504): the mean square must be
    # taken in float32.
    layer = RMSNormalization(dtype="mixed_float16")
    outputs = layer(np.full((2, 8), 300.0, "float32"))
    assert keras.backend.standardize_dtype(outputs.dtype) == "float16"
    assert keras.backend.standardize_dtype(layer.scale.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(outputs), np.ones((2, 8)), rtol=1e-3)


def test_passes_the_mask_through():
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    normalized = RMSNormalization()(embedded)
    mask = getattr(normalized, "_keras_mask", None)
    assert mask is not None and tuple(mask.shape) == (None, None)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RMSNormalization(axis="last"), "axis='last'"),
        (lambda: RMSNormalization(axis=[]), "axis=[]"),
        (lambda: RMSNormalization(epsilon=-1.0), "epsilon=-1.0"),
        (lambda: RMSNormalization(axis=3)(random((2, 3))), "axis=3"),
        (lambda: RMSNormalization(axis=[1, -1])(random((2, 3))), "axis=[1, -1]"),
        (
            lambda: RMSNormalization()(keras.Input((3, None))),
            "inputs.shape=(None, 3, None)",
        ),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert message in str(error.value)
