"""average_checkpoints: the NumPy mean of checkpoint files, on any Keras model."""

import keras
import numpy as np
import pytest

from keras_attn.training import average_checkpoints
from keras_attn.training.checkpoint_averaging import last_epoch_checkpoints


def make_model():
    return keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)]
    )


def write_checkpoints(directory, count, suffix, first_epoch=0):
    """Writes `count` checkpoints of random weights; returns paths and weights."""
    model = make_model()
    rng = np.random.default_rng(0)
    paths, weights = [], []
    for i in range(count):
        values = [rng.normal(size=w.shape).astype("float32") for w in model.weights]
        model.set_weights(values)
        path = directory / f"epoch_{first_epoch + i}{suffix}"
        if suffix == ".keras":
            model.save(path)
        else:
            model.save_weights(path)
        paths.append(path)
        weights.append(values)
    return paths, weights


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_equals_the_numpy_mean_of_the_checkpoints(tmp_path, suffix):
    paths, weights = write_checkpoints(tmp_path, 3, suffix)
    model = make_model()
    assert average_checkpoints(model, paths) is model
    for averaged, *originals in zip(model.get_weights(), *weights):
        np.testing.assert_allclose(averaged, np.mean(originals, axis=0), atol=1e-6)


def test_one_checkpoint_loads_it_unchanged(tmp_path):
    paths, weights = write_checkpoints(tmp_path, 2, ".weights.h5")
    model = average_checkpoints(make_model(), paths[1:])
    for loaded, original in zip(model.get_weights(), weights[1]):
        np.testing.assert_array_equal(loaded, original)


def test_averages_a_keras_attn_transformer(tmp_path):
    from keras_attn.models import Transformer

    model = Transformer.from_preset("transformer_tiny", vocabulary_size=20)
    first = model.get_weights()
    model.save_weights(tmp_path / "a.weights.h5")
    model.set_weights([w + 1.0 for w in first])
    model.save_weights(tmp_path / "b.weights.h5")
    average_checkpoints(model, [tmp_path / "a.weights.h5", tmp_path / "b.weights.h5"])
    for averaged, original in zip(model.get_weights(), first):
        np.testing.assert_allclose(averaged, original + 0.5, atol=1e-6)


@pytest.mark.parametrize(
    "paths, error, message",
    [
        ([], ValueError, "Received: checkpoint_paths=[]"),
        ("epoch_1.keras", TypeError, "must be a list"),
        (["epoch_1.txt"], ValueError, "'epoch_1.txt'"),
        (["missing.keras"], FileNotFoundError, "missing.keras"),
    ],
)
def test_bad_paths_are_named(paths, error, message):
    with pytest.raises(error, match=None) as info:
        average_checkpoints(make_model(), paths)
    assert message in str(info.value)


def test_a_checkpoint_of_another_model_is_named(tmp_path):
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    other.save_weights(tmp_path / "other.weights.h5")
    with pytest.raises(ValueError, match="does not fit model"):
        average_checkpoints(make_model(), [tmp_path / "other.weights.h5"])


def trained_model(inputs):
    """A compiled model after one step: its optimizer has state too."""
    model = make_model()
    model.compile(optimizer="adam", loss="mse")
    model.fit(inputs, np.ones((4, 2)), verbose=0)
    return model


@pytest.mark.filterwarnings("ignore:Skipping variable loading")
@pytest.mark.parametrize("failure", ["truncated", "other_model"])
def test_a_failure_on_a_later_file_restores_the_original_weights(tmp_path, failure):
    # The first checkpoint holds weights and optimizer state that differ
    # from the model's: loading it changes both before the second fails.
    good = tmp_path / "good.weights.h5"
    trained_model(np.full((4, 3), 3.0)).save_weights(good)
    bad = tmp_path / "bad.weights.h5"
    if failure == "truncated":
        bad.write_bytes(good.read_bytes()[:200])
    else:
        keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)]).save_weights(bad)
    model = trained_model(np.ones((4, 3)))
    variables = model.variables + model.optimizer.variables
    originals = [keras.ops.convert_to_numpy(v.value).copy() for v in variables]
    with pytest.raises(ValueError) as info:
        average_checkpoints(model, [good, bad])
    message = str(info.value)
    assert str(bad) in message and "keeps the weights it had" in message
    if failure == "truncated":
        assert "cannot be read (the file is truncated: it holds 200 of" in message
    else:
        assert "does not fit model" in message
    for variable, original in zip(variables, originals, strict=True):
        value = keras.ops.convert_to_numpy(variable.value)
        np.testing.assert_array_equal(value, original)


def test_a_gap_between_epoch_checkpoints_is_refused_naming_the_epoch(tmp_path):
    # "The last 3" of a folder that lost epoch 2 would silently be 0, 1 and 3.
    paths, _ = write_checkpoints(tmp_path, 4, ".keras")
    model = make_model()
    before = model.get_weights()
    with pytest.raises(ValueError) as info:
        average_checkpoints(model, [paths[0], paths[1], paths[3]])
    message = str(info.value)
    assert "epoch 2 is missing between 'epoch_1.keras' and 'epoch_3.keras'" in message
    assert "Received: checkpoint_paths=['epoch_0.keras'" in message
    for weight, original in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(weight, original)  # Nothing was loaded.
    with pytest.raises(ValueError, match="'epoch_0.keras' \\(epoch 0\\) follows"):
        average_checkpoints(model, [paths[1], paths[0]])  # Newest first.


def test_last_epoch_checkpoints_are_the_consecutive_last_ones(tmp_path):
    # Epochs 1 to 4, as `ModelCheckpoint("epoch_{epoch}...")` names them.
    paths, weights = write_checkpoints(tmp_path, 4, ".weights.h5", first_epoch=1)
    assert last_epoch_checkpoints(tmp_path, 2) == paths[2:]
    assert last_epoch_checkpoints(tmp_path, 3, last_epoch=3) == paths[:3]
    model = average_checkpoints(make_model(), last_epoch_checkpoints(tmp_path, 2))
    for averaged, *originals in zip(model.get_weights(), *weights[2:]):
        np.testing.assert_allclose(averaged, np.mean(originals, axis=0), atol=1e-6)


@pytest.mark.parametrize(
    "removed, count, last_epoch, message",
    [
        (2, 3, None, "The checkpoint of epoch 2 is missing"),
        # Training's last epoch (e.g. from its backup) has no file: the
        # highest file alone would average epochs 3 and 4 in its place.
        (None, 2, 5, "The checkpoint of epoch 5 is missing"),
        (None, 5, None, "the last 5 epochs, but training has 4"),
    ],
    ids=["gap", "last-missing", "too-few"],
)
def test_last_epoch_checkpoints_refuse_a_missing_epoch(
    tmp_path, removed, count, last_epoch, message
):
    paths, _ = write_checkpoints(tmp_path, 4, ".keras", first_epoch=1)
    if removed is not None:
        paths[removed - 1].unlink()
    with pytest.raises(ValueError, match=message) as info:
        last_epoch_checkpoints(tmp_path, count, last_epoch=last_epoch)
    assert f"count={count}" in str(info.value)


@pytest.mark.parametrize(
    "count, error", [(0, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_last_epoch_checkpoints_check_count(tmp_path, count, error):
    with pytest.raises(error, match=f"Received: count={count!r}"):
        last_epoch_checkpoints(tmp_path, count)
