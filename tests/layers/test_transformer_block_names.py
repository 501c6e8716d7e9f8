"""The blocks' names: `flash_attention` (and `use_fused_attention` in old
configs), keras-hub's private sub-layer
names as read-only aliases of the stored public ones, and the exception
types of `MultiHeadAttention` for `num_heads`."""

import json
import warnings

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    AttentionSettings,
    MultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

BLOCKS = (TransformerEncoderBlock, TransformerDecoderBlock)
BATCH, LENGTH, SOURCE_LEN, DIM, HEADS, FF = 2, 5, 4, 8, 2, 16


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def built(block_class, cross=False, **kwargs):
    layer = block_class(num_heads=HEADS, intermediate_dim=FF, **kwargs)
    inputs = [normal(BATCH, LENGTH, DIM)]
    if cross:
        inputs.append(normal(BATCH, SOURCE_LEN, DIM, seed=1))
    layer(*inputs)
    return layer


def attention_layers(layer):
    return [
        getattr(layer, name)
        for name in ("self_attention", "cross_attention")
        if hasattr(layer, name)
    ]


# --- flash_attention (and configs written with use_fused_attention) -------


def flash(flash_attention, dropout=0.0):
    return AttentionSettings(dropout=dropout, flash_attention=flash_attention)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("flash_attention", [None, True, False])
def test_flash_attention_reaches_the_attention_layers(block, flash_attention):
    layer = built(
        block, cross=block is TransformerDecoderBlock, attention=flash(flash_attention)
    )
    assert layer.flash_attention is flash_attention
    for attention in attention_layers(layer):
        assert attention.flash_attention is flash_attention
    config = json.loads(json.dumps(layer.get_config()))
    # Written only when not the default (`flash_attention=None`).
    assert config.get("attention", {}).get("flash_attention") is flash_attention
    assert block.from_config(config).flash_attention is flash_attention


@pytest.mark.parametrize("block", BLOCKS)
def test_use_fused_attention_is_no_longer_an_argument(block):
    # Keras's `Layer` refuses an unknown keyword argument.
    with pytest.raises((TypeError, ValueError), match="use_fused_attention"):
        block(num_heads=HEADS, intermediate_dim=FF, use_fused_attention=False)
    assert not hasattr(
        block(num_heads=HEADS, intermediate_dim=FF), "use_fused_attention"
    )


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("alias, expected", [(True, None), (False, False)])
def test_a_config_written_with_use_fused_attention_still_loads(block, alias, expected):
    # As written by keras-attn 5c2228a (and held by the shipped presets):
    # the attention arguments flat, `use_fused_attention` for `flash_attention`.
    config = block(num_heads=HEADS, intermediate_dim=FF).get_config()
    assert "attention" not in config  # The default settings are not written.
    config.update(attention_dropout=0.0, use_fused_attention=alias)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # A file is not the user's code: no warning.
        layer = block.from_config(config)
    assert layer.flash_attention is expected
    with pytest.raises(TypeError, match="use_fused_attention='yes'"):
        block.from_config({**config, "use_fused_attention": "yes"})


@pytest.mark.parametrize("block", BLOCKS)
def test_flash_attention_true_needs_attention_dropout_zero(block):
    with pytest.raises(ValueError, match="attention_dropout=0.1"):
        block(num_heads=HEADS, intermediate_dim=FF, attention=flash(True, 0.1))
    # Residual dropout alone is fine: the fused kernel has no dropout to skip.
    layer = block(
        num_heads=HEADS, intermediate_dim=FF, dropout=0.1, attention=flash(True)
    )
    assert layer.flash_attention is True


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_flash_attention_of_another_type_is_refused(block, value):
    with pytest.raises(TypeError, match=f"flash_attention={value!r}"):
        block(
            num_heads=HEADS, intermediate_dim=FF, attention={"flash_attention": value}
        )


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("num_heads", ["2", 2.0, 0, -1, True])
def test_num_heads_errors_are_multi_head_attentions(block, num_heads):
    with pytest.raises((TypeError, ValueError)) as theirs:
        MultiHeadAttention(num_heads=num_heads, key_dim=4)
    with pytest.raises(type(theirs.value), match="num_heads"):
        block(num_heads=num_heads, intermediate_dim=FF)


# --- keras-hub's sub-layer names ------------------------------------------

# keras-hub's private attribute -> our stored (public) attribute path.
ALIASES = {
    "_self_attention_layer": "self_attention",
    "_self_attention_layer_norm": "self_attention_norm",
    "_self_attention_dropout": "self_attention_dropout",
    "_feedforward_intermediate_dense": "feed_forward.intermediate_dense",
    "_feedforward_output_dense": "feed_forward.output_dense",
    "_feedforward_layer_norm": "feed_forward_norm",
    "_feedforward_dropout": "feed_forward_dropout",
}
CROSS_ALIASES = {
    "_cross_attention_layer": "cross_attention",
    "_cross_attention_layer_norm": "cross_attention_norm",
    "_cross_attention_dropout": "cross_attention_dropout",
}


def stored(layer, path):
    for name in path.split("."):
        layer = getattr(layer, name)
    return layer


@pytest.mark.parametrize(
    "block, cross",
    [(TransformerEncoderBlock, False), (TransformerDecoderBlock, False)]
    + [(TransformerDecoderBlock, True)],
)
def test_keras_hub_names_read_the_stored_sub_layers(block, cross):
    layer = built(block, cross=cross)
    aliases = ALIASES | (CROSS_ALIASES if cross else {})
    for private, public in aliases.items():
        assert getattr(layer, private) is stored(layer, public), private
    if block is TransformerDecoderBlock and not cross:
        assert layer._cross_attention_layer is None  # As keras-hub's.
    # Read-only: the weights stay at the public paths.
    with pytest.raises(AttributeError):
        layer._self_attention_layer_norm = None
    prefixes = {path.split(".")[0] for path in aliases.values()}
    for weight in layer.weights:
        assert weight.path.split("/")[1] in prefixes, weight.path


@pytest.mark.parametrize("cross", [False, True])
def test_keras_hub_names_are_keras_hubs(cross):
    """Every sub-layer keras-hub's blocks hold by a private name, ours holds
    by that name too, with weights of the same shapes."""
    keras_hub = pytest.importorskip("keras_hub")
    peers = [(keras_hub.layers.TransformerDecoder, TransformerDecoderBlock)]
    if not cross:
        peers.append((keras_hub.layers.TransformerEncoder, TransformerEncoderBlock))
    for peer_class, block in peers:
        theirs = peer_class(intermediate_dim=FF, num_heads=HEADS)
        inputs = [normal(BATCH, LENGTH, DIM)]
        if cross:
            inputs.append(normal(BATCH, SOURCE_LEN, DIM, seed=1))
        theirs(*inputs)
        ours = built(block, cross=cross)
        names = [
            name
            for name in dir(theirs)
            if name.startswith(("_self_attention", "_cross_attention", "_feedforward"))
            and isinstance(getattr(theirs, name), keras.layers.Layer)
        ]
        assert len(names) == len(ALIASES) + (len(CROSS_ALIASES) if cross else 0)
        for name in names:
            their_shapes = [tuple(w.shape) for w in getattr(theirs, name).weights]
            our_shapes = [tuple(w.shape) for w in getattr(ours, name).weights]
            assert our_shapes == their_shapes, name
