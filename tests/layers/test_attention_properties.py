"""Property-based tests: attention equals equation (1) in NumPy for any shape
and mask hypothesis draws, and stays finite in half precision.

Derandomized, so a CI failure reproduces; shapes stay small so the examples
compile quickly on JAX. Each example is new shapes, which JAX compiles op by
op: when the backends run side by side (`scripts/test.sh`), each draws its
own third of the examples (`dealt_out`).
"""

import math
import os

import keras
import numpy as np
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from keras import ops
from test_scaled_dot_product_attention import reference_attention

from keras_attn.layers import scaled_dot_product_attention

MAX_EXAMPLES = 15


def dealt_out(max_examples):
    """Hypothesis settings for `max_examples` examples in all.

    A one-backend run draws all of them, derandomized. When several
    backends run side by side (`KERAS_ATTN_SPLIT_BACKENDS`, as
    `split_cases` deals out cases), each draws its share with a seed of its
    own, so the backends test different examples and each still reproduces.
    """
    derandomized = settings(max_examples=max_examples, deadline=None, derandomize=True)
    side_by_side = os.environ.get("KERAS_ATTN_SPLIT_BACKENDS", "").split()
    backend = keras.backend.backend()
    if len(side_by_side) < 2 or backend not in side_by_side:
        return derandomized
    share = settings(
        derandomized, max_examples=math.ceil(max_examples / len(side_by_side))
    )

    def decorate(test):
        return seed(side_by_side.index(backend))(share(test))

    return decorate


@st.composite
def attention_case(draw):
    batch = draw(st.integers(1, 3))
    query_length = draw(st.integers(1, 6))
    key_length = draw(st.integers(1, 6))
    heads = draw(st.integers(1, 3))
    key_dim = draw(st.sampled_from([1, 2, 4, 8]))
    seed = draw(st.integers(0, 2**16))
    # Any boolean mask: rows with no key at all included.
    mask_kind = draw(st.sampled_from(["none", "random", "all_masked"]))
    rng = np.random.default_rng(seed)
    shape = (batch, query_length, heads, key_dim)
    query = rng.normal(size=shape).astype("float32")
    key = rng.normal(size=(batch, key_length, heads, key_dim)).astype("float32")
    value = rng.normal(size=(batch, key_length, heads, key_dim)).astype("float32")
    # Large and small magnitudes: very peaked and very flat softmax rows.
    query *= draw(st.sampled_from([0.01, 1.0, 30.0]))
    mask = None
    if mask_kind == "random":
        mask = rng.random((batch, query_length, key_length)) < 0.6
    elif mask_kind == "all_masked":
        mask = np.zeros((batch, query_length, key_length), bool)
    return query, key, value, mask


@dealt_out(MAX_EXAMPLES)
@given(case=attention_case(), flash_attention=st.sampled_from([None, False]))
def test_attention_equals_numpy_reference(case, flash_attention):
    query, key, value, mask = case
    expected, expected_weights = reference_attention(query, key, value, mask)
    attended = scaled_dot_product_attention(
        query, key, value, mask=mask, flash_attention=flash_attention
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(attended), expected, rtol=1e-4, atol=1e-4
    )
    _, weights = scaled_dot_product_attention(
        query, key, value, mask=mask, return_attention_scores=True
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(weights), expected_weights, rtol=1e-4, atol=1e-5
    )


@dealt_out(MAX_EXAMPLES)
@given(case=attention_case(), dtype=st.sampled_from(["bfloat16", "float16"]))
def test_half_precision_attention_is_finite_and_close(case, dtype):
    query, key, value, mask = case
    expected, _ = reference_attention(query, key, value, mask)
    half = [ops.cast(t, dtype) for t in (query, key, value)]
    attended = ops.convert_to_numpy(
        ops.cast(scaled_dot_product_attention(*half, mask=mask), "float32")
    )
    assert np.isfinite(attended).all()
    # Inputs rounded to 8 (bfloat16) or 11 (float16) mantissa bits.
    tolerance = 0.1 if dtype == "bfloat16" else 0.02
    scale = np.maximum(1.0, np.abs(expected).max())
    np.testing.assert_allclose(attended, expected, atol=tolerance * scale)
