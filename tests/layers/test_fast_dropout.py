"""`FastDropout` / `fast_dropout`: one uniform draw decides two inputs."""

import keras
import numpy as np
import pytest
from layer_harness import run_layer_test

from keras_attn.layers import FastDropout, fast_dropout
from keras_attn.layers.fast_dropout import applied_dropout_rate, quantized_dropout_rate

# 2**21 inputs: the dropped fraction's standard deviation is below 2.1e-4.
SHAPE = (32, 256, 256)


def dropped_fraction_bound(rate, count):
    """Five standard deviations of a Bernoulli(rate) mean over `count` draws."""
    return 5 * np.sqrt(rate * (1 - rate) / count)


def test_layer_contract():
    run_layer_test(
        FastDropout,
        dict(rate=0.1, seed=1),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=0,
    )


@pytest.mark.parametrize(
    "rate, expected",
    [
        (0.1, 205 / 2048),
        (0.5, 0.5),
        (0.3, 614 / 2048),
        (0.01, None),
        (0.0, None),
        # Near 1 the keep probability decides: 0.99999 would round to 1.0.
        (0.99999, None),
        (0.999, None),
        (0.95, 1946 / 2048),
    ],
)
def test_quantized_rate(rate, expected):
    assert quantized_dropout_rate(rate) == expected


def test_applied_rate_is_exact_on_torch_only():
    expected = 0.1 if keras.backend.backend() == "torch" else 205 / 2048
    assert applied_dropout_rate(0.1) == expected
    assert applied_dropout_rate(0.01) == 0.01


def test_rate_and_scale_of_the_quantized_path():
    rate = applied_dropout_rate(0.1)
    y = keras.ops.convert_to_numpy(fast_dropout(keras.ops.ones(SHAPE), 0.1, seed=7))
    dropped = y == 0
    assert abs(dropped.mean() - rate) < dropped_fraction_bound(rate, y.size)
    # Kept inputs are scaled by 1 / (1 - rate used): the mean is preserved.
    np.testing.assert_allclose(y[~dropped], 1 / (1 - rate), rtol=1e-6)


def test_the_two_inputs_of_one_draw_are_independent():
    y = keras.ops.convert_to_numpy(fast_dropout(keras.ops.ones(SHAPE), 0.5, seed=3))
    half = SHAPE[-1] // 2
    # x[..., i] and x[..., i + half] share one uniform draw.
    first, second = (y[..., :half] == 0).ravel(), (y[..., half:] == 0).ravel()
    both = np.mean(first & second)
    assert abs(both - 0.25) < dropped_fraction_bound(0.25, first.size)
    assert abs(np.corrcoef(first, second)[0, 1]) < 5 / np.sqrt(first.size)


@pytest.mark.parametrize(
    "rate, shape",
    [(0.01, SHAPE), (0.1, (3, 5, 7))],
    ids=["rate-off-the-grid", "no-even-axis"],
)
def test_falls_back_to_exact_dropout(rate, shape):
    y = keras.ops.convert_to_numpy(fast_dropout(keras.ops.ones(shape), rate, seed=5))
    # keras.random.dropout scales by exactly 1 / (1 - rate).
    np.testing.assert_allclose(y[y != 0], 1 / (1 - rate), rtol=1e-6)
    assert abs((y == 0).mean() - rate) < dropped_fraction_bound(rate, y.size)


def test_splits_the_last_even_axis():
    # Attention weights `(batch, heads, query, key)` with an odd key length:
    # the draws are split along the query axis instead.
    shape = (16, 64, 64, 7)
    rate = applied_dropout_rate(0.5)
    y = keras.ops.convert_to_numpy(fast_dropout(keras.ops.ones(shape), 0.5, seed=4))
    dropped = y == 0
    assert abs(dropped.mean() - rate) < dropped_fraction_bound(rate, y.size)
    np.testing.assert_allclose(y[~dropped], 1 / (1 - rate), rtol=1e-6)
    first, second = dropped[:, :, :32].ravel(), dropped[:, :, 32:].ravel()
    assert abs(np.corrcoef(first, second)[0, 1]) < 5 / np.sqrt(first.size)


def test_identity_outside_training_and_random_in_training():
    layer = FastDropout(0.2, seed=0)
    x = keras.random.normal((4, 6, 8))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(layer(x)), keras.ops.convert_to_numpy(x)
    )
    first = keras.ops.convert_to_numpy(layer(x, training=True))
    second = keras.ops.convert_to_numpy(layer(x, training=True))
    assert np.any(first == 0) and np.any(first != second)


def test_same_seed_same_mask():
    x = keras.ops.ones((4, 6, 8))
    a, b = (
        keras.ops.convert_to_numpy(FastDropout(0.3, seed=11)(x, training=True))
        for _ in range(2)
    )
    np.testing.assert_array_equal(a, b)


def test_keeps_the_input_dtype():
    x = keras.ops.ones((4, 6, 8), dtype="bfloat16")
    y = fast_dropout(x, 0.5, seed=2)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    values = np.unique(keras.ops.convert_to_numpy(keras.ops.cast(y, "float32")))
    np.testing.assert_allclose(values, [0.0, 2.0])


@pytest.mark.parametrize("rate", [1.0, -0.1, 2])
def test_invalid_rate(rate):
    with pytest.raises(
        ValueError, match=rf"`rate` must be a float in \[0, 1\)\. Received: rate={rate}"
    ):
        FastDropout(rate)


def test_non_numeric_rate():
    with pytest.raises(TypeError, match="`rate` must be a float"):
        FastDropout("0.1")


@pytest.mark.parametrize("rate", [0.99999, 0.999])
def test_rates_near_one_are_exact(rate):
    # Regression: 0.99999 once rounded to 1.0 and divided by zero.
    x = keras.ops.ones((4, 64))
    y = keras.ops.convert_to_numpy(FastDropout(rate, seed=3)(x, training=True))
    assert np.all(np.isfinite(y))
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1.0 / (1.0 - rate), rtol=1e-4)
