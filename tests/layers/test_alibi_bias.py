"""`AlibiBias` / `alibi_slopes` / `alibi_bias` against NumPy and keras-hub."""

import math

import keras_hub
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import AlibiBias, alibi_bias, alibi_slopes


def numpy_slopes(num_heads, alibi_bias_max=8):
    """Press et al. (2021), section 3: `2 ** (-alibi_bias_max * h / n)`,
    `h = 1..n`, for `n` a power of two; otherwise the `m` slopes of the power
    of two `m` below `n`, then the odd-numbered slopes of `2m` heads.
    """
    below = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-alibi_bias_max * h / below) for h in range(1, below + 1)]
    odd = [2.0 ** (-alibi_bias_max * h / (2 * below)) for h in range(1, 2 * below, 2)]
    return np.array(slopes + odd[: num_heads - below])


def numpy_alibi_bias(
    num_heads, query_length, key_length, query_offset=0, bidirectional=False
):
    """`-slope * (query_position - key_position)`, `(1, heads, query, key)`."""
    query = np.arange(query_length)[:, None] + query_offset
    key = np.arange(key_length)[None, :]
    distance = np.abs(query - key) if bidirectional else query - key
    return -numpy_slopes(num_heads)[None, :, None, None] * distance[None, None]


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    return np.exp(x) / np.exp(x).sum(-1, keepdims=True)


def to_numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize("alibi_bias_max", [8, 6, 12])
def test_slopes_equal_the_paper_for_every_head_count(alibi_bias_max):
    for num_heads in range(1, 18):
        np.testing.assert_allclose(
            to_numpy(alibi_slopes(num_heads, alibi_bias_max)),
            numpy_slopes(num_heads, alibi_bias_max),
            rtol=1e-6,
        )


@pytest.mark.parametrize(
    "num_heads, query_length, key_length, query_offset, bidirectional",
    [(4, 5, 5, 0, False), (6, 1, 7, 6, False), (3, 2, 6, 3, False), (5, 4, 4, 0, True)],
)
def test_bias_equals_the_numpy_reference(
    num_heads, query_length, key_length, query_offset, bidirectional
):
    actual = alibi_bias(
        num_heads,
        query_length,
        key_length,
        query_offset=ops.convert_to_tensor(query_offset),
        bidirectional=bidirectional,
    )
    expected = numpy_alibi_bias(
        num_heads, query_length, key_length, query_offset, bidirectional
    )
    np.testing.assert_allclose(to_numpy(actual), expected, rtol=1e-6, atol=1e-7)


def test_cached_rows_equal_the_full_bias():
    full = to_numpy(alibi_bias(6, 5, 5))
    for index in range(5):
        step = alibi_bias(6, query_length=1, key_length=5, query_offset=index)
        np.testing.assert_array_equal(to_numpy(step), full[:, :, index : index + 1])


@pytest.mark.parametrize("num_heads", [1, 3, 8, 12])
@pytest.mark.parametrize("alibi_bias_max", [8, 5])
def test_layer_equals_keras_hub(num_heads, alibi_bias_max):
    scores = np.random.default_rng(num_heads).normal(size=(2, num_heads, 3, 7))
    scores = scores.astype("float32")
    ours = AlibiBias(alibi_bias_max=alibi_bias_max)
    peer = keras_hub.layers.AlibiBias(alibi_bias_max=alibi_bias_max)
    np.testing.assert_array_equal(to_numpy(ours(scores)), to_numpy(peer(scores)))
    assert ours.get_config() == peer.get_config() | {"name": ours.name}


def test_layer_and_function_give_the_same_attention_weights():
    # The layer's bias is the paper's for the last query; softmax ignores
    # the per-row difference.
    scores = np.random.default_rng(0).normal(size=(2, 5, 6, 6)).astype("float32")
    from_layer = to_numpy(AlibiBias()(scores))
    from_function = scores + to_numpy(alibi_bias(5, 6, 6))
    np.testing.assert_allclose(
        softmax(from_layer), softmax(from_function), rtol=1e-5, atol=1e-6
    )


def test_layer_contract():
    run_layer_test(
        AlibiBias,
        {"alibi_bias_max": 8},
        np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype("float32"),
        expected_output_shape=(2, 3, 4, 5),
        expected_num_trainable_weights=0,
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AlibiBias(alibi_bias_max=0), "alibi_bias_max=0"),
        (lambda: AlibiBias()(np.zeros((2, 3, 4), "float32")), "shape=(2, 3, 4)"),
        (lambda: alibi_slopes(0), "num_heads=0"),
        (lambda: alibi_bias(2, 0, 3), "query_length=0"),
        (lambda: alibi_bias(2, 3, 3, bidirectional=1), "bidirectional=1"),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert message in str(error.value)
