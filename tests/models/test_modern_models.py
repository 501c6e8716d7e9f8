"""The zoo models with today's attention variants (issue #38).

Rotary positions, grouped-query and multi-query attention, query-key
normalization, RMSNorm with a SwiGLU feed-forward network and no biases,
and all of them together (`lm_modern_small`'s architecture, tiny), each on
`TransformerLM` and `Transformer`. References: the same model's full pass
(cached decoding, one token at a time), generation without the cache, the
`.keras` file's model, the arguments' own shapes (key/value heads, biases,
norms) and `lm_small` (the preset's parameter count). The layers' numerics
against NumPy are tested beside the layers.
"""

import functools

import keras
import numpy as np
import pytest
from zoo_cases import decode_in_steps, to_numpy

from keras_attn.generation import generate_lm, greedy_search
from keras_attn.layers import RMSNormalization
from keras_attn.models import (
    LM_PRESETS,
    Transformer,
    TransformerEncoderClassifier,
    TransformerLM,
    VisionTransformer,
)

VOCABULARY_SIZE = 20
# Four query heads of 8 features: room for 2 and 1 key/value heads.
TINY = dict(
    num_layers=2,
    hidden_dim=32,
    num_heads=4,
    intermediate_dim=48,
    dropout=0.0,
    max_sequence_length=16,
)
# `lm_modern_small`'s choices (everything but its sizes).
MODERN = {
    name: value
    for name, value in LM_PRESETS["lm_modern_small"].items()
    if name not in TINY
}
VARIANTS = {
    "rotary": dict(position="rotary"),
    "gqa_kv1": dict(attention=dict(num_key_value_heads=1)),
    "gqa_kv2": dict(attention=dict(num_key_value_heads=2)),
    "qk_norm": dict(attention=dict(qk_norm=True)),
    "rms_swiglu_no_bias": dict(
        normalization="rms", activation="swiglu", use_bias=False
    ),
    "lm_modern_small": MODERN,
}
KINDS = ("lm", "transformer")


def build(kind, variant=None, **overrides):
    """A tiny `kind` model with the arguments of `VARIANTS[variant]` (`None`:
    the defaults, today's model)."""
    arguments = {**TINY, **VARIANTS.get(variant, {}), **overrides}
    keras.utils.set_random_seed(0)
    if kind == "lm":
        return TransformerLM(VOCABULARY_SIZE, **arguments)
    return Transformer(VOCABULARY_SIZE, **arguments)


@functools.cache
def model_of(kind, variant):
    """`build(kind, variant)`, once per module (the tests do not change it)."""
    return build(kind, variant)


def tokens(batch_size=2, length=7, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, VOCABULARY_SIZE, size=(batch_size, length)).astype("int32")


def inputs_of(kind, length=7):
    if kind == "lm":
        return tokens(length=length)
    return {
        "encoder_tokens": tokens(length=length + 1, seed=1),
        "decoder_tokens": tokens(length=length),
    }


def cached_logits(model, kind, inputs, max_length, prefill=3):
    if kind == "lm":
        cache = model.initial_cache(inputs.shape[0], max_length=max_length)
        return decode_in_steps(model, inputs, cache, prefill)
    encoded = model.encode(inputs["encoder_tokens"])
    cache = model.initial_cache(*encoded, max_length=max_length)
    return decode_in_steps(model, inputs["decoder_tokens"], cache, prefill)


def weight_paths(model):
    return [weight.path for weight in model.weights]


# --- Cached decoding and generation ------------------------------------------------


# The wide parametrizations below are dealt out among the backends run
# side by side (`split_cases`: the i-th case to the i-th of jax, tensorflow,
# torch, in turn); kind by kind within each variant, so that each backend
# gets both kinds and most variants. The layers behind each variant are
# tested on every backend in tests/layers.


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_equals_the_full_pass(kind, variant):
    model = model_of(kind, variant)
    inputs = inputs_of(kind)
    full = to_numpy(model(inputs))
    np.testing.assert_allclose(
        cached_logits(model, kind, inputs, max_length=9), full, atol=1e-5
    )


@pytest.mark.split_cases
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lm_generation_with_the_cache_equals_without(variant):
    model = model_of("lm", variant)
    prompt = tokens(length=3)
    cached = generate_lm(model, prompt, max_length=8)
    uncached = generate_lm(model, prompt, max_length=8, use_cache=False)
    np.testing.assert_array_equal(
        to_numpy(cached["tokens"]), to_numpy(uncached["tokens"])
    )
    np.testing.assert_array_equal(to_numpy(cached["tokens"])[:, :3], prompt)


@pytest.mark.split_cases
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_translation_with_the_cache_equals_without(variant):
    model = model_of("transformer", variant)
    source = tokens(length=5, seed=2)
    arguments = dict(start_id=1, end_id=2, max_length=7)
    cached = greedy_search(model, source, **arguments)
    uncached = greedy_search(model, source, use_cache=False, **arguments)
    np.testing.assert_array_equal(
        to_numpy(cached["tokens"]), to_numpy(uncached["tokens"])
    )
    np.testing.assert_allclose(
        to_numpy(cached["scores"]), to_numpy(uncached["scores"]), atol=1e-4
    )


# --- Saving ---------------------------------------------------------------------


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_keras_file_round_trip_gives_identical_outputs(kind, variant, tmp_path):
    model = model_of(kind, variant)
    path = tmp_path / f"{kind}_{variant}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    config = loaded.get_config()
    for name, value in VARIANTS[variant].items():
        if name == "attention":  # the settings the variant names
            value = {**config[name], **value}
        assert config[name] == value, name
    assert weight_paths(loaded) == weight_paths(model)
    inputs = inputs_of(kind)
    np.testing.assert_array_equal(to_numpy(loaded(inputs)), to_numpy(model(inputs)))


# --- What each argument builds ----------------------------------------------------


def self_attention_weight(block, suffix):
    """The self-attention weight of `block` whose path ends in `suffix`."""
    (weight,) = [
        weight
        for weight in block.self_attention.weights
        if weight.path.endswith(suffix)
    ]
    return weight


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_key_value_heads", [1, 2, None])
def test_the_keys_values_and_cache_have_the_key_value_heads(kind, num_key_value_heads):
    model = build(
        kind, "rotary", attention={"num_key_value_heads": num_key_value_heads}
    )
    heads = num_key_value_heads or TINY["num_heads"]
    head_dim = TINY["hidden_dim"] // TINY["num_heads"]
    blocks = model.blocks if kind == "lm" else model.decoder_blocks
    hidden = TINY["hidden_dim"]
    for block in blocks:
        assert tuple(self_attention_weight(block, "query/kernel").shape) == (
            hidden,
            TINY["num_heads"],
            head_dim,
        )
        for projection in ("key", "value"):
            kernel = self_attention_weight(block, f"{projection}/kernel")
            assert tuple(kernel.shape) == (hidden, heads, head_dim)
    if kind == "lm":
        cache = model.initial_cache(3, max_length=5)
    else:
        cache = model.initial_cache(*model.encode(tokens(batch_size=3)), max_length=5)
    for keys, values in cache["self_attention"]:
        assert tuple(keys.shape) == tuple(values.shape) == (3, 5, heads, head_dim)
    assert model.get_config()["attention"]["num_key_value_heads"] == num_key_value_heads


@pytest.mark.parametrize("kind", KINDS)
def test_qk_norm_adds_one_scale_per_head_feature(kind):
    model = model_of(kind, "qk_norm")
    head_dim = TINY["hidden_dim"] // TINY["num_heads"]
    # Every attention layer: self-attention, and the decoder's cross-attention.
    per_layer = 1 if kind == "lm" else 3
    for name in ("query_norm", "key_norm"):
        scales = [weight for weight in model.weights if f"/{name}/" in weight.path]
        assert len(scales) == per_layer * TINY["num_layers"], name
        assert all(tuple(scale.shape) == (head_dim,) for scale in scales)
    blocks = model.blocks if kind == "lm" else model.decoder_blocks
    assert isinstance(blocks[0].self_attention.query_norm, RMSNormalization)
    assert isinstance(blocks[0].self_attention.key_norm, RMSNormalization)
    default = build(kind)
    default_blocks = default.blocks if kind == "lm" else default.decoder_blocks
    assert default_blocks[0].self_attention.query_norm is None
    assert not [path for path in weight_paths(default) if "_norm/scale" in path]


@pytest.mark.parametrize("kind", KINDS)
def test_use_bias_false_leaves_no_bias_and_rms_no_layer_norm(kind):
    model = model_of(kind, "rms_swiglu_no_bias")
    paths = weight_paths(model)
    assert not [path for path in paths if path.endswith(("bias", "beta"))], paths
    assert not [path for path in paths if "gamma" in path], paths
    assert [path for path in paths if path.endswith("gate_dense/kernel")]
    # The model's own norms follow `normalization` too (pre-norm models).
    pre_norm = build(kind, "rms_swiglu_no_bias", normalize_first=True)
    final_norms = (
        [pre_norm.output_norm]
        if kind == "lm"
        else [pre_norm.encoder_output_norm, pre_norm.decoder_output_norm]
    )
    for norm in final_norms:
        assert isinstance(norm, RMSNormalization)
        assert norm.epsilon == pre_norm.layer_norm_epsilon
    # The defaults have both (the weights of today's models).
    default_paths = weight_paths(build(kind))
    assert [path for path in default_paths if path.endswith("bias")]
    assert [path for path in default_paths if path.endswith("beta")]


def test_layer_norms_without_bias_have_no_offset():
    model = build("lm", "rotary", use_bias=False)
    paths = weight_paths(model)
    assert not [path for path in paths if path.endswith(("bias", "beta"))], paths
    assert not model.output_norm.center
    assert [path for path in paths if path.endswith("output_norm/gamma")]


# --- Rotary positions ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_rotary_has_no_position_weights_and_rotates_self_attention(kind):
    model = model_of(kind, "rotary")
    # The scheme's rotation reaches the blocks; the model's own settings
    # (its `attention` argument) hold none.
    assert model.attention.rotary_max_wavelength is None
    assert model.get_config()["attention"]["rotary_max_wavelength"] is None
    assert not [path for path in weight_paths(model) if "position" in path]
    blocks = model.blocks if kind == "lm" else model.decoder_blocks
    for block in blocks:
        assert block.get_config()["attention"]["rotary_max_wavelength"] == 1e4
    if kind == "transformer":
        for block in model.encoder_blocks:
            assert block.get_config()["attention"]["rotary_max_wavelength"] == 1e4


def test_rotary_positions_give_order():
    # Without positions, causal attention at the last position is blind to
    # the order of the tokens before it; with rotary it is not.
    model = model_of("lm", "rotary")
    ids = tokens(length=5)
    swapped = ids.copy()
    swapped[:, [0, 1]] = ids[:, [1, 0]]
    last, last_swapped = to_numpy(model(ids))[:, -1], to_numpy(model(swapped))[:, -1]
    assert not np.allclose(last, last_swapped, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_rotary_runs_beyond_the_training_length(kind):
    # The lengths of the cached-decoding tests above, past this model's.
    model = build(kind, "lm_modern_small", max_sequence_length=4)
    assert model.position_scheme.max_length is None
    inputs = inputs_of(kind)
    full = to_numpy(model(inputs))
    assert np.isfinite(full).all()
    # The steps past the training length, at cache indices 4 to 6.
    np.testing.assert_allclose(
        cached_logits(model, kind, inputs, max_length=9, prefill=3), full, atol=1e-5
    )


# --- The preset and the other models ------------------------------------------------


def test_lm_modern_small_has_lm_smalls_parameter_count():
    sizes = dict(vocabulary_size=2000, max_sequence_length=32)
    modern = TransformerLM.from_preset("lm_modern_small", **sizes)
    small = TransformerLM.from_preset("lm_small", **sizes)
    assert abs(modern.count_params() / small.count_params() - 1) < 0.005
    config = modern.get_config()
    assert config["position"] == "rotary"
    assert config["attention"]["num_key_value_heads"] == 2
    assert (config["normalization"], config["activation"]) == ("rms", "swiglu")
    assert config["use_bias"] is False and config["normalize_first"] is True


@pytest.mark.parametrize(
    "model_class", [TransformerEncoderClassifier, VisionTransformer]
)
def test_the_encoder_models_take_the_variants(model_class):
    keras.utils.set_random_seed(0)
    if model_class is VisionTransformer:
        # ViT keeps its learned positions and pre-norm blocks.
        variants = {
            name: value
            for name, value in MODERN.items()
            if name not in ("position", "normalize_first")
        }
        model = VisionTransformer.from_preset("vit_tiny", num_classes=3, **variants)
        inputs = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype("float32")
    else:
        model = TransformerEncoderClassifier(
            VOCABULARY_SIZE, num_classes=3, **{**TINY, **MODERN}
        )
        inputs = tokens(length=7)
    paths = weight_paths(model)
    assert [path for path in paths if "self_attention/key/kernel" in path]
    assert not [path for path in paths if "/attention_output/bias" in path]
    restored = model_class.from_config(model.get_config())
    restored.set_weights(model.get_weights())
    np.testing.assert_allclose(
        to_numpy(restored(inputs)), to_numpy(model(inputs)), atol=1e-6
    )


# --- Bad arguments -----------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (
            dict(attention=dict(num_key_value_heads=3)),
            ValueError,
            r"num_heads=4, num_key_value_heads=3",
        ),
        (
            dict(attention=dict(num_key_value_heads=0)),
            ValueError,
            r"num_key_value_heads=0",
        ),
        (
            dict(attention=dict(num_key_value_heads="two")),
            TypeError,
            r"num_key_value_heads='two'",
        ),
        (dict(attention=dict(qk_norm="yes")), TypeError, r"qk_norm='yes'"),
        (dict(attention=dict(qk_nrom=True)), TypeError, r"unknown setting.*qk_nrom"),
        (dict(attention=[2]), TypeError, r"Received: attention=\[2\] of type list"),
        (
            dict(attention=dict(rotary_max_wavelength=500.0)),
            ValueError,
            r"position scheme.*Received: attention.rotary_max_wavelength=500.0",
        ),
        (
            dict(num_key_value_heads=2),
            TypeError,
            r"'num_key_value_heads' \(an attention setting: pass "
            r"attention=\{'num_key_value_heads': ...\}\)",
        ),
        (dict(use_bias=None), TypeError, r"use_bias=None"),
        (dict(normalization="batch"), ValueError, r"\['layer', 'rms'\].*'batch'"),
        (dict(activation="swishglu"), ValueError, r"geglu, swiglu, reglu.*swishglu"),
        (
            dict(position="rotary", hidden_dim=24, num_heads=8),
            ValueError,
            r"hidden_dim=24, num_heads=8, position='rotary'",
        ),
    ],
)
@pytest.mark.parametrize(
    "model_class", [TransformerLM, Transformer, TransformerEncoderClassifier]
)
def test_bad_arguments_are_refused_by_name(model_class, arguments, error, message):
    extra = {"num_classes": 3} if model_class is TransformerEncoderClassifier else {}
    with pytest.raises(error, match=message):
        model_class(VOCABULARY_SIZE, **{**TINY, **extra, **arguments})


def test_vit_refuses_bad_key_value_heads_by_name():
    with pytest.raises(ValueError, match="num_heads=2, num_key_value_heads=4"):
        VisionTransformer.from_preset(
            "vit_tiny", num_classes=3, attention={"num_key_value_heads": 4}
        )
