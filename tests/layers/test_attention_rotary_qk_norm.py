"""`MultiHeadAttention`'s rotary positions and QK-norm: against NumPy (RoPE
and RMS normalization from their papers' equations), cached decoding
against one full causal pass, config and saving, defaults, errors."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import MultiHeadAttention

BATCH, LENGTH, DIM, HEADS, HEAD_DIM = 2, 6, 8, 4, 8


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))


def numpy_rope(x, positions, max_wavelength, scaling_factor=1.0, rotary_dim=None):
    """Su et al.'s rotation, "rotate half" pairing: `(x_i, x_{i + r/2})` at
    position `p` turns by `p / s * max_wavelength ** (-2i / r)`."""
    rotary_dim = rotary_dim or x.shape[-1]
    half = rotary_dim // 2
    inverse = max_wavelength ** (-np.arange(0, rotary_dim, 2) / rotary_dim)
    angles = (positions[:, None] / scaling_factor) * inverse[None]  # (t, r/2)
    cos, sin = np.cos(angles)[None, :, None], np.sin(angles)[None, :, None]
    first, second = x[..., :half], x[..., half:rotary_dim]
    return np.concatenate(
        [first * cos - second * sin, second * cos + first * sin, x[..., rotary_dim:]],
        axis=-1,
    )


def numpy_rms_norm(x, scale, epsilon=1e-6):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + epsilon) * scale


def numpy_attention(layer, x, rope=None, causal=True):
    """The layer's self-attention in NumPy from its weights: project, QK-norm,
    rotate (`rope` holds `numpy_rope`'s keyword arguments), attend."""
    w = {
        "/".join(v.path.split("/")[-2:]): ops.convert_to_numpy(v) for v in layer.weights
    }
    q = np.einsum("btm,mhd->bthd", x, w["query/kernel"]) + w["query/bias"]
    k = np.einsum("btm,mhd->bthd", x, w["key/kernel"]) + w["key/bias"]
    v = np.einsum("btm,mhd->bthd", x, w["value/kernel"]) + w["value/bias"]
    if "query_norm/scale" in w:
        q = numpy_rms_norm(q, w["query_norm/scale"])
        k = numpy_rms_norm(k, w["key_norm/scale"])
    if rope is not None:
        positions = np.arange(x.shape[1], dtype="float64")
        q, k = numpy_rope(q, positions, **rope), numpy_rope(k, positions, **rope)
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    attended = np.einsum("bhts,bshd->bthd", weights, v)
    output = np.einsum("bthd,hdm->btm", attended, w["attention_output/kernel"])
    return output + w["attention_output/bias"]


def built_layer(**kwargs):
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM, **kwargs)
    x = normal(BATCH, LENGTH, DIM)
    layer.build(x.shape, x.shape)  # Not called: each call compiles on JAX.
    randomize(layer)
    return layer, x


# --- Numbers ------------------------------------------------------------------


ROPE_CASES = {
    "full": dict(max_wavelength=10000.0),
    "short_wavelength": dict(max_wavelength=10.0),
    "partial": dict(max_wavelength=100.0, rotary_dim=4),
    "scaled": dict(max_wavelength=100.0, scaling_factor=4.0),
    "partial_scaled": dict(max_wavelength=100.0, scaling_factor=2.0, rotary_dim=2),
}


def rotary_arguments(rope):
    return dict(
        rotary_max_wavelength=rope["max_wavelength"],
        **(
            {"rotary_scaling_factor": rope["scaling_factor"]}
            if "scaling_factor" in rope
            else {}
        ),
        **({"rotary_dim": rope["rotary_dim"]} if "rotary_dim" in rope else {}),
    )


# Ten cases: side by side, each backend runs its share (`split_cases`),
# both paths among them.
@pytest.mark.split_cases
@pytest.mark.parametrize("case", sorted(ROPE_CASES))
@pytest.mark.parametrize("flash_attention", [None, False])
def test_rotary_matches_numpy(case, flash_attention):
    rope = ROPE_CASES[case]
    layer, x = built_layer(flash_attention=flash_attention, **rotary_arguments(rope))
    expected = numpy_attention(layer, x, rope=rope)
    np.testing.assert_allclose(
        layer(x, x, use_causal_mask=True), expected, atol=1e-5, rtol=1e-5
    )


def test_rotation_changes_the_output():
    # The NumPy reference must see the rotation: without it the numbers differ.
    layer, x = built_layer(rotary_max_wavelength=10.0)
    unrotated = numpy_attention(layer, x)
    assert not np.allclose(layer(x, x, use_causal_mask=True), unrotated, atol=1e-3)


@pytest.mark.parametrize("key_value_heads", [None, 2])
def test_qk_norm_matches_numpy(key_value_heads):
    layer, x = built_layer(qk_norm=True, num_key_value_heads=key_value_heads)
    assert tuple(layer.query_norm.scale.shape) == (HEAD_DIM,)
    expected = numpy_attention(layer, x)
    np.testing.assert_allclose(
        layer(x, x, use_causal_mask=True), expected, atol=1e-5, rtol=1e-5
    )


def test_qk_norm_then_rotary_with_grouped_heads_matches_numpy():
    rope = ROPE_CASES["partial_scaled"]
    layer, x = built_layer(
        qk_norm=True, num_key_value_heads=1, **rotary_arguments(rope)
    )
    expected = numpy_attention(layer, x, rope=rope)
    np.testing.assert_allclose(
        layer(x, x, use_causal_mask=True), expected, atol=1e-5, rtol=1e-5
    )


def test_qk_norm_and_grouped_heads_over_attention_axes():
    # Attention over (height, width) is attention over the flattened
    # sequence, with the same weights.
    kwargs = dict(
        num_heads=HEADS, key_dim=HEAD_DIM, qk_norm=True, num_key_value_heads=2
    )
    image = normal(BATCH, 2, 3, DIM)
    over_axes = MultiHeadAttention(attention_axes=(1, 2), **kwargs)
    over_axes(image, image)
    randomize(over_axes)
    sequence = MultiHeadAttention(**kwargs)
    flat = image.reshape(BATCH, 6, DIM)
    sequence(flat, flat)
    sequence.set_weights(over_axes.get_weights())
    np.testing.assert_allclose(
        ops.reshape(over_axes(image, image), (BATCH, 6, DIM)),
        sequence(flat, flat),
        atol=1e-5,
        rtol=1e-5,
    )


# --- Cached decoding ------------------------------------------------------------


CACHE_VARIANTS = {
    "rotary": dict(rotary_max_wavelength=100.0),
    "partial_rotary_scaled": dict(
        rotary_max_wavelength=100.0, rotary_dim=4, rotary_scaling_factor=2.0
    ),
    "grouped": dict(num_key_value_heads=2),
    "multi_query": dict(num_key_value_heads=1),
    "qk_norm": dict(qk_norm=True),
    "all": dict(num_key_value_heads=2, qk_norm=True, rotary_max_wavelength=100.0),
    "all_explicit": dict(
        num_key_value_heads=1,
        qk_norm=True,
        rotary_max_wavelength=100.0,
        flash_attention=False,
    ),
}


# Fourteen cases: side by side, each backend runs its share (`split_cases`),
# Python and tensor indices among them.
@pytest.mark.split_cases
@pytest.mark.parametrize("variant", sorted(CACHE_VARIANTS))
@pytest.mark.parametrize("index_as_tensor", [False, True])
def test_cached_decoding_equals_a_full_causal_pass(variant, index_as_tensor):
    layer, x = built_layer(**CACHE_VARIANTS[variant])
    full = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    heads = layer.num_key_value_heads
    cache_keys = ops.zeros((BATCH, LENGTH, heads, HEAD_DIM))
    cache_values = ops.zeros((BATCH, LENGTH, heads, HEAD_DIM))
    for t in range(LENGTH):
        index = ops.convert_to_tensor(t, "int32") if index_as_tensor else t
        step = x[:, t : t + 1]
        keys, values = layer.compute_key_value(step, start_index=index)
        # (batch, 1, num_key_value_heads, head_dim) into the cache
        cache_keys = ops.slice_update(cache_keys, (0, t, 0, 0), keys)
        cache_values = ops.slice_update(cache_values, (0, t, 0, 0), values)
        seen = (np.arange(LENGTH) <= t)[None, None, :]  # (1, 1, max_length)
        output = layer.call_with_key_value(
            step, cache_keys, cache_values, attention_mask=seen, start_index=index
        )
        np.testing.assert_allclose(output, full[:, t : t + 1], atol=1e-5, rtol=1e-5)


def test_cached_keys_are_stored_rotated():
    layer, x = built_layer(rotary_max_wavelength=10.0)
    keys_at_zero, _ = layer.compute_key_value(x[:, 3:4])
    keys_at_three, _ = layer.compute_key_value(x[:, 3:4], start_index=3)
    full_keys, _ = layer.compute_key_value(x)
    np.testing.assert_allclose(keys_at_three, full_keys[:, 3:4], atol=1e-5)
    assert not np.allclose(keys_at_zero, keys_at_three, atol=1e-3)


# --- Layer contract, config, defaults -----------------------------------------


@pytest.mark.parametrize(
    "kwargs, weights",
    [
        (dict(qk_norm=True, qk_norm_epsilon=1e-5), 10),
        (dict(rotary_max_wavelength=500.0, rotary_dim=4, rotary_scaling_factor=2.0), 8),
        (
            dict(num_key_value_heads=2, qk_norm=True, rotary_max_wavelength=10000.0),
            10,
        ),
    ],
)
def test_layer_contract(kwargs, weights):
    x = normal(BATCH, LENGTH, DIM)
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, key_dim=HEAD_DIM, **kwargs),
        {"query": x, "value": x},
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(BATCH, LENGTH, DIM),
        expected_num_trainable_weights=weights,
    )


def test_defaults_keep_todays_weights_and_config():
    ours = MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM)
    theirs = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM)
    x = normal(BATCH, LENGTH, DIM)
    ours(x, x)
    theirs(x, x)
    assert ours.query_norm is None and ours.key_norm is None
    assert [(w.path.split("/", 1)[1], tuple(w.shape)) for w in ours.weights] == [
        (w.path.split("/", 1)[1], tuple(w.shape)) for w in theirs.weights
    ]
    # No new config entry unless set: Keras's layer still reads the config.
    assert set(ours.get_config()) - set(theirs.get_config()) == {"flash_attention"}


def test_qk_norm_adds_two_scales_after_todays_weights():
    plain, _ = built_layer()
    normed, _ = built_layer(qk_norm=True)
    names = [w.path.split("/", 1)[1] for w in normed.weights]
    assert names == [w.path.split("/", 1)[1] for w in plain.weights] + [
        "query_norm/scale",
        "key_norm/scale",
    ]


# --- Errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rotary_max_wavelength=10.0, rotary_dim=3), ValueError, "rotary_dim=3"),
        (dict(rotary_max_wavelength=10.0, rotary_dim=10), ValueError, "rotary_dim=10"),
        (dict(rotary_max_wavelength=10.0, rotary_dim=0), ValueError, "rotary_dim=0"),
        (dict(rotary_dim=2.0), ValueError, "rotary_dim"),
        (dict(rotary_max_wavelength=0.0), ValueError, "rotary_max_wavelength=0.0"),
        (dict(rotary_max_wavelength=-1), ValueError, "rotary_max_wavelength"),
        (dict(rotary_max_wavelength="big"), TypeError, "rotary_max_wavelength"),
        (dict(rotary_scaling_factor=0), ValueError, "rotary_scaling_factor"),
        (dict(qk_norm="yes"), TypeError, "qk_norm"),
        (dict(qk_norm=True, qk_norm_epsilon=-1.0), ValueError, "qk_norm_epsilon"),
    ],
)
def test_invalid_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(num_heads=HEADS, key_dim=HEAD_DIM, **kwargs)


def test_odd_key_dim_needs_a_rotary_dim():
    with pytest.raises(ValueError, match="key_dim=5"):
        MultiHeadAttention(num_heads=2, key_dim=5, rotary_max_wavelength=10.0)
    layer = MultiHeadAttention(
        num_heads=2, key_dim=5, rotary_max_wavelength=10.0, rotary_dim=4
    )
    x = normal(BATCH, LENGTH, DIM)
    assert tuple(layer(x, x).shape) == (BATCH, LENGTH, DIM)


def test_rotary_refuses_inputs_that_are_not_sequences():
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, attention_axes=(1, 2), rotary_max_wavelength=10.0
    )
    image = normal(BATCH, 2, 3, DIM)
    with pytest.raises(ValueError, match="rotary_max_wavelength"):
        layer(image, image)
