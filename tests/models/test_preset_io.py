"""Preset directories: save, load, list, and what goes wrong with them."""

import json
import shutil

import keras
import numpy as np
import pytest

import keras_attn
from keras_attn.models import (
    Transformer,
    TransformerEncoderClassifier,
    TransformerLM,
    VisionTransformer,
    list_presets,
    preset_io,
)

TOKENS = np.array([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]], "int32")


def tiny_model(name):
    """`(model, inputs)`: a tiny zoo model of kind `name`, seeded."""
    keras.utils.set_random_seed(0)
    if name == "transformer":
        return (
            Transformer.from_preset("transformer_tiny", vocabulary_size=20),
            {"encoder_tokens": TOKENS, "decoder_tokens": TOKENS[:, :4]},
        )
    if name == "lm":
        return TransformerLM.from_preset("lm_tiny", vocabulary_size=20), TOKENS
    if name == "classifier":
        return (
            TransformerEncoderClassifier.from_preset(
                "encoder_classifier_tiny", vocabulary_size=20, num_classes=3
            ),
            TOKENS,
        )
    return (
        VisionTransformer.from_preset("vit_tiny", num_classes=3),
        np.linspace(0, 1, 2 * 64, dtype="float32").reshape(2, 8, 8, 1),
    )


def outputs(model, inputs):
    return keras.ops.convert_to_numpy(model(inputs))


def tiny_lm(seed=0):
    keras.utils.set_random_seed(seed)
    return TransformerLM.from_preset("lm_tiny", vocabulary_size=20)


def assert_same_weights(loaded, model):
    for actual, expected in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(actual, expected)


@pytest.fixture(scope="module")
def lm_preset(tmp_path_factory):
    """`(model, directory)`: a tiny LM and its preset, saved once per module."""
    directory = tmp_path_factory.mktemp("lm_preset") / "preset"
    model = tiny_lm()
    model.save_to_preset(directory)
    return model, directory


@pytest.fixture
def saved_lm(lm_preset):
    """`saved_lm(directory)` copies the module's LM preset into `directory`
    and returns the model that saved it (not to be changed)."""
    model, preset = lm_preset

    def copy(directory):
        shutil.copytree(preset, directory, dirs_exist_ok=True)
        return model

    return copy


# Dealt out among the backends run side by side (`split_cases`: the i-th
# case on the i-th of jax, tensorflow, torch, in turn: the transformer,
# the costliest, on torch).
@pytest.mark.split_cases
@pytest.mark.parametrize("name", ["classifier", "lm", "transformer", "vit"])
def test_every_zoo_model_round_trips_through_a_preset(tmp_path, name):
    model, inputs = tiny_model(name)
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
    model, inputs = tiny_model("transformer")
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
    model, _ = tiny_model("transformer")
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
def test_a_missing_file_is_named(saved_lm, tmp_path, missing):
    saved_lm(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing):
        TransformerLM.from_preset(tmp_path)


def test_the_wrong_model_class_is_named(saved_lm, tmp_path):
    saved_lm(tmp_path)
    with pytest.raises(ValueError, match="holds a keras_attn>TransformerLM"):
        Transformer.from_preset(tmp_path)


def test_a_newer_keras_attn_version_warns(lm_preset, tmp_path):
    model, _ = lm_preset
    model.save_to_preset(tmp_path, metadata={"keras_attn_version": "99.0.0"})
    with pytest.warns(UserWarning, match="saved by keras-attn 99.0.0"):
        TransformerLM.from_preset(tmp_path)


def test_loading_never_runs_code(saved_lm, tmp_path):
    saved_lm(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["config"]["activation"] = {
        "class_name": "__lambda__",
        "config": {"code": "print('pwned')", "defaults": None, "closure": None},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="safe_mode"):
        TransformerLM.from_preset(tmp_path)


def test_bad_arguments_are_named(lm_preset, tmp_path):
    model, _ = lm_preset
    with pytest.raises(ValueError, match="Received: weights_dtype='int8'"):
        model.save_to_preset(tmp_path, weights_dtype="int8")
    with pytest.raises(TypeError, match="save_to_preset"):
        model.save_to_preset(tmp_path, tokenizer=object())


def test_shipped_presets_are_package_data():
    assert preset_io.PRESETS_DIR.parent.name == "keras_attn"
    for name in preset_io.shipped_presets():
        assert list_presets()[name]["weights"], name


# Presets saved on one backend and loaded on another:
# tests/models/test_cross_backend_files.py.


# --- Malformed files: each named, with what was expected ------------------


@pytest.mark.parametrize(
    "file_name, content, message",
    [
        ("config.json", [], "must hold a JSON object with 'class_name'"),
        ("config.json", "a string", "Received: a JSON string"),
        ("config.json", {"class_name": "TransformerLM"}, "has no 'config' field"),
        ("config.json", {"config": {}}, "has no 'class_name' field"),
        (
            "config.json",
            {"class_name": "TransformerLM", "config": [1]},
            "`config` must be a JSON object. Received: config=[1]",
        ),
        ("metadata.json", [1, 2], "must hold a JSON object"),
        ("metadata.json", {"decoding": [5]}, "`decoding` must be a JSON object"),
        (
            "metadata.json",
            {"decoding": {"beam_size": "5"}},
            "`decoding.beam_size` must be a positive integer. Received: "
            "decoding.beam_size='5'",
        ),
        ("metadata.json", {"keras_attn_version": 3}, "`keras_attn_version` must be"),
        ("metadata.json", {"class_names": "abc"}, "`class_names` must be a list"),
        ("metadata.json", {"sequence_length": -1}, "`sequence_length` must be"),
    ],
)
def test_preset_json_of_the_wrong_shape_is_named(
    saved_lm, tmp_path, file_name, content, message
):
    saved_lm(tmp_path)
    (tmp_path / file_name).write_text(json.dumps(content))
    with pytest.raises(ValueError, match="is not a valid preset") as info:
        TransformerLM.from_preset(tmp_path)
    assert message in str(info.value)
    assert str(tmp_path / file_name) in str(info.value)


def test_a_config_the_model_refuses_names_the_file(saved_lm, tmp_path):
    saved_lm(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["config"]["num_layers"] = -2
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="config.json' does not describe") as info:
        TransformerLM.from_preset(tmp_path)
    assert "num_layers" in str(info.value)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[" * 200_000 + b"]" * 200_000, "is nested too deeply"),
        (b'{"config": "\xff\xfe"}', "is not UTF-8 text"),
    ],
    ids=["deep", "not-utf8"],
)
@pytest.mark.parametrize("file_name", ["config.json", "metadata.json"])
def test_unreadable_preset_json_is_named(
    saved_lm, tmp_path, file_name, content, message
):
    saved_lm(tmp_path)
    (tmp_path / file_name).write_bytes(content)
    with pytest.raises(ValueError, match=message) as info:
        TransformerLM.from_preset(tmp_path)
    assert str(tmp_path / file_name) in str(info.value)


def test_truncated_weights_are_named_as_truncated(saved_lm, tmp_path):
    saved_lm(tmp_path)
    weights = tmp_path / "model.weights.h5"
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[:96])
    with pytest.raises(ValueError, match="the file is truncated") as info:
        TransformerLM.from_preset(tmp_path)
    assert f"holds 96 of its {size} bytes" in str(info.value)
    assert str(weights) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)  # h5py's, chained


@pytest.mark.parametrize(
    "content, message",
    [(b"\x00garbage" * 8, "is corrupt"), (b"", "is empty")],
    ids=["corrupt", "empty"],
)
def test_a_bad_tokenizer_model_is_named(saved_lm, tmp_path, content, message):
    from keras_attn.text import SubwordTokenizer

    saved_lm(tmp_path)
    (tmp_path / "assets" / "tokenizer").mkdir(parents=True)
    model_file = tmp_path / "assets" / "tokenizer" / "tokenizer.model"
    model_file.write_bytes(content)
    (tmp_path / "tokenizer.json").write_text(
        json.dumps({"model_file": "assets/tokenizer/tokenizer.model"})
    )
    with pytest.raises(ValueError, match="not a usable SentencePiece") as info:
        SubwordTokenizer.from_preset(tmp_path)
    assert str(model_file) in str(info.value) and message in str(info.value)


# --- Saving over a preset: all or nothing ---------------------------------


class FailingTokenizer:
    def save_to_preset(self, directory):
        (directory / "tokenizer.json").write_text("{")
        raise OSError(28, "No space left on device")


def test_a_failed_save_leaves_the_old_preset_whole(saved_lm, tmp_path):
    directory = tmp_path / "preset"
    old = saved_lm(directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    new = tiny_lm(seed=5)
    with pytest.raises(OSError, match="No space left"):
        new.save_to_preset(directory, tokenizer=FailingTokenizer())
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["preset"]
    assert_same_weights(TransformerLM.from_preset(directory), old)
    # A good save replaces it.
    new.save_to_preset(directory)
    assert_same_weights(TransformerLM.from_preset(directory), new)


def test_save_refuses_folders_it_would_wipe_and_bad_metadata(tmp_path):
    model = tiny_lm()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "history.csv").write_text("epoch,loss\n")
    with pytest.raises(
        ValueError, match=r"holds files that are not part of a preset \(history.csv\)"
    ):
        model.save_to_preset(tmp_path / "run")
    assert (tmp_path / "run" / "history.csv").read_text() == "epoch,loss\n"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="which is a file"):
        model.save_to_preset(tmp_path / "file")
    with pytest.raises(ValueError, match="`decoding` must be a JSON object"):
        model.save_to_preset(tmp_path / "new", metadata={"decoding": [4]})
    with pytest.raises(TypeError, match="must hold JSON values only"):
        model.save_to_preset(tmp_path / "new", metadata={"when": object()})
    assert not (tmp_path / "new").exists()


KILLED_WHILE_SAVING = """
import os, signal, sys
import keras
from keras_attn.models import TransformerLM, preset_io

def write_half_then_die(self, path, weights_dtype):
    # SIGKILL in the middle of writing the new weights (the moment that
    # left a 96-byte `model.weights.h5` before saves were atomic).
    path.write_bytes(b"\\x89HDF\\r\\n\\x1a\\n" + b"\\x00" * 88)
    os.kill(os.getpid(), signal.SIGKILL)

preset_io.PresetMixin._save_preset_weights = write_half_then_die
keras.utils.set_random_seed(5)
model = TransformerLM.from_preset("lm_tiny", vocabulary_size=20)
model.save_to_preset(sys.argv[1])
"""


# File handling, the same on every backend: one of them runs it in CI.
@pytest.mark.split_backend("torch")
def test_a_kill_while_saving_over_a_preset_leaves_the_old_one(saved_lm, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    directory = tmp_path / "preset"
    old = saved_lm(directory)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_SAVING, str(directory)],
        # On JAX whatever the test's backend (the files are the same on
        # each): Keras imports there in half the CPU time of torch's.
        env=dict(
            os.environ,
            PYTHONPATH=str(Path(__file__).resolve().parents[2]),
            KERAS_BACKEND="jax",
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert_same_weights(TransformerLM.from_preset(directory), old)
