"""The recipe's model settings reach the model it builds: `dropout` on the
residual branches, `attention_dropout` on the attention weights (the
`dropout` of the model's `attention`); `None` keeps the preset's values."""

import pytest

import keras_attn
from keras_attn_recipes.translation_config import SETTINGS
from keras_attn_recipes.translation_steps import build_model


def _attention_dropouts(model):
    blocks = list(model.encoder_blocks) + list(model.decoder_blocks)
    return {block.attention_dropout for block in blocks}


def test_attention_dropout_reaches_every_block():
    config = SETTINGS["tiny"].replace(dropout=0.05, attention_dropout=0.15)
    model = build_model(config, vocabulary_size=64)
    assert model.get_config()["attention"]["dropout"] == 0.15
    assert model.get_config()["dropout"] == 0.05
    assert _attention_dropouts(model) == {0.15}


def test_unset_model_settings_keep_the_presets_values():
    model = build_model(SETTINGS["tiny"], vocabulary_size=64)
    preset = keras_attn.models.Transformer.from_preset(
        "transformer_tiny", vocabulary_size=64
    )
    for name in ("dropout", "attention"):
        assert model.get_config()[name] == preset.get_config()[name]
    assert _attention_dropouts(model) == _attention_dropouts(preset)


def test_attention_variant_settings_reach_every_block():
    config = SETTINGS["tiny"].replace(
        position="rotary",
        activation="swiglu",
        normalization="rms",
        num_key_value_heads=1,
        use_bias=False,
    )
    model = build_model(config, vocabulary_size=64)
    for name, value in (
        ("position", "rotary"),
        ("activation", "swiglu"),
        ("normalization", "rms"),
        ("use_bias", False),
    ):
        assert model.get_config()[name] == value
    assert model.get_config()["attention"]["num_key_value_heads"] == 1
    blocks = list(model.encoder_blocks) + list(model.decoder_blocks)
    assert {block.num_key_value_heads for block in blocks} == {1}
    assert not [w.path for w in model.weights if w.path.endswith("/bias")]


def test_a_variant_setting_is_checked_when_the_setting_is_made():
    with pytest.raises(TypeError, match="use_bias"):
        SETTINGS["tiny"].replace(use_bias="no")
