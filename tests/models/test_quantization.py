"""`model.quantize` on every zoo model, and the layers that make it work.

Reference: Keras's own quantized layers (`Dense`, `EinsumDense`,
`ReversibleEmbedding`) with the same weights. keras-hub's quantized GPT-2
backbone changes its logits by about 1% (relative norm of the change);
the tiny models here, trained on a copy task, stay within `MAX_RELATIVE_ERROR`.
"""

import os
import warnings

import keras
import numpy as np
import pytest
from keras import ops
from zoo_cases import ZOO_MODELS, copy_task, make_inputs, make_model

from keras_attn.layers import (
    AttentionProjection,
    PositionwiseDense,
    TokenAndPositionEmbedding,
    VocabularyProjection,
)
from keras_attn.saving import load_model

MAX_RELATIVE_ERROR = 0.05
MIN_SAME_PREDICTIONS = 0.9


# Keras collects garbage for every kernel `quantize` replaces (conftest.py).
pytestmark = pytest.mark.usefixtures("no_collection_per_deleted_variable")


def _numpy(x):
    return ops.convert_to_numpy(x)


def _relative_error(actual, expected):
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def _compile(model, learning_rate=3e-3):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


def train(model, inputs, targets, steps=40, learning_rate=3e-3):
    """`steps` Adam updates on the same batch, in one epoch; the losses."""
    _compile(model, learning_rate)
    repeat = lambda x: np.concatenate([x] * steps)  # noqa: E731
    history = model.fit(
        keras.tree.map_structure(repeat, inputs),
        repeat(targets),
        batch_size=len(targets),
        epochs=1,
        verbose=0,
        shuffle=False,
    )
    return history


# Every zoo model, in the order `split_cases` deals them out among the
# backends run side by side (the i-th to the i-th of jax, tensorflow, torch,
# in turn): the transformer, the costliest, to torch, where it trains
# fastest. The quantized layers themselves are tested against Keras's on
# every backend (below).
KINDS = ("classifier", "lm", "transformer", "vit")
assert sorted(KINDS) == sorted(ZOO_MODELS)


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", KINDS)
def test_int8_model_is_close_and_round_trips(kind, tmp_path):
    inputs, targets = copy_task(kind)
    model = make_model(kind)
    train(model, inputs, targets)
    expected = _numpy(model(inputs))

    with warnings.catch_warnings():
        # Layers without weights to quantize (norms, dropout) warn.
        warnings.simplefilter("ignore")
        model.quantize("int8")
    modes = {
        layer.path: layer.quantization_mode
        for layer in model._flatten_layers()
        if isinstance(layer, (AttentionProjection, PositionwiseDense))
        or isinstance(layer, keras.layers.Embedding)
    }
    assert modes and set(modes.values()) == {"int8"}, modes
    quantized = _numpy(model(inputs))
    # Compiled too, as users serve it. It is not bit-equal to the eager call:
    # a last-digit difference can move an activation to the next int8 step.
    compiled = _numpy(model.predict(inputs, verbose=0))
    # The float model's optimizer state does not apply to the int8 weights:
    # compiled again, the saved model loads without Keras's warning.
    _compile(model)
    model.optimizer.build(model.trainable_variables)

    for outputs in (quantized, compiled):
        assert _relative_error(outputs, expected) < MAX_RELATIVE_ERROR
        same = np.mean(outputs.argmax(-1) == expected.argmax(-1))
        assert same >= MIN_SAME_PREDICTIONS

    path = os.path.join(tmp_path, "int8.keras")
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_model(path)
    np.testing.assert_array_equal(_numpy(loaded(inputs)), quantized)


def test_float8_model_runs_and_round_trips(tmp_path):
    model = make_model("lm")
    inputs = make_inputs("lm")
    expected = _numpy(model(inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Embeddings have no float8 mode.
        model.quantize("float8")
    assert model.blocks[0].self_attention.query_dense.quantization_mode == "float8"
    quantized = _numpy(model(inputs))
    assert _relative_error(quantized, expected) < 0.2
    path = os.path.join(tmp_path, "float8.keras")
    model.save(path)
    np.testing.assert_array_equal(_numpy(load_model(path)(inputs)), quantized)


def _copy_weights(source, target):
    target.set_weights(source.get_weights())
    return target


@pytest.mark.parametrize(
    "equation, output_shape, bias_axes, input_shape",
    [
        ("abc,cde->abde", (None, 2, 4), "de", (2, 5, 8)),
        ("abcd,cde->abe", (None, 8), "e", (2, 5, 2, 4)),
    ],
)
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_attention_projection_quantizes_as_einsum_dense(
    mode, equation, output_shape, bias_axes, input_shape
):
    x = np.random.default_rng(0).normal(size=input_shape).astype("float32")
    args = dict(bias_axes=bias_axes, bias_initializer="random_normal")
    ours = AttentionProjection(equation, output_shape, **args)
    ours.build(input_shape)
    reference = keras.layers.EinsumDense(equation, output_shape, **args)
    reference.build(input_shape)
    _copy_weights(ours, reference)
    for layer in (ours, reference):
        layer.quantize(mode)
    assert ours.quantization_mode == mode
    np.testing.assert_allclose(_numpy(ours(x)), _numpy(reference(x)), rtol=1e-6)


@pytest.mark.parametrize("cls", [PositionwiseDense, VocabularyProjection])
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_dense_subclasses_quantize_as_dense(cls, mode):
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    ours = cls(6, bias_initializer="random_normal")
    reference = keras.layers.Dense(6, bias_initializer="random_normal")
    ours.build((None, 8))
    reference.build((None, 8))
    _copy_weights(ours, reference)
    for layer in (ours, reference):
        layer.quantize(mode)
    np.testing.assert_allclose(_numpy(ours(x)), _numpy(reference(x)), rtol=1e-6)


def test_unknown_subclasses_refuse_quantize():
    class Projection(AttentionProjection):
        pass

    class Dense(PositionwiseDense):
        pass

    projection = Projection("abc,cde->abde", (None, 2, 4))
    projection.build((2, 5, 8))
    dense = Dense(4)
    dense.build((None, 8))
    for layer in (projection, dense):
        with pytest.raises(NotImplementedError, match="Received: mode=int8"):
            layer.quantize("int8")


def test_tied_embedding_projects_with_the_int8_table_and_scale():
    """Both directions equal Keras's quantized `ReversibleEmbedding`."""
    layer = TokenAndPositionEmbedding(30, 8, 16, scale_by_sqrt_dim=False)
    tokens = np.random.default_rng(2).integers(0, 30, size=(2, 5)).astype("int32")
    hidden = np.random.default_rng(3).normal(size=(2, 5, 16)).astype("float32")
    layer(tokens)
    reference = keras.layers.ReversibleEmbedding(30, 16)
    reference.build((2, 5))
    reference.set_weights(layer.token_embedding.get_weights())
    float_logits = _numpy(layer(hidden, reverse=True))
    for embedding in (layer.token_embedding, reference):
        embedding.quantize("int8")
    positions = _numpy(layer.position_encoding(ops.zeros((2, 5, 16))))
    np.testing.assert_allclose(
        _numpy(layer(tokens)), _numpy(reference(tokens)) + positions, rtol=1e-6
    )
    logits = _numpy(layer(hidden, reverse=True))
    np.testing.assert_allclose(logits, _numpy(reference(hidden, reverse=True)))
    assert _relative_error(logits, float_logits) < MAX_RELATIVE_ERROR
