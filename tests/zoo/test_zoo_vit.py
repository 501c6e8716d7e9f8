"""VisionTransformer: serialization, patch embedding, argument errors."""

import json

import keras
import numpy as np
import pytest

from keras_attn.models import VisionTransformer

IMAGES = np.random.default_rng(0).random((2, 8, 12, 3)).astype("float32")


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    # A rectangular image: 4 x 6 = 24 patches of 2x2 pixels.
    return VisionTransformer.from_preset(
        "vit_tiny", num_classes=5, image_size=(8, 12), num_channels=3
    )


def test_output_shape_and_config_round_trip(model):
    assert tuple(model(IMAGES).shape) == (2, 5)
    assert model.num_patches == 24
    config = model.get_config()
    json.dumps(config)
    assert VisionTransformer.from_config(config).get_config() == config


def test_keras_file_round_trip(model, tmp_path):
    path = tmp_path / "vit.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, VisionTransformer)
    np.testing.assert_allclose(loaded(IMAGES), model(IMAGES), atol=1e-6)


def test_tokens_are_class_token_then_row_major_flattened_patches(model):
    """Position 0 is the class token; then each patch's pixels times a matrix."""
    sequence = keras.Model(
        model.input, model.get_layer("class_token").output, name="tokens"
    )(IMAGES)
    sequence = np.asarray(sequence)
    kernel, bias = model.get_layer("patch_embedding").get_weights()
    (token,) = model.get_layer("class_token").get_weights()
    # NumPy reference: cut (8, 12) into 2x2 patches, row by row.
    patches = IMAGES.reshape(2, 4, 2, 6, 2, 3).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(2, 24, 2 * 2 * 3)  # (batch, patches, pixels)
    expected = patches @ kernel.reshape(2 * 2 * 3, -1) + bias
    assert sequence.shape == (2, 25, 32)
    np.testing.assert_allclose(sequence[:, 0], np.broadcast_to(token[0], (2, 32)))
    np.testing.assert_allclose(sequence[:, 1:], expected, atol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_classes": 0}, "num_classes=0"),
        ({"image_size": 10, "patch_size": 4}, "image_size=10, patch_size=4"),
        (
            {"image_size": (8, 10), "patch_size": 4},
            r"image_size=\(8, 10\), patch_size=4",
        ),
        ({"image_size": (8, 8, 8)}, r"image_size=\(8, 8, 8\)"),
        ({"patch_size": 0}, "patch_size=0"),
        ({"hidden_dim": 10, "num_heads": 4}, "hidden_dim=10, num_heads=4"),
    ],
)
def test_bad_arguments_name_argument_and_value(overrides, message):
    arguments = dict(
        num_classes=3,
        image_size=8,
        patch_size=2,
        num_channels=1,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
    )
    arguments.update(overrides)
    with pytest.raises(ValueError, match=message):
        VisionTransformer(**arguments)


def test_from_preset_needs_num_classes():
    with pytest.raises(ValueError, match="num_classes=None"):
        VisionTransformer.from_preset("vit_digits")
