"""`LayerNorm` / `layer_norm` against NumPy and `keras.layers.LayerNormalization`."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import assert_same_sgd_step, gradient, run_layer_test

from keras_attn.layers import LayerNorm, layer_norm

EPSILON = 1e-6


def numpy_layer_norm(x, gamma, beta, epsilon=EPSILON):
    """Ba et al. (2016), in float64."""
    x = x.astype("float64")
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def numpy_layer_norm_input_gradient(x, gamma, upstream, epsilon=EPSILON):
    """`d sum(upstream * layer_norm(x)) / dx` by central differences, float64."""
    x = x.astype("float64")
    step = 1e-5
    grad = np.zeros_like(x)
    flat, flat_grad = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + step
        plus = (upstream * numpy_layer_norm(x, gamma, 0.0, epsilon)).sum()
        flat[i] = saved - step
        minus = (upstream * numpy_layer_norm(x, gamma, 0.0, epsilon)).sum()
        flat[i] = saved
        flat_grad[i] = (plus - minus) / (2 * step)
    return grad


def inputs(shape=(2, 3, 8), seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=shape) * 3 + 1).astype("float32")
    gamma = rng.normal(size=shape[-1:]).astype("float32")
    beta = rng.normal(size=shape[-1:]).astype("float32")
    upstream = rng.normal(size=shape).astype("float32")
    return x, gamma, beta, upstream


def test_layer_contract():
    run_layer_test(
        LayerNorm,
        dict(epsilon=EPSILON),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=2,
    )


def test_values_equal_the_numpy_reference():
    x, gamma, beta, _ = inputs()
    actual = ops.convert_to_numpy(layer_norm(x, gamma, beta, epsilon=EPSILON))
    np.testing.assert_allclose(
        actual, numpy_layer_norm(x, gamma, beta), rtol=1e-5, atol=1e-5
    )


def test_input_gradient_equals_finite_differences():
    x, gamma, beta, upstream = inputs()
    weights = ops.convert_to_tensor(upstream)  # not NumPy: torch keeps the graph
    actual = gradient(lambda t: layer_norm(t, gamma, beta, EPSILON) * weights, x)
    expected = numpy_layer_norm_input_gradient(x, gamma, upstream)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


def test_same_outputs_and_training_step_as_keras_layer_normalization():
    x, _, _, y = inputs(shape=(4, 6, 16), seed=1)
    ours = LayerNorm(epsilon=EPSILON)
    keras_norm = keras.layers.LayerNormalization(epsilon=EPSILON)
    for layer in (ours, keras_norm):
        layer.build(x.shape)
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=(16,)).astype("float32") for _ in range(2)]
    ours.set_weights(weights)
    keras_norm.set_weights(weights)
    assert [w.path.split("/")[-1] for w in ours.weights] == ["gamma", "beta"]
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x)),
        ops.convert_to_numpy(keras_norm(x)),
        rtol=1e-5,
        atol=1e-5,
    )
    # Gamma and beta gradients (through one SGD step), and the input's.
    assert_same_sgd_step(ours, keras_norm, x, y)
    weights = ops.convert_to_tensor(y)
    np.testing.assert_allclose(
        gradient(lambda t: ours(t) * weights, x),
        gradient(lambda t: keras_norm(t) * weights, x),
        rtol=1e-4,
        atol=1e-5,
    )


def test_bfloat16_inputs_are_normalized_in_float32():
    x, gamma, beta, _ = inputs()
    norm = LayerNorm(epsilon=EPSILON, dtype="mixed_bfloat16")
    norm.build(x.shape)
    norm.set_weights([gamma, beta])
    outputs = norm(ops.cast(x, "bfloat16"))
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(outputs, "float32")),
        numpy_layer_norm(
            ops.convert_to_numpy(ops.cast(ops.cast(x, "bfloat16"), "float32")),
            gamma,
            beta,
        ),
        rtol=2e-2,
        atol=2e-2,
    )


@pytest.mark.parametrize(
    "arguments",
    [dict(axis=(1, 2)), dict(rms_scaling=True), dict(scale=False)],
)
def test_other_arguments_fall_back_to_keras(arguments):
    x, _, _, _ = inputs()
    ours = LayerNorm(epsilon=EPSILON, **arguments)
    keras_norm = keras.layers.LayerNormalization(epsilon=EPSILON, **arguments)
    ours.build(x.shape)
    keras_norm.build(x.shape)
    keras_norm.set_weights(ours.get_weights())
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x)),
        ops.convert_to_numpy(keras_norm(x)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_without_center_same_outputs_and_training_step_as_keras():
    # `center=False` (the blocks' `use_bias=False`): no `beta`, the
    # written-out gradient with a zero offset.
    x, gamma, _, y = inputs(shape=(4, 6, 16), seed=3)
    ours = LayerNorm(epsilon=EPSILON, center=False)
    keras_norm = keras.layers.LayerNormalization(epsilon=EPSILON, center=False)
    for layer in (ours, keras_norm):
        layer.build(x.shape)
        layer.set_weights([np.random.default_rng(4).normal(size=(16,))])
    assert [w.path.split("/")[-1] for w in ours.weights] == ["gamma"]
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x)),
        numpy_layer_norm(x, ops.convert_to_numpy(ours.gamma), 0.0),
        rtol=1e-5,
        atol=1e-5,
    )
    assert_same_sgd_step(ours, keras_norm, x, y)
    weights = ops.convert_to_tensor(y)
    np.testing.assert_allclose(
        gradient(lambda t: ours(t) * weights, x),
        gradient(lambda t: keras_norm(t) * weights, x),
        rtol=1e-4,
        atol=1e-5,
    )


def test_block_norms_keep_keras_weight_names():
    # So the shipped presets, saved with `keras.layers.LayerNormalization`
    # norms, load (tests/zoo and tests/text load and score them).
    from keras_attn.layers import TransformerEncoderBlock

    block = TransformerEncoderBlock(num_heads=2, intermediate_dim=16)
    block.build((2, 5, 8))
    norms = [layer for layer in block._layers if isinstance(layer, LayerNorm)]
    assert len(norms) == 2
    for norm in norms:
        assert [w.path.split("/")[-1] for w in norm.weights] == ["gamma", "beta"]
