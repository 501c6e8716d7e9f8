"""`AttentionProjection`: `keras.layers.EinsumDense` as one 2-D product."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import assert_same_sgd_step

from keras_attn.layers import AttentionProjection

CASES = {
    # equation: (output_shape, bias_axes, input shape)
    "to heads": ("abc,cde->abde", (None, 3, 4), "de", (2, 5, 8)),
    "from heads": ("abcd,cde->abe", (None, 8), "e", (2, 5, 3, 4)),
    "to heads, no bias": ("abc,cde->abde", (None, 3, 4), None, (2, 5, 8)),
    # Not one of the two flattened equations: runs as EinsumDense.
    "other": ("abc,cd->abd", (None, 6), "d", (2, 5, 8)),
    # A bias over fewer axes than the outputs: runs as EinsumDense.
    "partial bias": ("abc,cde->abde", (None, 3, 4), "e", (2, 5, 8)),
}


def _pair(equation, output_shape, bias_axes, input_shape):
    kwargs = dict(
        equation=equation,
        output_shape=output_shape,
        bias_axes=bias_axes,
        bias_initializer="random_normal",
    )
    ours = AttentionProjection(**kwargs)
    reference = keras.layers.EinsumDense(**kwargs)
    ours.build(input_shape)
    reference.build(input_shape)
    reference.set_weights(ours.get_weights())
    return ours, reference


def test_config_and_keras_file_round_trip(tmp_path):
    # Not `run_layer_test`: like EinsumDense's, the symbolic output keeps the
    # `None` length of `output_shape`, which the harness reads as a mismatch.
    layer = AttentionProjection("abc,cde->abde", (None, 3, 4), bias_axes="de")
    config = layer.get_config()
    assert AttentionProjection.from_config(config).get_config() == config
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, layer(inputs))
    path = str(tmp_path / "projection.keras")
    model.save(path)
    revived = keras.saving.load_model(path)
    assert isinstance(revived.layers[-1], AttentionProjection)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(revived(x)), ops.convert_to_numpy(model(x)), rtol=1e-6
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_einsum_dense(case):
    equation, output_shape, bias_axes, input_shape = CASES[case]
    ours, reference = _pair(*CASES[case])
    x = np.random.default_rng(1).normal(size=input_shape).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(x)),
        ops.convert_to_numpy(reference(x)),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("case", ["to heads", "from heads"])
def test_training_step_matches_einsum_dense(case):
    """Same weights, one SGD step on the same batch: the same new weights."""
    input_shape = CASES[case][-1]
    layers = _pair(*CASES[case])
    rng = np.random.default_rng(2)
    x = rng.normal(size=input_shape).astype("float32")
    y = rng.normal(size=layers[1](x).shape).astype("float32")
    assert_same_sgd_step(*layers, x, y)


@pytest.mark.parametrize("case", sorted(CASES))
def test_flattened_equations_never_run_the_einsum(case, monkeypatch):
    """The 2-D path is taken for the two attention equations (and only them)
    on JAX and TensorFlow; on torch every equation is `EinsumDense`'s one
    `torch.einsum` call (fewer `keras.ops` calls in an eager step)."""
    equation, output_shape, bias_axes, input_shape = CASES[case]
    layer, _ = _pair(*CASES[case])
    x = np.random.default_rng(3).normal(size=input_shape).astype("float32")

    def einsum_call(self, inputs, training=None):
        raise AssertionError("EinsumDense.call ran")

    monkeypatch.setattr(keras.layers.EinsumDense, "call", einsum_call)
    flattens = case not in ("other", "partial bias")
    if keras.backend.backend() == "torch" or not flattens:
        with pytest.raises(AssertionError, match="EinsumDense.call ran"):
            layer(x)
    else:
        layer(x)
