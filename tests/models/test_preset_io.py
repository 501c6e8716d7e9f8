"""Preset directories: save, load, list, and what goes wrong with them."""

import json

import keras
import numpy as np
import pytest
from other_backend import OTHER_BACKENDS, run_on_backend

import keras_attn
from keras_attn.models import (
    Transformer,
    TransformerEncoderClassifier,
    TransformerLM,
    VisionTransformer,
    list_presets,
    preset_io,
)


def tiny_models():
    keras.utils.set_random_seed(0)
    tokens = np.array([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]], "int32")
    return {
        "transformer": (
            Transformer.from_preset("transformer_tiny", vocabulary_size=20),
            {"encoder_tokens": tokens, "decoder_tokens": tokens[:, :4]},
        ),
        "lm": (TransformerLM.from_preset("lm_tiny", vocabulary_size=20), tokens),
        "classifier": (
            TransformerEncoderClassifier.from_preset(
                "encoder_classifier_tiny", vocabulary_size=20, num_classes=3
            ),
            tokens,
        ),
        "vit": (
            VisionTransformer.from_preset("vit_tiny", num_classes=3),
            np.linspace(0, 1, 2 * 64, dtype="float32").reshape(2, 8, 8, 1),
        ),
    }


def outputs(model, inputs):
    return keras.ops.convert_to_numpy(model(inputs))


@pytest.mark.parametrize("name", ["transformer", "lm", "classifier", "vit"])
def test_every_zoo_model_round_trips_through_a_preset(tmp_path, name):
    model, inputs = tiny_models()[name]
    model.save_to_preset(tmp_path, metadata={"description": "a test"})
    for file_name in ("config.json", "model.weights.h5", "metadata.json"):
        assert (tmp_path / file_name).is_file()
    config = json.loads((tmp_path / "config.json").read_text())
    expected = json.loads(json.dumps(keras.saving.serialize_keras_object(model)))
    expected.pop("compile_config", None)  # A preset is for inference.
    assert config == expected
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert metadata["parameters"] == model.count_params()
    assert metadata["backend"] == keras.backend.backend()
    assert metadata["keras_attn_version"] == keras_attn.__version__
    assert metadata["description"] == "a test"

    loaded = type(model).from_preset(str(tmp_path))
    np.testing.assert_allclose(outputs(loaded, inputs), outputs(model, inputs))
    random = type(model).from_preset(tmp_path, load_weights=False)
    assert random.count_params() == model.count_params()


def test_float16_weights_are_half_size_and_load_as_float32(tmp_path):
    model, inputs = tiny_models()["transformer"]
    model.save_to_preset(tmp_path / "full")
    model.save_to_preset(tmp_path / "half", weights_dtype="float16")
    loaded = Transformer.from_preset(tmp_path / "half")
    assert {w.dtype for w in loaded.weights} == {"float32"}
    np.testing.assert_allclose(
        outputs(loaded, inputs), outputs(model, inputs), atol=5e-3
    )
    metadata = json.loads((tmp_path / "half" / "metadata.json").read_text())
    assert metadata["weights_dtype"] == "float16"
    # Ask for another dtype and get it.
    as_bf16 = Transformer.from_preset(tmp_path / "half", dtype="bfloat16")
    assert {w.dtype for w in as_bf16.weights} == {"bfloat16"}


def test_overrides_replace_the_saved_config(tmp_path):
    model, _ = tiny_models()["transformer"]
    model.save_to_preset(tmp_path)
    loaded = Transformer.from_preset(tmp_path, dropout=0.3)
    assert loaded.dropout == 0.3


def test_architecture_presets_stay_and_are_listed_apart():
    listing = list_presets()
    assert listing["transformer_base"] == {"model": "Transformer", "weights": False}
    assert listing["vit_digits"]["model"] == "VisionTransformer"
    # The published shapes that fix their vocabulary need no arguments.
    assert TransformerLM.presets["gpt2_small"]["vocabulary_size"] == 50257
    with pytest.raises(ValueError, match="`vocabulary_size` is required"):
        Transformer.from_preset("transformer_tiny")


def test_unknown_preset_lists_the_known_ones_and_accepts_directories():
    with pytest.raises(ValueError) as info:
        Transformer.from_preset("transformer_huge")
    message = str(info.value)
    assert "Received: preset='transformer_huge'" in message
    assert "transformer_base" in message
    assert "local preset directory" in message


@pytest.mark.parametrize(
    "missing", ["config.json", "metadata.json", "model.weights.h5"]
)
def test_a_missing_file_is_named(tmp_path, missing):
    model, _ = tiny_models()["lm"]
    model.save_to_preset(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing):
        TransformerLM.from_preset(tmp_path)


def test_the_wrong_model_class_is_named(tmp_path):
    model, _ = tiny_models()["lm"]
    model.save_to_preset(tmp_path)
    with pytest.raises(ValueError, match="holds a keras_attn>TransformerLM"):
        Transformer.from_preset(tmp_path)


def test_a_newer_keras_attn_version_warns(tmp_path):
    model, _ = tiny_models()["lm"]
    model.save_to_preset(tmp_path, metadata={"keras_attn_version": "99.0.0"})
    with pytest.warns(UserWarning, match="saved by keras-attn 99.0.0"):
        TransformerLM.from_preset(tmp_path)


def test_loading_never_runs_code(tmp_path):
    model, _ = tiny_models()["lm"]
    model.save_to_preset(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["config"]["activation"] = {
        "class_name": "__lambda__",
        "config": {"code": "print('pwned')", "defaults": None, "closure": None},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="safe_mode"):
        TransformerLM.from_preset(tmp_path)


def test_bad_arguments_are_named(tmp_path):
    model, _ = tiny_models()["lm"]
    with pytest.raises(ValueError, match="Received: weights_dtype='int8'"):
        model.save_to_preset(tmp_path, weights_dtype="int8")
    with pytest.raises(TypeError, match="save_to_preset"):
        model.save_to_preset(tmp_path, tokenizer=object())


def test_shipped_presets_are_package_data():
    assert preset_io.PRESETS_DIR.parent.name == "keras_attn"
    for name in preset_io.shipped_presets():
        assert list_presets()[name]["weights"], name


BUILD_SAVE_AND_LOAD = """
import sys
from pathlib import Path
import keras
import numpy as np
from keras_attn.models import Transformer

directory = Path(sys.argv[1])
inputs = dict(np.load(directory / "inputs.npz"))
here = Transformer.from_preset(directory / "saved_here")
np.save(directory / "loaded_there.npy", keras.ops.convert_to_numpy(here(inputs)))
keras.utils.set_random_seed(5)
there = Transformer.from_preset("transformer_tiny", vocabulary_size=20)
there.save_to_preset(directory / "saved_there", weights_dtype="float16")
np.save(directory / "there.npy", keras.ops.convert_to_numpy(there(inputs)))
print(keras.backend.backend())
"""


@pytest.mark.slow
@pytest.mark.parametrize("other", OTHER_BACKENDS)
def test_a_preset_loads_on_the_other_backend_with_the_same_outputs(tmp_path, other):
    model, inputs = tiny_models()["transformer"]
    model.save_to_preset(tmp_path / "saved_here")
    np.savez(tmp_path / "inputs.npz", **inputs)
    run_on_backend(other, BUILD_SAVE_AND_LOAD, tmp_path)
    # Saved here, loaded there.
    np.testing.assert_allclose(
        np.load(tmp_path / "loaded_there.npy"), outputs(model, inputs), atol=1e-5
    )
    # Saved there (float16 weights), loaded here.
    metadata = json.loads((tmp_path / "saved_there" / "metadata.json").read_text())
    assert metadata["backend"] == other
    loaded = Transformer.from_preset(tmp_path / "saved_there")
    np.testing.assert_allclose(
        outputs(loaded, inputs), np.load(tmp_path / "there.npy"), atol=5e-3
    )
