"""`keras_attn.saving.load_model`: files are named in errors; safe mode holds."""

import zipfile

import keras
import numpy as np
import pytest

import keras_attn


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("saving") / "model.keras"
    model = keras_attn.models.Transformer.from_preset(
        "transformer_tiny", vocabulary_size=16
    )
    model.save(path)
    return path, model


def test_loads_with_safe_mode_on(saved_model):
    path, model = saved_model
    loaded = keras_attn.saving.load_model(path, safe_mode=True)
    for expected, actual in zip(model.get_weights(), loaded.get_weights(), strict=True):
        np.testing.assert_array_equal(actual, expected)


def test_truncated_file_is_named(saved_model, tmp_path):
    path, _ = saved_model
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"{truncated}.*not a complete `.keras` file"):
        keras_attn.saving.load_model(truncated)


def test_archive_with_corrupt_weights_is_named(saved_model, tmp_path):
    path, _ = saved_model
    corrupt = tmp_path / "corrupt.keras"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(corrupt, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith(".h5"):
                data = data[: len(data) // 3]
            target.writestr(item, data)
    with pytest.raises(Exception, match=f"{corrupt} cannot be loaded") as info:
        keras_attn.saving.load_model(corrupt)
    # The error keeps the type Keras raised (h5py's, not a blanket
    # ValueError), with Keras's error chained as its cause.
    cause = info.value.__cause__
    assert cause is not None and type(info.value) is type(cause)
    assert str(cause) in str(info.value)


def test_filepath_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="`filepath` must be .*Received: filepath=123"):
        keras_attn.saving.load_model(123)


@pytest.mark.parametrize("name", ["compile", "safe_mode"])
def test_flags_must_be_booleans(saved_model, name):
    path, _ = saved_model
    with pytest.raises(TypeError, match=f"Received: {name}='no'"):
        keras_attn.saving.load_model(path, **{name: "no"})


def test_missing_file_and_wrong_suffix_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="No model file at .*absent.keras"):
        keras_attn.saving.load_model(tmp_path / "absent.keras")
    weights = tmp_path / "model.weights.h5"
    weights.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=r"Expected a `.keras` file.*model.weights.h5"):
        keras_attn.saving.load_model(weights)


def test_lambda_layer_is_refused_in_safe_mode(tmp_path):
    inputs = keras.Input((4,))
    outputs = keras.layers.Lambda(lambda x: x * 2.0)(inputs)
    path = tmp_path / "lambda.keras"
    keras.Model(inputs, outputs).save(path)
    with pytest.raises(ValueError, match=f"{path} cannot be loaded.*safe_mode") as info:
        keras_attn.saving.load_model(path)
    assert isinstance(info.value.__cause__, ValueError)
    # Only when the user opts out, knowing where the file comes from.
    model = keras_attn.saving.load_model(path, safe_mode=False)
    np.testing.assert_allclose(model(np.ones((1, 4), "float32")), 2.0)


def test_every_keras_attn_config_is_plain_data(saved_model):
    """No `__lambda__` or pickled function anywhere in a saved config."""
    path, _ = saved_model
    with zipfile.ZipFile(path) as archive:
        config = archive.read("config.json").decode()
    assert "__lambda__" not in config and "function_type" not in config
