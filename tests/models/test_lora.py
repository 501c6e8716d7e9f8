"""`enable_lora` on every zoo model: trains, freezes the rest, round-trips."""

import os
import warnings

import keras
import numpy as np
import pytest
from keras import ops
from test_quantization import train
from zoo_cases import SPLIT_ZOO_MODELS, copy_task, make_model

from keras_attn.layers import AttentionProjection, PositionwiseDense
from keras_attn.saving import load_model


def _numpy(x):
    return ops.convert_to_numpy(x)


def _values(variables):
    return {v.path: _numpy(v).copy() for v in variables}


# The zoo models are dealt out among the backends run side by side; the
# LoRA layers themselves are tested on every backend (below, and
# tests/layers/test_vocabulary_projection.py).
@pytest.mark.split_cases
@pytest.mark.parametrize("kind", SPLIT_ZOO_MODELS)
def test_lora_trains_only_the_factors_and_round_trips(kind, tmp_path):
    inputs, targets = copy_task(kind)
    model = make_model(kind)
    model.enable_lora(rank=2)

    lora_layers = model.lora_layers()
    names = {layer.name for layer in lora_layers}
    assert names == set(model.default_lora_layer_names())
    assert all(
        isinstance(lay, (AttentionProjection, PositionwiseDense)) for lay in lora_layers
    )
    trainable = {v.path.split("/")[-1] for v in model.trainable_weights}
    assert trainable == {"lora_kernel_a", "lora_kernel_b"}
    assert len(model.trainable_weights) == 2 * len(lora_layers)

    frozen = _values(model.weights)
    before = _numpy(model(inputs))
    train(model, inputs, targets, steps=20, learning_rate=1e-2)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    after = _numpy(model(inputs))
    assert float(loss(targets, after)) < float(loss(targets, before))
    for path, value in _values(model.non_trainable_weights).items():
        np.testing.assert_array_equal(value, frozen[path], err_msg=path)

    path = os.path.join(tmp_path, "lora.keras")
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No optimizer-state warning.
        loaded = load_model(path)
    assert loaded.get_config()["lora"]["rank"] == 2
    expected = _numpy(model.predict(inputs, verbose=0))
    np.testing.assert_array_equal(_numpy(loaded.predict(inputs, verbose=0)), expected)
    assert [v.path for v in loaded.trainable_weights] == [
        v.path for v in model.trainable_weights
    ]
    for ours, theirs in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(_numpy(ours), _numpy(theirs))

    # The factors alone, into a fresh copy of the base model.
    lora_path = os.path.join(tmp_path, "model.lora.npz")
    model.save_lora_weights(lora_path)
    base = make_model(kind)
    for variable in base.weights:
        variable.assign(frozen[variable.path])
    base.load_lora_weights(lora_path)
    np.testing.assert_allclose(_numpy(base(inputs)), expected, rtol=1e-5, atol=1e-5)

    # Last, as it overwrites the trained factors: the weights file.
    _check_weights_load_into_a_model_without_lora(model, kind, inputs, tmp_path)


def _check_weights_load_into_a_model_without_lora(model, kind, inputs, tmp_path):
    """As Keras's own layers: `load_weights` into a fresh model, merged.

    `model`: LoRA enabled, trained (its factors are not zero).
    """
    expected = _numpy(model(inputs))
    path = os.path.join(tmp_path, "lora.weights.h5")
    model.save_weights(path)

    plain = make_model(kind)
    plain.load_weights(path)
    np.testing.assert_allclose(_numpy(plain(inputs)), expected, rtol=1e-5, atol=1e-5)

    # And a plain file into the LoRA model: the factors start again at zero.
    plain_path = os.path.join(tmp_path, "plain.weights.h5")
    plain.save_weights(plain_path)
    with warnings.catch_warnings():
        # The plain model never trained: its file has no optimizer state.
        warnings.filterwarnings("ignore", message="Skipping variable loading")
        model.load_weights(plain_path)
    np.testing.assert_allclose(_numpy(model(inputs)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer_class", [AttentionProjection, PositionwiseDense])
def test_lora_files_without_the_merged_part_still_load(layer_class):
    """Files from before the merged part: every variable, no count."""
    if layer_class is AttentionProjection:
        layer = layer_class("abc,cde->abde", output_shape=(None, 2, 4), bias_axes="de")
    else:
        layer = layer_class(units=4)
    layer.build((2, 3, 6))
    layer.enable_lora(2)
    for variable in layer.variables:
        variable.assign(np.random.default_rng(0).normal(size=variable.shape))
    x = np.random.default_rng(1).normal(size=(2, 3, 6)).astype("float32")
    old_format = {str(i): _numpy(v) for i, v in enumerate(layer.variables)}

    copy = layer_class.from_config(layer.get_config())
    copy.build((2, 3, 6))  # LoRA comes back with the config (`lora_rank`)
    assert copy.lora_enabled
    copy.load_own_variables(old_format)
    np.testing.assert_array_equal(_numpy(copy(x)), _numpy(layer(x)))

    store = {}
    layer.save_own_variables(store)
    merged_count = int(store["lora_merged_count"])
    assert len(store) == merged_count + len(layer.variables) + 1
    store.pop(str(merged_count + len(layer.variables) - 1))  # one short
    with pytest.raises(ValueError, match="saved LoRA state has"):
        copy.load_own_variables(store)
