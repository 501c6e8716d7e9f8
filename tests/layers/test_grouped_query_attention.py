"""Grouped-query attention: `MultiHeadAttention(num_key_value_heads=...)` and
`GroupedQueryAttention`, against NumPy, against Keras's
`keras.layers.GroupQueryAttention` with copied weights, against multi-head
attention with repeated key/value kernels, on the fused and explicit paths."""

import json

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import GroupedQueryAttention, MultiHeadAttention
from keras_attn.layers.attention.attention_core import compute_attention

BATCH, QUERY_LEN, KEY_LEN, DIM, HEADS, HEAD_DIM = 2, 5, 6, 8, 4, 4


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def randomize(layer, seed=0):
    """Random weights, biases included (zeros would hide a wrong bias axis)."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))


def numpy_attention(layer, query, value, mask=None):
    """Grouped-query attention in NumPy from the layer's weights, keys and
    values repeated for each query head's group; fully masked rows zero."""
    w = {
        "/".join(v.path.split("/")[-2:]): ops.convert_to_numpy(v) for v in layer.weights
    }
    q = np.einsum("btm,mhd->bthd", query, w["query/kernel"]) + w["query/bias"]
    k = np.einsum("bsm,mhd->bshd", value, w["key/kernel"]) + w["key/bias"]
    v = np.einsum("bsm,mhd->bshd", value, w["value/kernel"]) + w["value/bias"]
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    if mask is not None:
        mask = np.broadcast_to(mask if mask.ndim == 4 else mask[:, None], scores.shape)
        scores = np.where(mask, scores, -1e9)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    if mask is not None:
        weights = np.where(mask, weights, 0.0)
    attended = np.einsum("bhts,bshd->bthd", weights, v)
    output = np.einsum("bthd,hdm->btm", attended, w["attention_output/kernel"])
    return output + w["attention_output/bias"], weights


def masks():
    """`{name: boolean mask (batch, [heads,] query_len, key_len)}`; the
    second sequence's last query row is fully masked."""
    rng = np.random.default_rng(7)
    padding = np.arange(KEY_LEN)[None, None] < np.array([6, 3])[:, None, None]
    rows = np.arange(QUERY_LEN)[None, :, None] < np.array([5, 4])[:, None, None]
    per_head = rng.random((BATCH, HEADS, QUERY_LEN, KEY_LEN)) > 0.4
    per_head[..., 0] = True
    return {
        "none": None,
        "padding": np.broadcast_to(padding & rows, (BATCH, QUERY_LEN, KEY_LEN)),
        "causal": np.broadcast_to(
            np.tril(np.ones((QUERY_LEN, KEY_LEN), bool)), (BATCH, QUERY_LEN, KEY_LEN)
        ),
        "per_head": per_head,
    }


# --- Layer contract -----------------------------------------------------------


@pytest.mark.parametrize("key_value_heads", [1, 2])
def test_layer_contract_multi_head_attention(key_value_heads):
    x = normal(BATCH, QUERY_LEN, DIM)
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, key_dim=HEAD_DIM, num_key_value_heads=key_value_heads),
        {"query": x, "value": x},
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(BATCH, QUERY_LEN, DIM),
        expected_num_trainable_weights=8,
    )


def test_layer_contract_grouped_query_attention():
    run_layer_test(
        GroupedQueryAttention,
        dict(head_dim=HEAD_DIM, num_query_heads=HEADS, num_key_value_heads=2),
        {
            "query": normal(BATCH, QUERY_LEN, DIM),
            "value": normal(BATCH, KEY_LEN, DIM, seed=1),
            "value_mask": masks()["padding"][:, 0],
        },
        expected_output_shape=(BATCH, QUERY_LEN, DIM),
        expected_num_trainable_weights=8,
    )


def test_key_value_projections_have_the_key_value_heads():
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM, num_key_value_heads=2)
    layer.build((None, QUERY_LEN, DIM), (None, KEY_LEN, DIM))
    assert layer.num_key_value_heads == 2
    assert tuple(layer.query_dense.kernel.shape) == (DIM, HEADS, HEAD_DIM)
    assert tuple(layer.key_dense.kernel.shape) == (DIM, 2, HEAD_DIM)
    assert tuple(layer.value_dense.kernel.shape) == (DIM, 2, HEAD_DIM)
    keys, values = layer.compute_key_value(normal(BATCH, KEY_LEN, DIM))
    assert tuple(keys.shape) == tuple(values.shape) == (BATCH, KEY_LEN, 2, HEAD_DIM)
    assert MultiHeadAttention(num_heads=HEADS, key_dim=2).num_key_value_heads == HEADS


# --- Numbers ------------------------------------------------------------------


# Sixteen cases: side by side, each backend runs its share (`split_cases`),
# both paths and both head counts among them.
@pytest.mark.split_cases
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "per_head"])
@pytest.mark.parametrize("key_value_heads", [1, 2])
@pytest.mark.parametrize("flash_attention", [None, False])
def test_matches_numpy(mask_kind, key_value_heads, flash_attention):
    layer = MultiHeadAttention(
        num_heads=HEADS,
        key_dim=HEAD_DIM,
        num_key_value_heads=key_value_heads,
        flash_attention=flash_attention,
    )
    query, value = normal(BATCH, QUERY_LEN, DIM), normal(BATCH, KEY_LEN, DIM, seed=1)
    layer(query, value)
    randomize(layer)
    mask = masks()[mask_kind]
    expected, expected_weights = numpy_attention(layer, query, value, mask)
    output = layer(query, value, attention_mask=mask)
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=1e-5)
    if flash_attention is False:
        _, weights = layer(
            query, value, attention_mask=mask, return_attention_scores=True
        )
        np.testing.assert_allclose(weights, expected_weights, atol=1e-6)


def keras_and_ours(key_value_heads, **kwargs):
    """`keras.layers.GroupQueryAttention` with random weights, and ours
    with the same weights (copied in order: the sub-layers match)."""
    arguments = dict(
        head_dim=HEAD_DIM, num_query_heads=HEADS, num_key_value_heads=key_value_heads
    )
    theirs = keras.layers.GroupQueryAttention(**arguments, **kwargs)
    ours = GroupedQueryAttention(**arguments, **kwargs)
    # Built, not called: an eager call compiles every op again on JAX.
    for layer in (theirs, ours):
        layer.build((1, QUERY_LEN, DIM), (1, KEY_LEN, DIM))
    randomize(theirs, seed=3)
    assert [w.path.split("/", 1)[1] for w in theirs.weights] == [
        w.path.split("/", 1)[1] for w in ours.weights
    ]
    ours.set_weights(theirs.get_weights())
    return theirs, ours


# Thirty cases: side by side, each backend runs its share (`split_cases`).
# The call varies fastest (five of them), so each backend gets every call,
# both gates and every head count.
@pytest.mark.split_cases
@pytest.mark.parametrize(
    "call", ["plain", "causal", "value_mask", "attention_mask", "scores"]
)
@pytest.mark.parametrize("use_gate", [False, True])
@pytest.mark.parametrize("key_value_heads", [1, 2, 4])
def test_matches_keras_grouped_query_attention(key_value_heads, use_gate, call):
    theirs, ours = keras_and_ours(key_value_heads, use_gate=use_gate)
    query = normal(BATCH, QUERY_LEN, DIM, seed=4)
    value = normal(BATCH, QUERY_LEN, DIM, seed=5)
    kwargs = {
        "plain": {},
        "causal": {"use_causal_mask": True},
        "value_mask": {
            "value_mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], bool)
        },
        "attention_mask": {"attention_mask": masks()["per_head"][:, 0, :, :QUERY_LEN]},
        "scores": {"return_attention_scores": True, "use_causal_mask": True},
    }[call]
    expected = keras.tree.flatten(theirs(query, value, **kwargs))
    got = keras.tree.flatten(ours(query, value, **kwargs))
    assert len(got) == len(expected)
    for ours_value, their_value in zip(got, expected):
        np.testing.assert_allclose(ours_value, their_value, atol=1e-5, rtol=1e-5)


def test_as_many_key_value_heads_as_heads_is_multi_head_attention():
    query, value = normal(BATCH, QUERY_LEN, DIM), normal(BATCH, KEY_LEN, DIM, seed=1)
    plain = MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM)
    grouped = MultiHeadAttention(
        num_heads=HEADS, key_dim=HEAD_DIM, num_key_value_heads=HEADS
    )
    plain(query, value)
    grouped(query, value)
    randomize(plain)
    grouped.set_weights(plain.get_weights())
    assert [w.path.split("/", 1)[1] for w in plain.weights] == [
        w.path.split("/", 1)[1] for w in grouped.weights
    ]
    for kwargs in (
        {},
        {"use_causal_mask": True},
        {"attention_mask": masks()["per_head"], "return_attention_scores": True},
    ):
        expected = keras.tree.flatten(plain(query, value, **kwargs))
        got = keras.tree.flatten(grouped(query, value, **kwargs))
        for ours_value, their_value in zip(got, expected):
            np.testing.assert_array_equal(ours_value, their_value)


def repeated_multi_head(grouped, query, value, **kwargs):
    """Multi-head attention whose key/value kernels repeat `grouped`'s heads:
    what grouped-query attention computes, without grouping."""
    config = grouped.get_config()
    config.pop("num_key_value_heads")
    plain = MultiHeadAttention.from_config(config)
    plain(query, value, **kwargs)
    group = grouped.num_heads // grouped.num_key_value_heads
    for source, target in zip(grouped.weights, plain.weights):
        array = ops.convert_to_numpy(source)
        if tuple(array.shape) != tuple(target.shape):
            # (..., key_value_heads, head_dim) -> (..., num_heads, head_dim)
            array = np.repeat(array, group, axis=-2)
        target.assign(array)
    return plain


def test_attention_axes_with_grouped_heads():
    # (batch, height, width, features), attending over height and width.
    query, value = normal(BATCH, 3, 2, DIM), normal(BATCH, 3, 2, DIM, seed=1)
    grouped = MultiHeadAttention(
        num_heads=HEADS,
        key_dim=HEAD_DIM,
        num_key_value_heads=2,
        attention_axes=(1, 2),
        flash_attention=False,
    )
    grouped(query, value)
    randomize(grouped)
    plain = repeated_multi_head(grouped, query, value)
    mask = np.random.default_rng(2).random((BATCH, 3, 2, 3, 2)) > 0.3
    expected = plain(query, value, attention_mask=mask, return_attention_scores=True)
    got = grouped(query, value, attention_mask=mask, return_attention_scores=True)
    for ours_value, their_value in zip(got, expected):
        np.testing.assert_allclose(ours_value, their_value, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("key_value_heads", [1, 2])
@pytest.mark.parametrize("flash_attention", [None, False])
def test_fully_masked_rows_give_zeros_with_bias(key_value_heads, flash_attention):
    query = normal(BATCH, QUERY_LEN, HEADS, HEAD_DIM)
    # A NaN at a key no query attends must not reach the output.
    key = normal(BATCH, KEY_LEN, key_value_heads, HEAD_DIM, seed=1)
    value = normal(BATCH, KEY_LEN, key_value_heads, HEAD_DIM, seed=2)
    value[:, -1] = np.nan
    mask = masks()["per_head"].copy()
    mask[..., -1] = False
    mask[1, 2, 3] = False  # one head's row with no key at all
    bias = normal(HEADS, QUERY_LEN, KEY_LEN, seed=3)
    attended, _ = compute_attention(
        query, key, value, mask=mask, bias=bias, flash_attention=flash_attention
    )
    attended = ops.convert_to_numpy(attended)
    assert np.all(np.isfinite(attended))
    np.testing.assert_array_equal(attended[1, 3, 2], 0.0)
    group = HEADS // key_value_heads
    expected, _ = compute_attention(
        query,
        np.repeat(key, group, axis=2),
        np.repeat(value, group, axis=2),
        mask=mask,
        bias=bias,
        flash_attention=False,
    )
    np.testing.assert_allclose(attended, expected, atol=1e-5, rtol=1e-5)


# --- GroupedQueryAttention's names, config and override point --------------


def test_keras_names_and_config():
    layer = GroupedQueryAttention(
        head_dim=HEAD_DIM, num_query_heads=HEADS, num_key_value_heads=2, seed=1
    )
    layer.build((1, QUERY_LEN, DIM), (1, KEY_LEN, DIM))
    assert (layer.head_dim, layer.num_query_heads, layer.num_key_value_heads) == (
        HEAD_DIM,
        HEADS,
        2,
    )
    assert layer.num_repeats == 2 and layer.feature_dim == DIM
    config = json.loads(json.dumps(layer.get_config()))
    theirs = keras.layers.GroupQueryAttention(
        head_dim=HEAD_DIM, num_query_heads=HEADS, num_key_value_heads=2, seed=1
    )
    assert set(theirs.get_config()) <= set(config)
    assert GroupedQueryAttention.from_config(config).get_config() == config
    # Each layer reads the other's config.
    keras.layers.GroupQueryAttention.from_config(config)
    assert GroupedQueryAttention.from_config(theirs.get_config()).num_repeats == 2


def test_variants_pass_through_to_multi_head_attention():
    layer = GroupedQueryAttention(
        head_dim=HEAD_DIM,
        num_query_heads=HEADS,
        num_key_value_heads=1,
        qk_norm=True,
        rotary_max_wavelength=100.0,
    )
    config = layer.get_config()
    assert config["qk_norm"] and config["rotary_max_wavelength"] == 100.0
    revived = GroupedQueryAttention.from_config(config)
    x = normal(BATCH, QUERY_LEN, DIM)
    assert tuple(revived(x, x).shape) == (BATCH, QUERY_LEN, DIM)
    assert revived.query_norm is not None


def test_override_receives_keras_repeated_heads():
    seen = {}

    class Override(GroupedQueryAttention):
        def _compute_attention(
            self, query, key, value, attention_mask=None, training=None
        ):
            seen["shapes"] = (tuple(query.shape), tuple(key.shape))
            seen["mask_is_none"] = attention_mask is None
            return super()._compute_attention(
                query, key, value, attention_mask, training
            )

    kwargs = dict(head_dim=HEAD_DIM, num_query_heads=HEADS, num_key_value_heads=2)
    layer, reference = Override(**kwargs), GroupedQueryAttention(**kwargs)
    x = normal(BATCH, QUERY_LEN, DIM)
    reference(x, x)
    randomize(reference)
    layer(x, x)
    layer.set_weights(reference.get_weights())
    np.testing.assert_allclose(
        layer(x, x, use_causal_mask=True),
        reference(x, x, use_causal_mask=True),
        atol=1e-5,
    )
    assert seen["shapes"][1] == (BATCH, QUERY_LEN, HEADS, HEAD_DIM)
    assert not seen["mask_is_none"]


# --- Errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_key_value_heads": 3}, ValueError, "num_key_value_heads=3"),
        ({"num_key_value_heads": 0}, ValueError, "num_key_value_heads=0"),
        ({"num_key_value_heads": 8}, ValueError, "num_key_value_heads=8"),
        ({"num_key_value_heads": 1.5}, ValueError, "num_key_value_heads"),
        ({"num_key_value_heads": "2"}, TypeError, "num_key_value_heads"),
    ],
)
def test_invalid_key_value_heads(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_query_heads=4, num_key_value_heads=3), "num_query_heads=4"),
        (dict(num_query_heads=0, num_key_value_heads=1), "num_query_heads=0"),
        (dict(num_query_heads=4, num_key_value_heads=None), "num_key_value_heads"),
    ],
)
def test_invalid_grouped_query_attention_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        GroupedQueryAttention(head_dim=HEAD_DIM, **kwargs)


def test_core_refuses_heads_that_do_not_divide():
    query = normal(1, 3, 4, 2)
    key = value = normal(1, 3, 3, 2)
    with pytest.raises(ValueError, match="divide the query's number of heads"):
        compute_attention(query, key, value)
