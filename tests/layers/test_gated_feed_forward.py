"""`FeedForward` with gated activations (GEGLU, SwiGLU, ReGLU and GEGLU with
GELU's tanh approximation) against NumPy.

`FFN(x) = (act(x W_gate + b_gate) * (x W_1 + b_1)) W_2 + b_2` (Shazeer,
"GLU Variants Improve Transformer", 2020), `act` GELU (exact, erf-based:
`keras.activations.gelu`'s default), SiLU, ReLU or GELU's tanh
approximation (T5 v1.1's `gelu_new`).
"""

import json
import math

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import FeedForward
from keras_attn.layers.blocks.feed_forward import GATED_ACTIVATIONS

_erf = np.vectorize(math.erf)


def tanh_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


NUMPY_GATES = {
    "geglu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),
    "swiglu": lambda x: x / (1.0 + np.exp(-x)),
    "reglu": lambda x: np.maximum(x, 0.0),
    "geglu_approximate": tanh_gelu,
}


def inputs(shape=(2, 5, 8), seed=0):
    return (np.random.default_rng(seed).normal(size=shape) * 2).astype("float32")


def numpy_weights(layer):
    return {
        name: [ops.convert_to_numpy(w).astype("float64") for w in sublayer.weights]
        for name, sublayer in (
            ("intermediate", layer.intermediate_dense),
            ("gate", layer.gate_dense),
            ("output", layer.output_dense),
        )
    }


def numpy_gated_ffn(x, weights, gate):
    x = x.astype("float64")
    (w1, b1), (wg, bg), (w2, b2) = (
        weights[name] for name in ("intermediate", "gate", "output")
    )
    return (gate(x @ wg + bg) * (x @ w1 + b1)) @ w2 + b2


def test_the_names():
    assert GATED_ACTIVATIONS == ("geglu", "swiglu", "reglu", "geglu_approximate")
    assert set(NUMPY_GATES) == set(GATED_ACTIVATIONS)


@pytest.mark.parametrize("activation", GATED_ACTIVATIONS)
def test_matches_numpy_formula(activation):
    x = inputs()
    layer = FeedForward(
        intermediate_dim=16, activation=activation, bias_initializer="random_normal"
    )
    layer.build(x.shape)
    weights = numpy_weights(layer)
    assert all(np.any(b != 0) for _, b in weights.values())
    expected = numpy_gated_ffn(x, weights, NUMPY_GATES[activation])
    output = ops.convert_to_numpy(layer(x, training=False))
    np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-5)


def test_geglu_uses_the_exact_gelu():
    # Keras's `gelu` defaults to `approximate=False`; GEGLU follows it, and
    # the tanh approximation differs by more than the tolerance here.
    x = inputs(seed=3) * 2
    layer = FeedForward(intermediate_dim=16, activation="geglu")
    layer.build(x.shape)
    weights = numpy_weights(layer)
    exact = numpy_gated_ffn(x, weights, NUMPY_GATES["geglu"])
    approximate = numpy_gated_ffn(x, weights, tanh_gelu)
    assert np.max(np.abs(exact - approximate)) > 1e-3
    output = ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(output, exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", GATED_ACTIVATIONS)
def test_config_keeps_the_name(activation):
    layer = FeedForward(intermediate_dim=16, activation=activation, use_bias=False)
    config = json.loads(json.dumps(layer.get_config()))
    assert config["activation"] == activation
    revived = FeedForward.from_config(config)
    assert revived.activation == activation and revived.gated
    assert revived.get_config() == layer.get_config()


def test_layer_contract():
    run_layer_test(
        FeedForward,
        dict(intermediate_dim=16, activation="swiglu", dropout=0.1),
        inputs(),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=6,
    )


def test_layer_contract_without_bias():
    output = run_layer_test(
        FeedForward,
        dict(intermediate_dim=16, activation="geglu", use_bias=False),
        inputs(),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=3,
        run_mixed_precision=False,
        run_fit=False,
    )
    assert np.all(np.isfinite(output))


def test_gated_weights_and_names():
    layer = FeedForward(
        intermediate_dim=16, activation="reglu", use_bias=False, name="ffn"
    )
    layer.build((2, 5, 8))
    shapes = {w.path: tuple(w.shape) for w in layer.weights}
    assert shapes == {
        "ffn/intermediate_dense/kernel": (8, 16),
        "ffn/gate_dense/kernel": (8, 16),
        "ffn/output_dense/kernel": (16, 8),
    }


def test_ungated_layer_is_unchanged():
    layer = FeedForward(intermediate_dim=16, activation="gelu", name="ffn")
    layer.build((2, 5, 8))
    assert not layer.gated and layer.gate_dense is None
    assert [w.path for w in layer.weights] == [
        "ffn/intermediate_dense/kernel",
        "ffn/intermediate_dense/bias",
        "ffn/output_dense/kernel",
        "ffn/output_dense/bias",
    ]
    assert layer.activation is keras.activations.gelu
    assert layer.get_config()["activation"] == "gelu"


def test_gated_model_saves_and_loads(tmp_path):
    x = inputs()
    layer = FeedForward(
        intermediate_dim=16, activation="swiglu", bias_initializer="random_normal"
    )
    inputs_tensor = keras.Input((5, 8))
    model = keras.Model(inputs_tensor, layer(inputs_tensor))
    path = str(tmp_path / "gated.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.layers[-1].activation == "swiglu"
    np.testing.assert_allclose(
        ops.convert_to_numpy(loaded(x)), ops.convert_to_numpy(model(x)), atol=1e-6
    )


@pytest.mark.parametrize("activation", ["swish_glu", "SwiGLU", 3])
def test_unknown_activation_is_refused(activation):
    with pytest.raises(ValueError, match=r"`activation`.*Received: activation="):
        FeedForward(intermediate_dim=16, activation=activation)
