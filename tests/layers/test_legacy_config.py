"""`migrate_attention_config`: the one place older configs' names are read."""

import pytest

from keras_attn.layers.legacy_config import migrate_attention_config


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
