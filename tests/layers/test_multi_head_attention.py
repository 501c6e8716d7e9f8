"""`MultiHeadAttention`: layer contract, `keras.layers.MultiHeadAttention`
with copied weights, Keras masks, the worked example, masked rows, errors."""

import warnings

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import gradient, run_layer_test

from keras_attn.layers import MultiHeadAttention

BATCH, QUERY_LEN, KEY_LEN, DIM, HEADS, KEY_DIM = 2, 5, 4, 8, 2, 4


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


QUERY_MASK = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
VALUE_MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)


# --- Layer contract -----------------------------------------------------------


def test_layer_self_attention():
    x = normal(BATCH, QUERY_LEN, DIM)
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, key_dim=KEY_DIM),
        {"query": x, "value": x},
        expected_output_shape=(BATCH, QUERY_LEN, DIM),
        expected_num_trainable_weights=8,
        run_mixed_precision=False,
        run_fit=False,
    )


def test_layer_cross_attention_with_masks_and_output_shape():
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, key_dim=KEY_DIM, value_dim=3, output_shape=(6,)),
        {
            "query": normal(BATCH, QUERY_LEN, DIM),
            "value": normal(BATCH, KEY_LEN, DIM, seed=1),
            "key": normal(BATCH, KEY_LEN, DIM, seed=2),
            "query_mask": QUERY_MASK,
            "value_mask": VALUE_MASK,
        },
        expected_output_shape=(BATCH, QUERY_LEN, 6),
        expected_num_trainable_weights=8,
    )


def test_layer_causal_no_bias_explicit_path_with_dropout():
    x = normal(BATCH, QUERY_LEN, DIM)
    run_layer_test(
        MultiHeadAttention,
        dict(
            num_heads=HEADS,
            key_dim=KEY_DIM,
            use_bias=False,
            flash_attention=False,
            dropout=0.1,
        ),
        {"query": x, "value": x},
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(BATCH, QUERY_LEN, DIM),
        expected_num_trainable_weights=4,
        run_mixed_precision=False,
    )


def test_symbolic_call_returns_scores():
    query = keras.Input((QUERY_LEN, DIM))
    value = keras.Input((KEY_LEN, DIM))
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    output, scores = layer(query, value, return_attention_scores=True)
    assert tuple(output.shape) == (None, QUERY_LEN, DIM)
    assert tuple(scores.shape) == (None, HEADS, QUERY_LEN, KEY_LEN)
    model = keras.Model([query, value], [output, scores])
    q, v = normal(BATCH, QUERY_LEN, DIM), normal(BATCH, KEY_LEN, DIM, seed=1)
    eager_output, eager_scores = layer(q, v, return_attention_scores=True)
    model_output, model_scores = model([q, v])
    np.testing.assert_allclose(model_output, eager_output, atol=1e-6)
    np.testing.assert_allclose(model_scores, eager_scores, atol=1e-6)


# --- Against keras.layers.MultiHeadAttention with copied weights ------------


def copy_weights(source, target):
    """Copies weights between layers whose sub-layers share names."""
    by_name = {"/".join(w.path.split("/")[-2:]): w for w in source.weights}
    assert len(by_name) == len(target.weights)
    for weight in target.weights:
        weight.assign(by_name["/".join(weight.path.split("/")[-2:])])


def keras_and_ours(seed=0, **kwargs):
    """A built `keras.layers.MultiHeadAttention` with random weights (biases
    included) and our layer with the same weights."""
    theirs = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    ours = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM, **kwargs)
    # Built, not called: an eager call compiles every op again on JAX.
    for layer in (theirs, ours):
        layer.build((1, QUERY_LEN, DIM), (1, KEY_LEN, DIM))
    rng = np.random.default_rng(seed)
    for weight in theirs.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
    copy_weights(theirs, ours)
    return theirs, ours


def parity_case(case):
    """Inputs, our mask arguments, and the same mask as NumPy `(B, T, S)`."""
    query = normal(BATCH, QUERY_LEN, DIM, seed=3)
    source = normal(BATCH, KEY_LEN, DIM, seed=4)
    causal = np.tril(np.ones((QUERY_LEN, QUERY_LEN), bool))
    explicit = np.random.default_rng(5).random((BATCH, QUERY_LEN, KEY_LEN)) > 0.4
    full = np.ones((BATCH, QUERY_LEN, KEY_LEN), bool)
    if case == "self":
        return query, query, {}, np.ones((BATCH, QUERY_LEN, QUERY_LEN), bool)
    if case == "cross":
        return query, source, {}, full
    if case == "separate_key":
        key = normal(BATCH, KEY_LEN, DIM, seed=6)
        return query, source, {"key": key}, full
    if case == "padding":
        mask = QUERY_MASK[:, :, None] & VALUE_MASK[:, None, :]
        return query, source, {"query_mask": QUERY_MASK, "value_mask": VALUE_MASK}, mask
    if case == "causal":
        return (
            query,
            query,
            {"use_causal_mask": True},
            np.broadcast_to(causal, (BATCH, QUERY_LEN, QUERY_LEN)),
        )
    if case == "attention_mask":
        return query, source, {"attention_mask": explicit}, explicit
    if case == "padding_and_causal":
        mask = QUERY_MASK[:, :, None] & QUERY_MASK[:, None, :] & causal
        kwargs = {
            "query_mask": QUERY_MASK,
            "value_mask": QUERY_MASK,
            "use_causal_mask": True,
        }
        return query, query, kwargs, mask
    raise ValueError(case)


CASES = [
    "self",
    "cross",
    "separate_key",
    "padding",
    "causal",
    "attention_mask",
    "padding_and_causal",
]


# Fourteen cases: side by side, each backend runs its share (`split_cases`),
# both paths among them.
@pytest.mark.split_cases
@pytest.mark.parametrize("use_fused", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_matches_keras_multi_head_attention(case, use_fused):
    theirs, ours = keras_and_ours(flash_attention=None if use_fused else False)
    query, value, our_kwargs, mask = parity_case(case)
    # Keras gets the merged mask as one explicit `attention_mask` (its own
    # `query_mask` argument is overwritten by the query's Keras mask).
    expected, expected_scores = theirs(
        query,
        value,
        key=our_kwargs.get("key"),
        attention_mask=mask,
        return_attention_scores=True,
    )
    expected, expected_scores = np.asarray(expected), np.asarray(expected_scores)
    output = ops.convert_to_numpy(ours(query, value, **our_kwargs))
    output_2, scores = ours(query, value, return_attention_scores=True, **our_kwargs)
    output_2, scores = ops.convert_to_numpy(output_2), ops.convert_to_numpy(scores)

    # Keras averages uniformly over a fully masked row; we attend to nothing.
    valid = mask.any(axis=-1)  # (batch, query_length)
    assert valid.any()
    for out in (output, output_2):
        np.testing.assert_allclose(out[valid], expected[valid], atol=1e-5)
    np.testing.assert_allclose(
        scores.transpose(0, 2, 1, 3)[valid],
        expected_scores.transpose(0, 2, 1, 3)[valid],
        atol=1e-5,
    )
    bias = ops.convert_to_numpy(ours.output_dense.bias)
    for out in (output, output_2):
        np.testing.assert_allclose(
            out[~valid], np.broadcast_to(bias, out[~valid].shape)
        )
    np.testing.assert_array_equal(scores.transpose(0, 2, 1, 3)[~valid], 0.0)


def test_keras_masks_from_embedding_are_honoured():
    source_ids = np.array([[3, 1, 2, 0], [4, 2, 0, 0]], "int32")
    target_ids = np.array([[1, 2, 3, 4, 0], [2, 5, 1, 0, 0]], "int32")
    embedding = keras.layers.Embedding(8, DIM, mask_zero=True)
    theirs, ours = keras_and_ours()

    source, target = embedding(source_ids), embedding(target_ids)
    from_keras_masks = ops.convert_to_numpy(ours(target, source))
    explicit = ops.convert_to_numpy(
        ours(
            target,
            source,
            query_mask=target_ids != 0,
            value_mask=source_ids != 0,
        )
    )
    np.testing.assert_allclose(from_keras_masks, explicit, atol=1e-6)

    # The masks matter: without them (plain copies of the same values) the
    # valid rows change.
    unmasked = ops.convert_to_numpy(
        ours(
            ops.convert_to_tensor(ops.convert_to_numpy(target)),
            ops.convert_to_tensor(ops.convert_to_numpy(source)),
        )
    )
    valid = target_ids != 0
    assert np.abs(unmasked[valid] - explicit[valid]).max() > 1e-3

    # Keras's layer, given the same mask-carrying inputs, agrees on valid rows.
    expected = np.asarray(theirs(target, source))
    np.testing.assert_allclose(from_keras_masks[valid], expected[valid], atol=1e-5)


def test_keras_masks_do_not_warn():
    ids = np.array([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]], "int32")
    hidden = keras.layers.Embedding(8, DIM, mask_zero=True)(ids)
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer(hidden, hidden)
    assert not [str(w.message) for w in caught if "mask" in str(w.message)]


def test_keras_masks_propagate_in_a_functional_model():
    ids = np.array([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]], "int32")
    tokens = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(8, DIM, mask_zero=True)
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    hidden = embedding(tokens)
    model = keras.Model(tokens, layer(hidden, hidden))
    from_model = ops.convert_to_numpy(model(ids))
    hidden = ops.convert_to_numpy(embedding(ids))
    explicit = ops.convert_to_numpy(
        layer(hidden, hidden, query_mask=ids != 0, value_mask=ids != 0)
    )
    np.testing.assert_allclose(from_model, explicit, atol=1e-6)


# --- The worked "Hello World" example ---------------------------------------


def test_hello_world_example():
    x = np.array([[1, 0, 1, 0], [0, 1, 0, 1]], "float64")
    w_q = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [0.1, 0.2, 0.3]])
    w_k = np.array([[0.2, 0.3, 0.4], [0.5, 0.6, 0.7], [0.8, 0.9, 0.1], [0.2, 0.3, 0.4]])
    w_v = np.array([[0.3, 0.4, 0.5], [0.6, 0.7, 0.8], [0.9, 0.1, 0.2], [0.3, 0.4, 0.5]])
    # Independent reference: equation (1) in NumPy.
    scores = (x @ w_q) @ (x @ w_k).T / np.sqrt(3.0)
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    expected = weights @ (x @ w_v)

    layer = MultiHeadAttention(num_heads=1, key_dim=3, use_bias=False, output_shape=3)
    inputs = x[None].astype("float32")  # (1, 2, 4)
    layer(inputs, inputs)
    layer.query_dense.kernel.assign(w_q[:, None, :])  # (4, 1, 3)
    layer.key_dense.kernel.assign(w_k[:, None, :])
    layer.value_dense.kernel.assign(w_v[:, None, :])
    # The identity output projection shows the attended values themselves.
    layer.output_dense.kernel.assign(np.eye(3)[None])  # (1, 3, 3)
    output, attention = layer(inputs, inputs, return_attention_scores=True)
    np.testing.assert_allclose(ops.convert_to_numpy(output)[0], expected, atol=1e-6)
    np.testing.assert_allclose(
        ops.convert_to_numpy(attention)[0, 0], weights, atol=1e-6
    )
    # The notes' rounded values that are right (see
    # test_scaled_dot_product_attention.py for the ones that are not).
    np.testing.assert_allclose(
        ops.convert_to_numpy(attention)[0, 0, 0], [0.474, 0.526], atol=2e-3
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(output)[0, :, 0], [1.042, 1.044], atol=2e-3
    )


# --- Fully masked query rows -------------------------------------------------


# Every dtype and path at the function level is in
# test_scaled_dot_product_attention.py; here each dtype once through the layer.
@pytest.mark.parametrize(
    "dtype, use_fused",
    [("float32", True), ("float32", False), ("bfloat16", True), ("float16", False)],
)
def test_fully_masked_query_gives_bias_and_finite_gradient(dtype, use_fused):
    layer = MultiHeadAttention(
        num_heads=HEADS,
        key_dim=KEY_DIM,
        flash_attention=None if use_fused else False,
        bias_initializer="ones",
        dtype=dtype,
    )
    query = ops.convert_to_tensor(normal(BATCH, QUERY_LEN, DIM), dtype)
    value = ops.convert_to_tensor(normal(BATCH, KEY_LEN, DIM, seed=1), dtype)
    value_mask = np.ones((BATCH, KEY_LEN), bool)
    value_mask[1] = False  # Sentence 1 has no key at all.

    def attend(q):
        return layer(q, value, query_mask=QUERY_MASK, value_mask=value_mask)

    output = attend(query)
    assert keras.backend.standardize_dtype(output.dtype) == dtype
    output = ops.convert_to_numpy(ops.cast(output, "float32"))
    assert np.all(np.isfinite(output))
    # No key to attend: attended values are zero, the output is the bias.
    np.testing.assert_array_equal(output[~QUERY_MASK], 1.0)
    np.testing.assert_array_equal(output[1], 1.0)
    assert np.all(output[0, :4] != 1.0)
    grad = gradient(attend, query, jit=dtype != "float16")
    assert np.all(np.isfinite(grad))
    assert np.any(grad[0] != 0.0)


# --- Argument validation -------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_heads=0, key_dim=4), ValueError, "num_heads=0"),
        (dict(num_heads=-2, key_dim=4), ValueError, "num_heads=-2"),
        (dict(num_heads=2, key_dim=0), ValueError, "key_dim=0"),
        (dict(num_heads=2.0, key_dim=4), ValueError, "argument `num_heads`"),
        (dict(num_heads=True, key_dim=4), ValueError, "num_heads=True"),
        (dict(num_heads=1.5, key_dim=4), ValueError, "num_heads=1.5"),
        # Not a number at all: a TypeError, as from the blocks.
        (dict(num_heads="2", key_dim=4), TypeError, "num_heads='2' of type str"),
        (dict(num_heads=2, key_dim=None), TypeError, "key_dim=None"),
        (dict(num_heads=2, key_dim=4, value_dim=[4]), TypeError, "value_dim"),
        (dict(num_heads=2, key_dim=4, value_dim=0), ValueError, "value_dim=0"),
        (dict(num_heads=2, key_dim=4, output_shape=-1), ValueError, "output_shape=-1"),
        (
            dict(num_heads=2, key_dim=4, output_shape=8.0),
            ValueError,
            "Invalid `output_shape`",
        ),
        (
            dict(num_heads=2, key_dim=4, attention_axes="1"),
            ValueError,
            "attention_axes",
        ),
        (
            dict(num_heads=2, key_dim=4, sliding_window=0),
            ValueError,
            "sliding_window=0",
        ),
        (
            dict(num_heads=2, key_dim=4, flash_attention=True, dropout=0.1),
            ValueError,
            "Dropout is not supported when flash attention",
        ),
        (dict(num_heads=2, key_dim=4, dropout=1.0), ValueError, "dropout=1.0"),
        (dict(num_heads=2, key_dim=4, dropout=-0.1), ValueError, "dropout=-0.1"),
    ],
)
def test_invalid_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(**kwargs)


@pytest.mark.parametrize(
    "mask_kwargs, match",
    [
        (
            {"query_mask": np.ones((BATCH, QUERY_LEN + 1), bool)},
            r"query_mask.*\(2, 6\)",
        ),
        ({"value_mask": np.ones((BATCH, KEY_LEN - 1), bool)}, r"value_mask.*\(2, 3\)"),
        (
            {"attention_mask": np.ones((BATCH, QUERY_LEN, KEY_LEN + 1), bool)},
            r"attention_mask.*\(2, 5, 5\)",
        ),
        (
            {"query_mask": np.ones((BATCH, QUERY_LEN, 1), bool)},
            r"query_mask.*\(2, 5, 1\)",
        ),
    ],
)
def test_mask_that_cannot_broadcast(mask_kwargs, match):
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    query, value = normal(BATCH, QUERY_LEN, DIM), normal(BATCH, KEY_LEN, DIM)
    with pytest.raises(ValueError, match=match):
        layer(query, value, **mask_kwargs)


def test_input_without_feature_axis():
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    with pytest.raises(ValueError, match=r"query\.shape=\(2, 5\)"):
        layer(np.zeros((BATCH, QUERY_LEN), "float32"), normal(BATCH, KEY_LEN, DIM))
