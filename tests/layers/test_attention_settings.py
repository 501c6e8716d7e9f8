"""`AttentionSettings`: made and checked once, handed down to every
`MultiHeadAttention` of a block or model, and saved with them."""

import json

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    AttentionSettings,
    MultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_attn.models import TransformerLM

HEADS, FF, DIM = 4, 16, 16
SETTINGS = AttentionSettings(
    dropout=0.1,
    flash_attention=False,
    num_key_value_heads=2,
    qk_norm=True,
    rotary_max_wavelength=500.0,
    rotary_scaling_factor=2.0,
    rotary_dim=2,
)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# --- The object ----------------------------------------------------------------


def test_config_round_trip_is_plain_json():
    config = json.loads(json.dumps(SETTINGS.get_config()))
    assert AttentionSettings.from_config(config) == SETTINGS
    assert AttentionSettings.get(config) == SETTINGS
    assert AttentionSettings.get(SETTINGS) is SETTINGS
    assert AttentionSettings.get(None) == AttentionSettings()


def test_values_are_stored_canonical_and_frozen():
    settings = AttentionSettings(dropout=0, rotary_max_wavelength=100)
    assert (
        type(settings.dropout) is float
        and type(settings.rotary_max_wavelength) is float
    )
    with pytest.raises(AttributeError):
        settings.qk_norm = True


def test_for_cross_attention_drops_rotation_and_window_only():
    local = SETTINGS.replace(sliding_window=3, logit_soft_cap=20.0)
    plain = local.for_cross_attention()
    assert plain.rotary_max_wavelength is None and plain.rotary_dim is None
    assert plain.rotary_scaling_factor == 1.0 and plain.sliding_window is None
    # The cap is a property of the logits: the cross-attention keeps it.
    assert plain.logit_soft_cap == 20.0
    rotation = {name: getattr(SETTINGS, name) for name in SETTINGS._ROTATION}
    assert plain.replace(sliding_window=3, **rotation) == local


def test_window_and_cap_round_trip_and_reach_the_layer():
    settings = AttentionSettings(sliding_window=np.int64(4), logit_soft_cap=30)
    assert type(settings.sliding_window) is int
    assert type(settings.logit_soft_cap) is float
    config = json.loads(json.dumps(settings.get_config()))
    assert AttentionSettings.from_config(config) == settings
    layer = MultiHeadAttention(num_heads=2, key_dim=4, **settings.layer_arguments())
    assert (layer.sliding_window, layer.logit_soft_cap) == (4, 30.0)
    # A config saved before these settings loads with both off.
    del config["sliding_window"], config["logit_soft_cap"]
    assert AttentionSettings.from_config(config) == AttentionSettings()


@pytest.mark.parametrize("flash_attention", [False, None])
def test_scale_multiplies_the_scores_of_every_attention(flash_attention):
    """`scale=1.0` (T5's unscaled scores) equals the default scale with the
    query weights multiplied by `sqrt(head_dim)`; it round-trips and the
    cross-attention keeps it."""
    settings = AttentionSettings(scale=1, flash_attention=flash_attention)
    assert type(settings.scale) is float
    assert settings.for_cross_attention().scale == 1.0
    config = json.loads(json.dumps(settings.get_config()))
    assert AttentionSettings.from_config(config) == settings
    del config["scale"]  # a config saved before the setting
    assert AttentionSettings.from_config(config).scale is None

    query, value = normal(2, 5, DIM), normal(2, 7, DIM, seed=1)
    unscaled = MultiHeadAttention(
        HEADS, 4, bias_initializer="random_normal", **settings.layer_arguments()
    )
    default = MultiHeadAttention(HEADS, 4, flash_attention=flash_attention)
    outputs = unscaled(query, value)
    default(query, value)
    weights = unscaled.get_weights()
    # The query kernel and bias, times sqrt(head_dim) = 2.
    weights[0], weights[1] = weights[0] * 2.0, weights[1] * 2.0
    default.set_weights(weights)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(outputs),
        keras.ops.convert_to_numpy(default(query, value)),
        rtol=1e-5,
        atol=1e-5,
    )
    assert unscaled.get_config()["scale"] == 1.0 and "scale" not in (
        default.get_config()
    )
    assert MultiHeadAttention.from_config(unscaled.get_config()).scale == 1.0


def test_head_dim_round_trips_and_is_written_only_when_set():
    settings = AttentionSettings(head_dim=np.int64(6), num_key_value_heads=2)
    assert type(settings.head_dim) is int
    config = json.loads(json.dumps(settings.get_config()))
    assert config["head_dim"] == 6
    assert AttentionSettings.from_config(config) == settings
    assert AttentionSettings.get(config) == settings
    # The cross-attention's heads are of the same size.
    assert settings.for_cross_attention().head_dim == 6
    # Unset, it is not written: a config as saved before the setting,
    # which loads as it.
    config = AttentionSettings(num_key_value_heads=2).get_config()
    assert "head_dim" not in config
    assert AttentionSettings.from_config(config).head_dim is None
    # `MultiHeadAttention`'s `key_dim`, not an argument of its own.
    assert "head_dim" not in settings.layer_arguments()
    assert settings.key_dim(10, 3) == 6
    assert AttentionSettings().key_dim(12, 3) == 4
    with pytest.raises(ValueError, match="hidden_dim=10, num_heads=3"):
        AttentionSettings().key_dim(10, 3)


def test_layer_arguments_are_multi_head_attentions():
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=4, **SETTINGS.layer_arguments())
    config = layer.get_config()
    for name, value in SETTINGS.layer_arguments().items():
        # A variant left at its default (`None`) is not written.
        assert config.get(name) == value, name


def test_key_value_heads_is_one_rule():
    assert AttentionSettings().key_value_heads(HEADS) == HEADS
    assert AttentionSettings(num_key_value_heads=2).key_value_heads(HEADS) == 2
    with pytest.raises(ValueError, match="num_heads=4, num_key_value_heads=3"):
        AttentionSettings(num_key_value_heads=3).key_value_heads(HEADS)


@pytest.mark.parametrize(
    "arguments, error, match",
    [
        (dict(dropout=1.0), ValueError, "attention_dropout=1.0"),
        (dict(dropout="0.1"), TypeError, "attention_dropout='0.1'"),
        (dict(flash_attention="yes"), TypeError, "flash_attention='yes'"),
        (dict(flash_attention=1), TypeError, "flash_attention=1"),
        (
            dict(flash_attention=True, dropout=0.1),
            ValueError,
            "flash_attention=True, attention_dropout=0.1",
        ),
        (dict(num_key_value_heads=0), ValueError, "num_key_value_heads=0"),
        (dict(num_key_value_heads="two"), TypeError, "num_key_value_heads='two'"),
        (dict(qk_norm=1), TypeError, "qk_norm=1"),
        (dict(rotary_max_wavelength=0.5), ValueError, "rotary_max_wavelength=0.5"),
        (
            dict(rotary_max_wavelength=1e4, rotary_scaling_factor=0.0),
            ValueError,
            "rotary_scaling_factor=0.0",
        ),
        (
            dict(rotary_max_wavelength=1e4, rotary_dim=3),
            ValueError,
            "rotary_dim=3",
        ),
        (dict(rotary_dim=2), ValueError, "rotary_dim=2, rotary_max_wavelength=None"),
        (dict(sliding_window=0), ValueError, "sliding_window=0"),
        (dict(sliding_window=2.0), ValueError, "sliding_window=2.0"),
        (dict(sliding_window=True), ValueError, "sliding_window=True"),
        (dict(logit_soft_cap=0.0), ValueError, "logit_soft_cap=0.0"),
        (dict(logit_soft_cap=-5.0), ValueError, "logit_soft_cap=-5.0"),
        (dict(logit_soft_cap=float("inf")), ValueError, "logit_soft_cap=inf"),
        (dict(logit_soft_cap=1e-40), ValueError, "logit_soft_cap=1e-40"),
        (dict(logit_soft_cap="30"), TypeError, "logit_soft_cap='30'"),
        (
            dict(logit_soft_cap=30.0, flash_attention=True),
            ValueError,
            "logit_soft_cap=30.0, flash_attention=True",
        ),
        (dict(scale=0.0), ValueError, "scale=0.0"),
        (dict(scale=-1.0), ValueError, "scale=-1.0"),
        (dict(scale=float("nan")), ValueError, "scale=nan"),
        (dict(scale="1"), TypeError, "scale='1'"),
        (
            dict(head_dim=0),
            ValueError,
            "expected a positive integer or `None`.*head_dim=0",
        ),
        (dict(head_dim=-4), ValueError, "head_dim=-4"),
        (dict(head_dim=1.5), ValueError, "head_dim=1.5"),
        (dict(head_dim=True), ValueError, "head_dim=True"),
        (dict(head_dim="8"), TypeError, "head_dim='8'"),
        (
            dict(head_dim=5, rotary_max_wavelength=1e4),
            ValueError,
            "head_dim=5, rotary_max_wavelength=10000.0",
        ),
        (
            dict(head_dim=4, rotary_max_wavelength=1e4, rotary_dim=6),
            ValueError,
            r"at most `key_dim` \(4\).*rotary_dim=6",
        ),
    ],
)
def test_refusal_table(arguments, error, match):
    with pytest.raises(error, match=match):
        AttentionSettings(**arguments)
    # The same refusal from a block given the settings' config.
    with pytest.raises(error, match=match):
        TransformerEncoderBlock(HEADS, FF, attention=arguments)


@pytest.mark.parametrize("attention", ["qk_norm", 1, ["dropout"]])
def test_a_block_refuses_what_is_not_settings(attention):
    with pytest.raises(TypeError, match="attention"):
        TransformerEncoderBlock(HEADS, FF, attention=attention)
    with pytest.raises(TypeError, match="unknown setting"):
        TransformerEncoderBlock(HEADS, FF, attention={"sliding_windw": 4})


# --- In a block ------------------------------------------------------------------


def test_a_block_hands_them_to_its_attention_layers():
    block = TransformerDecoderBlock(HEADS, FF, attention=SETTINGS)
    block.build((2, 5, DIM), (2, 3, DIM))  # The sub-layers, without a call.
    assert block.attention is SETTINGS
    assert block.num_key_value_heads == 2 and block.attention_dropout == 0.1
    self_config = block.self_attention.get_config()
    cross_config = block.cross_attention.get_config()
    for name in ("dropout", "flash_attention", "num_key_value_heads", "qk_norm"):
        assert self_config[name] == cross_config[name] == getattr(SETTINGS, name)
    assert self_config["rotary_dim"] == 2
    # Cross-attention never rotates, and takes no sliding window.
    assert "rotary_max_wavelength" not in cross_config
    assert cross_config["sliding_window"] is None


def test_none_is_the_blocks_dropout_as_keras_hub():
    block = TransformerEncoderBlock(HEADS, FF, dropout=0.2)
    assert block.attention == AttentionSettings(dropout=0.2)
    assert "attention" not in block.get_config()


@pytest.mark.parametrize(
    "block_class", [TransformerEncoderBlock, TransformerDecoderBlock]
)
def test_a_block_keras_file_round_trip(block_class, tmp_path):
    inputs = keras.Input((5, DIM))
    block = block_class(HEADS, FF, attention=SETTINGS)
    model = keras.Model(inputs, block(inputs))
    path = str(tmp_path / "block.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.layers[1].attention == SETTINGS
    x = normal(2, 5, DIM)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored(x)),
        keras.ops.convert_to_numpy(model(x)),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "block_class", [TransformerEncoderBlock, TransformerDecoderBlock]
)
def test_a_flat_block_config_migrates(block_class):
    # As blocks were saved before `attention=` (and `flash_attention`).
    flat = {
        "num_heads": HEADS,
        "intermediate_dim": FF,
        "dropout": 0.3,
        "attention_dropout": 0.1,
        "use_fused_attention": False,
        "num_key_value_heads": 2,
        "qk_norm": True,
        "rotary_max_wavelength": 500.0,
        "rotary_scaling_factor": 2.0,
        "rotary_dim": 2,
    }
    block = block_class.from_config(flat)
    assert block.attention == SETTINGS
    assert block.get_config()["attention"] == SETTINGS.get_config()
    # Without `attention_dropout` (a very old file), the block's dropout.
    block = block_class.from_config(
        {"num_heads": HEADS, "intermediate_dim": FF, "dropout": 0.3, "qk_norm": True}
    )
    assert block.attention == AttentionSettings(dropout=0.3, qk_norm=True)


# --- In a model --------------------------------------------------------------------


def tiny_lm(num_layers=2, **arguments):
    return TransformerLM(
        vocabulary_size=20,
        num_layers=num_layers,
        hidden_dim=DIM,
        num_heads=HEADS,
        intermediate_dim=FF,
        max_sequence_length=8,
        **arguments,
    )


def test_a_model_hands_one_object_to_every_attention_layer():
    model = tiny_lm(
        position="rotary",
        attention=dict(num_key_value_heads=2, qk_norm=True, flash_attention=False),
    )
    # The model's settings, with the position scheme's rotation.
    settings = model.blocks[0].attention
    assert settings == model.attention.replace(rotary_max_wavelength=10000.0)
    assert settings == AttentionSettings(
        flash_attention=False,
        num_key_value_heads=2,
        qk_norm=True,
        rotary_max_wavelength=10000.0,
    )
    for block in model.blocks:
        assert block.attention is settings
        config = block.self_attention.get_config()
        assert config["num_key_value_heads"] == 2 and config["qk_norm"] is True
        assert config["rotary_max_wavelength"] == 10000.0
        assert tuple(block.self_attention.key_dense.kernel.shape) == (DIM, 2, 4)
    # The model's config holds its own settings, as one entry.
    config = model.get_config()
    assert config["attention"] == model.attention.get_config()
    assert "num_key_value_heads" not in config and "qk_norm" not in config


def test_a_model_keras_file_round_trip(tmp_path):
    # One block: what is saved is the model's settings and each block's.
    model = tiny_lm(
        num_layers=1,
        position="rotary",
        attention=dict(num_key_value_heads=1, qk_norm=True),
    )
    path = str(tmp_path / "lm.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.attention == model.attention
    assert restored.blocks[0].attention == model.blocks[0].attention
    tokens = np.array([[1, 2, 3, 4]], "int32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored(tokens)),
        keras.ops.convert_to_numpy(model(tokens)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_a_model_names_its_own_argument():
    with pytest.raises(ValueError, match="attention_dropout=1.5"):
        tiny_lm(attention=dict(dropout=1.5))
    with pytest.raises(ValueError, match="num_heads=4, num_key_value_heads=3"):
        tiny_lm(attention=dict(num_key_value_heads=3))
