"""`enable_lora` on every zoo model: trains, freezes the rest, round-trips."""

import os
import warnings

import keras
import numpy as np
import pytest
from keras import ops
from test_quantization import train
from zoo_cases import ZOO_MODELS, copy_task, make_model

from keras_attn.layers import AttentionProjection, PositionwiseDense
from keras_attn.saving import load_model


def _numpy(x):
    return ops.convert_to_numpy(x)


def _values(variables):
    return {v.path: _numpy(v).copy() for v in variables}


@pytest.mark.parametrize("kind", ZOO_MODELS)
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
