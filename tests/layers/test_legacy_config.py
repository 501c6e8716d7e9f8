"""`migrate_attention_config`: the one place older configs' names are read."""

import pytest

from keras_attn.layers.legacy_config import (
    migrate_attention_config,
    migrate_model_config,
)


@pytest.mark.parametrize(
    "old, new",
    [
        ({"use_fused_attention": True}, {"flash_attention": None}),
        ({"use_fused_attention": False}, {"flash_attention": False}),
        # The newer name wins; the old one is dropped.
        (
            {"use_fused_attention": False, "flash_attention": True},
            {"flash_attention": True},
        ),
        ({"use_fused_attention": None}, {}),
        ({"output_dim": 6}, {"output_shape": 6}),
        ({"output_dim": None, "output_shape": None}, {"output_shape": None}),
        ({"output_dim": 6, "output_shape": (3, 2)}, {"output_shape": (3, 2)}),
        ({"num_heads": 2}, {"num_heads": 2}),
    ],
)
def test_old_names_become_todays(old, new):
    config = dict(old, name="attention")
    assert migrate_attention_config(config) == dict(new, name="attention")
    assert config == dict(old, name="attention")  # the input is not changed


def test_a_non_boolean_use_fused_attention_is_refused_by_name():
    with pytest.raises(TypeError, match="use_fused_attention"):
        migrate_attention_config({"use_fused_attention": "yes"})


@pytest.mark.parametrize(
    "old, new",
    [
        # A model's flat attention arguments nest as `attention`.
        (
            {"attention_dropout": 0.1, "num_key_value_heads": 2, "qk_norm": True},
            {"attention": {"dropout": 0.1, "num_key_value_heads": 2, "qk_norm": True}},
        ),
        # Before `flash_attention`: renamed, then nested; a model's attention
        # dropout defaults to 0.0, not to its `dropout`.
        (
            {"dropout": 0.1, "use_fused_attention": False},
            {"dropout": 0.1, "attention": {"flash_attention": False, "dropout": 0.0}},
        ),
        # Nothing flat: unchanged; beside `attention`, a flat argument is no
        # older file's and is left for the constructor to refuse by name.
        ({"attention": {"qk_norm": True}}, {"attention": {"qk_norm": True}}),
        (
            {"attention": {}, "flash_attention": False},
            {"attention": {}, "flash_attention": False},
        ),
    ],
)
def test_a_models_flat_attention_arguments_become_attention(old, new):
    config = dict(old, num_layers=2)
    assert migrate_model_config(config) == dict(new, num_layers=2)
    assert config == dict(old, num_layers=2)  # the input is not changed
