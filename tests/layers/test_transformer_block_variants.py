"""The blocks' modern variants: RMS norms, no biases, gated feed-forward,
grouped-query attention, QK-norm and rotary positions (issue #38).

Checked against a NumPy block written from the equations (with the block's
weights, randomized), cached decoding against the full causal pass (through
`call_cached` and keras-hub's stacked cache), weight counts, configs and
`.keras` files.
"""

import json
import math

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import (
    AttentionSettings,
    RMSNormalization,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

BATCH, LENGTH, SOURCE_LEN, DIM, HEADS, FF = 2, 6, 5, 16, 4, 24
HEAD_DIM = DIM // HEADS
QK_NORM_EPSILON = 1e-6

# Each variant alone, and the modern decoder-only recipe together.
ROTARY = dict(attention=AttentionSettings(rotary_max_wavelength=10000.0))
PARTIAL_ROTARY = dict(
    attention=AttentionSettings(
        rotary_max_wavelength=100.0, rotary_scaling_factor=2.0, rotary_dim=2
    )
)
MODERN = dict(
    normalization="rms",
    activation="swiglu",
    use_bias=False,
    normalize_first=True,
    attention=AttentionSettings(
        num_key_value_heads=2, qk_norm=True, rotary_max_wavelength=500.0
    ),
)
VARIANTS = {
    "rotary": ROTARY,
    "partial_rotary": PARTIAL_ROTARY,
    "multi_query": dict(attention=AttentionSettings(num_key_value_heads=1)),
    "grouped_query": dict(attention=AttentionSettings(num_key_value_heads=2)),
    "qk_norm": dict(attention=AttentionSettings(qk_norm=True)),
    "rms_swiglu_no_bias": dict(
        normalization="rms", activation="swiglu", use_bias=False
    ),
    "modern": MODERN,
}


VARIANT_ARGUMENTS = ("normalization", "use_bias", "attention")


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def built(block_class, cross=False, seed=1, **kwargs):
    """A block built on `(BATCH, LENGTH, DIM)` with every weight randomized
    (biases, norm scales and offsets too), so none is a no-op."""
    block = block_class(num_heads=HEADS, intermediate_dim=FF, **kwargs)
    if block_class is TransformerDecoderBlock:
        block.build((BATCH, LENGTH, DIM), (BATCH, SOURCE_LEN, DIM) if cross else None)
    else:
        block.build((BATCH, LENGTH, DIM))
    rng = np.random.default_rng(seed)
    for weight in block.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
    return block


def to_numpy(x):
    return ops.convert_to_numpy(x).astype("float64")


# --- A NumPy Transformer block ----------------------------------------------


def np_norm(norm, x):
    if isinstance(norm, RMSNormalization):
        mean_square = (x**2).mean(-1, keepdims=True)
        return x / np.sqrt(mean_square + norm.epsilon) * to_numpy(norm.scale)
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    beta = to_numpy(norm.beta) if norm.center else 0.0
    return (x - mean) / np.sqrt(variance + norm.epsilon) * to_numpy(norm.gamma) + beta


def np_dense(projection, x, equation):
    outputs = np.einsum(equation, x, to_numpy(projection.kernel))
    if projection.bias is not None:
        outputs = outputs + to_numpy(projection.bias)
    return outputs


def np_rms(x, scale):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + QK_NORM_EPSILON) * scale


def np_rotate(x, positions, max_wavelength, scaling_factor, rotary_dim):
    """RoPE, "rotate half": features `i` and `i + d/2` of the first `d`."""
    d = rotary_dim or x.shape[-1]
    inverse_frequencies = max_wavelength ** (-np.arange(0, d, 2) / d)
    angles = np.outer(positions / scaling_factor, inverse_frequencies)
    cos = np.cos(angles)[None, :, None, :]  # (1, length, 1, d / 2)
    sin = np.sin(angles)[None, :, None, :]
    first, second, rest = x[..., : d // 2], x[..., d // 2 : d], x[..., d:]
    return np.concatenate(
        [first * cos - second * sin, second * cos + first * sin, rest], axis=-1
    )


def np_attention(attention, block, query_in, kv_in, mask, rotary):
    """Multi-head attention from the equations, with grouped key/value heads
    (query head `h` reads key/value head `h // (heads / kv_heads)`)."""
    to_heads = "btd,dhk->bthk"
    q = np_dense(attention.query_dense, query_in, to_heads)  # (B, T, H, D)
    k = np_dense(attention.key_dense, kv_in, to_heads)  # (B, S, KV, D)
    v = np_dense(attention.value_dense, kv_in, to_heads)
    assert k.shape[2] == block.num_key_value_heads
    if block.attention.qk_norm:
        q = np_rms(q, to_numpy(attention.query_norm.scale))
        k = np_rms(k, to_numpy(attention.key_norm.scale))
    if rotary and block.attention.rotary_max_wavelength is not None:
        arguments = (
            block.attention.rotary_max_wavelength,
            block.attention.rotary_scaling_factor,
            block.attention.rotary_dim,
        )
        q = np_rotate(q, np.arange(q.shape[1]), *arguments)
        k = np_rotate(k, np.arange(k.shape[1]), *arguments)
    group = block.num_heads // block.num_key_value_heads
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    # (B, H, T, S)
    scores = np.einsum("bthk,bshk->bhts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    attended = np.einsum("bhts,bshk->bthk", weights, v)  # (B, T, H, D)
    return np_dense(attention.output_dense, attended, "bthk,hkd->btd")


def np_feed_forward(feed_forward, x):
    hidden = np_dense(feed_forward.intermediate_dense, x, "btd,df->btf")
    if feed_forward.gated:
        assert feed_forward.activation == "swiglu"
        gate = np_dense(feed_forward.gate_dense, x, "btd,df->btf")
        hidden = gate / (1.0 + np.exp(-gate)) * hidden
    else:
        assert feed_forward.activation is keras.activations.relu
        hidden = np.maximum(hidden, 0.0)
    return np_dense(feed_forward.output_dense, hidden, "btf,fd->btd")


def np_block(block, x, source=None, causal=False):
    """One encoder (or decoder) block, post-norm or pre-norm."""
    x = x.astype("float64")

    def residual(x, norm, sublayer):
        if block.normalize_first:
            return x + sublayer(np_norm(norm, x))
        return np_norm(norm, x + sublayer(x))

    mask = np.tril(np.ones((x.shape[1], x.shape[1]), bool)) if causal else None
    x = residual(
        x,
        block.self_attention_norm,
        lambda h: np_attention(block.self_attention, block, h, h, mask, rotary=True),
    )
    if source is not None:
        source = source.astype("float64")
        x = residual(
            x,
            block.cross_attention_norm,
            lambda h: np_attention(
                block.cross_attention, block, h, source, None, rotary=False
            ),
        )
    return residual(
        x, block.feed_forward_norm, lambda h: np_feed_forward(block.feed_forward, h)
    )


# --- Values against NumPy ------------------------------------------------------


# Fourteen cases: side by side, each backend runs its share (`split_cases`);
# the two settings alternate, so each backend gets both and most variants.
@pytest.mark.split_cases
@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_encoder_block_matches_numpy(variant, normalize_first):
    arguments = dict(VARIANTS[variant], normalize_first=normalize_first)
    block = built(TransformerEncoderBlock, **arguments)
    x = normal(BATCH, LENGTH, DIM)
    np.testing.assert_allclose(
        ops.convert_to_numpy(block(x)), np_block(block, x), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("normalization", ["layer", "rms"])
def test_normalization_and_use_bias_match_numpy(normalization):
    # Needs nothing of the attention variants: RMS norms and `use_bias`
    # through the encoder block and the decoder block with cross-attention.
    x, source = normal(BATCH, LENGTH, DIM), normal(BATCH, SOURCE_LEN, DIM, seed=2)
    for use_bias in (True, False):
        arguments = dict(normalization=normalization, use_bias=use_bias)
        encoder = built(TransformerEncoderBlock, **arguments)
        np.testing.assert_allclose(
            ops.convert_to_numpy(encoder(x)), np_block(encoder, x), atol=1e-4
        )
        decoder = built(TransformerDecoderBlock, cross=True, **arguments)
        np.testing.assert_allclose(
            ops.convert_to_numpy(decoder(x, source)),
            np_block(decoder, x, source, causal=True),
            atol=1e-4,
        )


def test_rotary_changes_the_self_attention_only():
    # The same weights with and without RoPE differ; the cross-attention
    # never rotates (its sub-layer has no rotary arguments).
    x, source = normal(BATCH, LENGTH, DIM), normal(BATCH, SOURCE_LEN, DIM, seed=2)
    rotary = built(TransformerDecoderBlock, cross=True, **ROTARY)
    plain = built(TransformerDecoderBlock, cross=True)
    assert not np.allclose(
        ops.convert_to_numpy(rotary(x, source)),
        ops.convert_to_numpy(plain(x, source)),
    )
    assert rotary.self_attention.get_config()["rotary_max_wavelength"] == 10000.0
    assert "rotary_max_wavelength" not in rotary.cross_attention.get_config()
    np.testing.assert_allclose(
        ops.convert_to_numpy(rotary(x, source)),
        np_block(rotary, x, source, causal=True),
        atol=1e-4,
    )


# --- Cached decoding equals the full pass ------------------------------------


def decode_with_call_cached(block, target, source, prefill=3):
    """Positions `[0, prefill)` in one step, then one position per step."""
    shape = (BATCH, LENGTH, block.num_key_value_heads, block.head_dim)
    cache = (ops.zeros(shape), ops.zeros(shape))
    cross = None if source is None else block.compute_cross_attention_cache(source)
    outputs = []
    bounds = [0, *range(prefill, LENGTH + 1)]
    for start, end in zip(bounds[:-1], bounds[1:]):
        output, cache = block.call_cached(target[:, start:end], cache, start, cross)
        outputs.append(ops.convert_to_numpy(output))
    assert tuple(cache[0].shape) == shape
    return np.concatenate(outputs, axis=1)


def decode_with_stacked_cache(block, target, source):
    """keras-hub's cache call, one position per step."""
    kv_shape = (block.num_key_value_heads, block.head_dim)
    self_cache = ops.zeros((BATCH, 2, LENGTH, *kv_shape))
    cross_cache = ops.zeros((BATCH, 2, SOURCE_LEN, *kv_shape))
    outputs = []
    for index in range(LENGTH):
        kwargs = dict(
            self_attention_cache=self_cache, self_attention_cache_update_index=index
        )
        if source is not None:
            kwargs.update(
                encoder_sequence=source,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=0 if index == 0 else None,
            )
        result = block(target[:, index : index + 1], **kwargs)
        outputs.append(ops.convert_to_numpy(result[0]))
        self_cache = result[1]
        if source is not None:
            cross_cache = result[2]
    return np.concatenate(outputs, axis=1)


@pytest.mark.split_cases
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_equals_the_full_causal_pass(variant, cross):
    block = built(TransformerDecoderBlock, cross=cross, **VARIANTS[variant])
    target = normal(BATCH, LENGTH, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=2) if cross else None
    full = ops.convert_to_numpy(
        block(target) if source is None else block(target, source)
    )
    np.testing.assert_allclose(
        full, np_block(block, target, source, causal=True), atol=1e-4
    )
    np.testing.assert_allclose(
        decode_with_call_cached(block, target, source), full, atol=1e-5
    )
    np.testing.assert_allclose(
        decode_with_stacked_cache(block, target, source), full, atol=1e-5
    )


# --- Weights, properties, configs, files ---------------------------------------


@pytest.mark.parametrize("normalization", ["layer", "rms"])
@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_without_bias_no_bias_weights_anywhere(normalization, activation):
    arguments = dict(normalization=normalization, activation=activation)
    feed_forward_kernels = 3 if activation == "swiglu" else 2
    encoder = built(TransformerEncoderBlock, use_bias=False, **arguments)
    decoder = built(TransformerDecoderBlock, cross=True, use_bias=False, **arguments)
    # Attention: 4 kernels each; the norms: one scale (`gamma` or `scale`) each.
    for block, attentions, norms in ((encoder, 1, 2), (decoder, 2, 3)):
        names = [w.path.split("/")[-1] for w in block.weights]
        assert not {"bias", "beta"} & set(names), names
        assert len(names) == 4 * attentions + feed_forward_kernels + norms
    # With biases: one per kernel, one offset per layer norm.
    with_bias = built(TransformerEncoderBlock, **arguments)
    offsets = 2 if normalization == "layer" else 0
    assert len(with_bias.weights) == 2 * (4 + feed_forward_kernels) + 2 + offsets


def test_defaults_are_unchanged():
    block = built(TransformerEncoderBlock)
    paths = [w.path.split("/", 1)[1] for w in block.weights]
    assert paths == [
        "self_attention/query/kernel",
        "self_attention/query/bias",
        "self_attention/key/kernel",
        "self_attention/key/bias",
        "self_attention/value/kernel",
        "self_attention/value/bias",
        "self_attention/attention_output/kernel",
        "self_attention/attention_output/bias",
        "self_attention_norm/gamma",
        "self_attention_norm/beta",
        "feed_forward/intermediate_dense/kernel",
        "feed_forward/intermediate_dense/bias",
        "feed_forward/output_dense/kernel",
        "feed_forward/output_dense/bias",
        "feed_forward_norm/gamma",
        "feed_forward_norm/beta",
    ]
    # The variants' arguments are written only when set: a default block's
    # config is the one earlier versions wrote and read.
    assert not set(VARIANT_ARGUMENTS) & set(block.get_config())
    assert block.num_key_value_heads == HEADS and block.head_dim == HEAD_DIM
    assert block._feedforward_gate_dense is None


@pytest.mark.parametrize(
    "block_class", [TransformerEncoderBlock, TransformerDecoderBlock]
)
def test_key_value_heads_and_head_dim(block_class):
    grouped = VARIANTS["grouped_query"]
    block = block_class(num_heads=HEADS, intermediate_dim=FF, **grouped)
    assert block.num_key_value_heads == 2 and block.head_dim is None
    block = built(block_class, **grouped)
    assert block.head_dim == HEAD_DIM
    assert tuple(block.self_attention.key_dense.kernel.shape) == (DIM, 2, HEAD_DIM)
    assert tuple(block.self_attention.query_dense.kernel.shape) == (
        DIM,
        HEADS,
        HEAD_DIM,
    )


@pytest.mark.parametrize(
    "block_class", [TransformerEncoderBlock, TransformerDecoderBlock]
)
@pytest.mark.parametrize("variant", ["modern", "partial_rotary"])
def test_config_round_trip(block_class, variant):
    block = block_class(num_heads=HEADS, intermediate_dim=FF, **VARIANTS[variant])
    config = json.loads(json.dumps(block.get_config()))
    for key, value in VARIANTS[variant].items():
        if isinstance(value, AttentionSettings):
            value = value.get_config()
        assert config[key] == value, key
    assert block_class.from_config(config).get_config() == block.get_config()


def test_encoder_layer_contract_modern():
    run_layer_test(
        TransformerEncoderBlock,
        dict(num_heads=HEADS, intermediate_dim=FF, **MODERN),
        normal(BATCH, LENGTH, DIM),
        expected_output_shape=(BATCH, LENGTH, DIM),
        # 4 attention kernels, 2 QK-norm scales, 3 feed-forward kernels, 2 norms.
        expected_num_trainable_weights=11,
    )


def test_decoder_layer_contract_modern_with_cross_attention():
    run_layer_test(
        TransformerDecoderBlock,
        dict(num_heads=HEADS, intermediate_dim=FF, **MODERN),
        {
            "decoder_sequence": normal(BATCH, LENGTH, DIM),
            "encoder_sequence": normal(BATCH, SOURCE_LEN, DIM, seed=2),
        },
        expected_output_shape=(BATCH, LENGTH, DIM),
        expected_num_trainable_weights=2 * 6 + 3 + 3,
        run_mixed_precision=False,
    )


@pytest.mark.parametrize(
    "arguments, match",
    [
        (dict(normalization="batch"), "normalization='batch'"),
        (dict(use_bias="no"), "use_bias='no'"),
        (dict(attention=dict(num_key_value_heads=3)), "num_key_value_heads=3"),
        (dict(attention=dict(num_key_value_heads=0)), "num_key_value_heads=0"),
        (dict(attention=dict(qk_norm=1)), "qk_norm=1"),
        (
            dict(attention=dict(rotary_max_wavelength=0.0)),
            "rotary_max_wavelength=0.0",
        ),
        (
            dict(attention=dict(rotary_max_wavelength=1e4, rotary_scaling_factor=-1.0)),
            "rotary_scaling_factor=-1.0",
        ),
        (
            dict(attention=dict(rotary_max_wavelength=1e4, rotary_dim=3)),
            "rotary_dim=3",
        ),
        (dict(activation="gatedgelu"), "activation='gatedgelu'"),
    ],
)
@pytest.mark.parametrize(
    "block_class", [TransformerEncoderBlock, TransformerDecoderBlock]
)
def test_bad_arguments_are_refused_at_construction(block_class, arguments, match):
    with pytest.raises((TypeError, ValueError), match=match):
        block_class(num_heads=HEADS, intermediate_dim=FF, **arguments)
