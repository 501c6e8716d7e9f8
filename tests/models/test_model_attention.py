"""A zoo model takes its attention settings as one argument, `attention`
(an `AttentionSettings` or a dict of its fields), and reads configs saved
with them flat (`migrate_model_config`): the fixtures of main at 5c2228a
and a shipped preset give the outputs they were saved with."""

import json
import os
import zipfile

import keras
import numpy as np

from keras_attn.layers import AttentionSettings
from keras_attn.layers.legacy_config import migrate_model_config
from keras_attn.models import Transformer, TransformerLM

FIXTURES = os.path.join(
    os.path.dirname(__file__), os.pardir, "fixtures", "compat_5c2228a"
)
FIELDS = dict(dropout=0.1, flash_attention=False, num_key_value_heads=1, qk_norm=True)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_settings_and_their_dict_build_the_same_model():
    models = []
    for attention in (AttentionSettings(**FIELDS), dict(FIELDS)):
        keras.utils.set_random_seed(0)
        models.append(
            Transformer(
                vocabulary_size=20,
                num_layers=1,
                hidden_dim=16,
                num_heads=2,
                intermediate_dim=16,
                max_sequence_length=8,
                position="rotary",
                attention=attention,
                name="seq2seq",
            )
        )
    from_settings, from_dict = models
    assert from_settings.attention == from_dict.attention == AttentionSettings(**FIELDS)
    config = from_settings.get_config()
    assert config == from_dict.get_config()
    # The settings are one plain JSON entry; none of them is flat.
    assert json.loads(json.dumps(config))["attention"] == config["attention"]
    flat = {"attention_dropout", "flash_attention", "num_key_value_heads", "qk_norm"}
    assert not flat & set(config)
    # Every block gets the settings with the position scheme's rotation
    # (which its cross-attention leaves out).
    rotated = AttentionSettings(**FIELDS, rotary_max_wavelength=10000.0)
    for block in [*from_dict.encoder_blocks, *from_dict.decoder_blocks]:
        assert block.attention == rotated
        assert tuple(block.self_attention.key_dense.kernel.shape) == (16, 1, 8)
    tokens = np.array([[3, 4, 5, 6]], "int32")
    inputs = {"encoder_tokens": tokens, "decoder_tokens": tokens[:, :3]}
    expected = to_numpy(from_settings(inputs))
    np.testing.assert_array_equal(to_numpy(from_dict(inputs)), expected)
    restored = Transformer.from_config(config)
    restored.set_weights(from_settings.get_weights())
    np.testing.assert_array_equal(to_numpy(restored(inputs)), expected)


def test_a_flat_config_of_5c2228a_loads_with_its_outputs():
    with zipfile.ZipFile(os.path.join(FIXTURES, "lm.keras")) as archive:
        flat = json.loads(archive.read("config.json"))["config"]
    assert {"attention_dropout", "use_fused_attention"} <= set(flat)
    migrated = migrate_model_config(flat)
    assert migrated["attention"] == {"dropout": 0.0, "flash_attention": None}
    assert not {"attention_dropout", "use_fused_attention"} & set(migrated)

    model = TransformerLM.from_config(flat)
    model.load_weights(os.path.join(FIXTURES, "lm.weights.h5"))
    assert model.attention == AttentionSettings()
    saved = np.load(os.path.join(FIXTURES, "lm.npz"))
    outputs = to_numpy(model(saved["input_0"]))
    np.testing.assert_allclose(outputs, saved["output_0"], rtol=1e-5, atol=1e-5)
    # Saved again, the config holds `attention`, and loads the same model.
    config = model.get_config()
    assert config["attention"] == AttentionSettings().get_config()
    again = TransformerLM.from_config(config)
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(to_numpy(again(saved["input_0"])), outputs)


def test_a_flat_preset_keeps_its_settings_under_an_attention_override():
    # `multi30k_en_lm`'s config.json holds `num_key_value_heads=2` flat; a
    # dict for `attention` changes only the settings it names.
    preset = TransformerLM.from_preset("multi30k_en_lm")
    overridden = TransformerLM.from_preset(
        "multi30k_en_lm", attention={"flash_attention": False}
    )
    assert preset.attention == AttentionSettings(num_key_value_heads=2)
    assert overridden.attention == AttentionSettings(
        num_key_value_heads=2, flash_attention=False
    )
    tokens = np.array([[1, 5, 9, 13, 17]], "int32")
    np.testing.assert_allclose(
        to_numpy(overridden(tokens)), to_numpy(preset(tokens)), rtol=1e-5, atol=1e-5
    )
