"""Finding and reading Hugging Face checkpoints: the cache, safetensors, refusals.

The checkpoint here is written by our own export (`keras_attn.hf.llama`),
so these tests need neither `transformers` nor torch; the family tests
(`test_llama_family.py`) check it against `transformers`.
"""

import json
import shutil

import keras
import numpy as np
import pytest

hub_constants = pytest.importorskip("huggingface_hub.constants")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from keras_attn.hf import files, llama  # noqa: E402
from keras_attn.models import TransformerLM  # noqa: E402

TOKENS = np.array([[5, 9, 3, 17, 2, 30]], "int32")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`(directory, model)`: a tiny Llama checkpoint and the model it holds."""
    arguments = llama.model_arguments(
        {
            "model_type": "llama",
            "vocab_size": 40,
            "hidden_size": 16,
            "intermediate_size": 24,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        }
    )
    keras.utils.set_random_seed(0)
    model = TransformerLM(**arguments)
    directory = tmp_path_factory.mktemp("hf_files") / "tiny-llama"
    llama.export(model, directory)
    return directory, model


def test_local_folder_and_offline_cache_load_the_same_model(
    checkpoint, tmp_path, monkeypatch
):
    directory, model = checkpoint
    expected = keras.ops.convert_to_numpy(model(TOKENS))
    assert files.is_hf_checkpoint(str(directory))
    assert not files.is_hf_checkpoint(directory.name)  # a bare name is a preset's

    # The huggingface_hub cache layout: refs/main -> snapshots/<commit>/.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repository = tmp_path / "hub" / "models--test-owner--tiny-llama"
    (repository / "refs").mkdir(parents=True)
    (repository / "refs" / "main").write_text(commit)
    shutil.copytree(directory, repository / "snapshots" / commit)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    for source in (
        str(directory),
        "hf://test-owner/tiny-llama",
        "hf://test-owner/tiny-llama@main",
    ):
        loaded = TransformerLM.from_preset(source)
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(loaded(TOKENS)), expected
        )

    # Ours afterwards: our preset format, offline, the same model.
    preset = loaded.save_to_preset(tmp_path / "our_preset")
    assert not files.is_hf_checkpoint(str(preset))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(TransformerLM.from_preset(str(preset))(TOKENS)),
        expected,
    )

    with pytest.raises(
        FileNotFoundError,
        match="'test-owner/absent'.*not in the Hugging Face cache.*HF_HUB_OFFLINE",
    ):
        files.resolve_checkpoint("hf://test-owner/absent")
    for malformed in ("hf://no-owner", "hf://a/b@", "hf://a/b/c"):
        with pytest.raises(ValueError, match="hf://owner/name"):
            files.resolve_checkpoint(malformed)


def test_sharded_and_half_precision_weights_read_as_float32(tmp_path):
    rng = np.random.default_rng(0)
    first = rng.normal(size=(3, 4)).astype("float16")
    second = rng.normal(size=(5,)).astype("float32")
    safetensors_numpy.save_file({"a": first}, str(tmp_path / "model-1.safetensors"))
    # bfloat16 (which NumPy cannot hold) written by hand: the upper half of
    # each float32.
    third = rng.normal(size=(2, 2)).astype("float32")
    halves = (third.view(np.uint32) >> 16).astype("<u2")
    header = json.dumps(
        {
            "b": {"dtype": "F32", "shape": [5], "data_offsets": [0, 20]},
            "c": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [20, 28]},
        }
    ).encode()
    (tmp_path / "model-2.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + second.tobytes() + halves.tobytes()
    )
    index = {
        "weight_map": {
            "a": "model-1.safetensors",
            "b": "model-2.safetensors",
            "c": "model-2.safetensors",
        }
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))

    weights = files.read_weights(tmp_path)
    assert {name: array.dtype for name, array in weights.items()} == dict.fromkeys(
        "abc", np.float32
    )
    np.testing.assert_array_equal(weights["a"], first.astype("float32"))
    np.testing.assert_array_equal(weights["b"], second)
    np.testing.assert_array_equal(
        weights["c"], (halves.astype(np.uint32) << 16).view(np.float32)
    )
    assert np.abs(weights["c"] - third).max() < 0.02

    index["weight_map"]["a"] = "../outside.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="outside the checkpoint"):
        files.read_weights(tmp_path)


def test_refusals_name_the_file_field_or_tensor(checkpoint, tmp_path):
    directory, _ = checkpoint
    config = json.loads((directory / "config.json").read_text())

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps(config))
    (pickled / "pytorch_model.bin").write_bytes(b"never opened")
    with pytest.raises(FileNotFoundError, match="'pytorch_model.bin', a pickle file"):
        TransformerLM.from_preset(str(pickled))

    malformed = tmp_path / "malformed"
    shutil.copytree(directory, malformed)
    (malformed / "config.json").write_text('{"model_type": "llama",')
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        files.read_config(malformed)
    (malformed / "config.json").write_text(
        json.dumps({**config, "model_type": "gpt_neox"})
    )
    with pytest.raises(
        ValueError,
        match="model_type='gpt_neox'.*Supported model types: bert, llama, .*mistral, qwen2",
    ):
        TransformerLM.from_preset(str(malformed))

    weights = files.read_weights(directory)
    name = "model.layers.0.self_attn.k_proj.weight"
    assert files.take(weights, name, (8, 16)) is weights[name]
    with pytest.raises(
        ValueError, match=f"tensor '{name}'.*shape \\(8, 16\\).*requires \\(16, 16\\)"
    ):
        files.take(weights, name, (16, 16))

    for broken, match in (
        ({k: v for k, v in weights.items() if k != name}, f"no tensor '{name}'"),
        ({**weights, name: weights[name][:4]}, f"tensor '{name}'.*shape \\(4, 16\\)"),
        (
            {**weights, "model.layers.7.mlp.up_proj.weight": weights[name]},
            "model.layers.7.mlp.up_proj.weight",
        ),
    ):
        damaged = tmp_path / f"damaged_{len(match)}"
        damaged.mkdir()
        (damaged / "config.json").write_text(json.dumps(config))
        safetensors_numpy.save_file(broken, str(damaged / "model.safetensors"))
        with pytest.raises((KeyError, ValueError), match=match):
            TransformerLM.from_preset(str(damaged))
