"""The one test harness every public layer goes through.

`run_layer_test` checks the Keras layer contract, not the numbers: config
round trip, eager and symbolic calls (static and dynamic lengths), weight
count, `.keras` save/load, one `fit` step and a mixed-precision call. The
numbers are checked against independent references in each layer's tests.
"""

import json
import os
import tempfile

import keras
import numpy as np
from keras import ops


def _to_numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def _is_float(array):
    return np.issubdtype(np.asarray(array).dtype, np.floating)


def _call(layer, inputs, call_kwargs):
    """Calls `layer` with a tensor, or a dict whose first entry is positional."""
    if isinstance(inputs, dict):
        first, *rest = inputs
        return layer(inputs[first], **{k: inputs[k] for k in rest}, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _symbolic_inputs(input_data, dynamic):
    """`keras.Input`s matching `input_data`, batch axis unknown.

    With `dynamic=True` every axis but the feature axis of float inputs is
    unknown too (token ids and masks: every axis), as when sequences of any
    length are fed.
    """

    def make(name, array):
        array = np.asarray(array)
        shape = array.shape[1:]
        if dynamic:
            keep_last = _is_float(array) and array.ndim >= 3
            shape = (
                tuple([None] * (len(shape) - keep_last))
                + shape[len(shape) - keep_last :]
            )
        return keras.Input(shape=shape, dtype=str(array.dtype), name=name)

    if isinstance(input_data, dict):
        return {name: make(name, value) for name, value in input_data.items()}
    return make("inputs", input_data)


def _assert_shape(actual, expected, what, allow_unknown=False):
    """`actual == expected`; with `allow_unknown`, `None` in `actual` passes."""
    actual = tuple(actual)
    assert len(actual) == len(expected), f"{what}: {actual} vs {expected}"
    for got, want in zip(actual, expected):
        if not (allow_unknown and got is None):
            assert got == want, f"{what}: shape {actual}, expected {expected}"


def _check_config(layer_cls, init_kwargs):
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    json.dumps(config)  # Must be plain data.
    for name, value in init_kwargs.items():
        if isinstance(value, bool | int | float) or value is None:
            assert config[name] == value, (name, config[name], value)
    revived = layer_cls.from_config(config)
    assert type(revived) is layer_cls
    assert revived.get_config() == config


def _check_fit(model, input_data, output):
    """One optimizer step: a finite loss and weights that moved."""
    rng = np.random.default_rng(1)
    targets = rng.normal(size=output.shape).astype("float32")
    # Cheapest single step on CPU: one XLA program on JAX, eager on TF
    # (tracing plus XLA would cost seconds per layer).
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="mse",
        run_eagerly=keras.backend.backend() != "jax",
    )
    before = [np.array(_to_numpy(w)) for w in model.trainable_weights]
    history = model.fit(
        input_data, targets, batch_size=len(targets), epochs=1, verbose=0
    )
    loss = history.history["loss"][-1]
    assert np.isfinite(loss), loss
    after = [_to_numpy(w) for w in model.trainable_weights]
    for weight in after:
        assert np.all(np.isfinite(weight))
    if before:
        changed = [not np.array_equal(b, a) for b, a in zip(before, after)]
        assert any(changed), "no trainable weight changed after a fit step"


def _check_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs):
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        layer = layer_cls(**init_kwargs)
        output = _call(layer, input_data, call_kwargs)
        assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
        assert np.all(np.isfinite(_to_numpy(output)))
        for weight in layer.weights:
            assert keras.backend.standardize_dtype(weight.dtype) == "float32", (
                weight.path
            )
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    expected_num_trainable_weights,
    call_kwargs=None,
    run_mixed_precision=True,
    run_fit=True,
):
    """Runs the layer contract checks on one layer configuration.

    Args:
        layer_cls: the layer class.
        init_kwargs: dict, constructor arguments.
        input_data: a NumPy array (the first call argument), or a dict of
            call arguments whose first entry is passed positionally.
        expected_output_shape: tuple, the eager output shape.
        expected_num_trainable_weights: int.
        call_kwargs: dict of non-tensor call arguments. Defaults to `None`.
        run_mixed_precision: bool, whether to call the layer under
            `"mixed_bfloat16"`. Defaults to `True`.
        run_fit: bool, whether to run one `fit` step. Defaults to `True`.

    Returns:
        The eager output, as NumPy.
    """
    call_kwargs = call_kwargs or {}
    if isinstance(input_data, dict):
        input_data = {k: np.asarray(v) for k, v in input_data.items()}
    else:
        input_data = np.asarray(input_data)

    # (1) Config round trip.
    _check_config(layer_cls, init_kwargs)

    # (2) Eager call.
    layer = layer_cls(**init_kwargs)
    eager = _to_numpy(_call(layer, input_data, call_kwargs))
    _assert_shape(eager.shape, expected_output_shape, "eager output")
    assert np.all(np.isfinite(eager))

    # (3) Weight count.
    assert len(layer.trainable_weights) == expected_num_trainable_weights, [
        w.path for w in layer.trainable_weights
    ]

    # (2, continued) Symbolic calls, static then dynamic lengths, in functional models
    # that share the layer: their outputs must equal the eager call's.
    models = []
    for dynamic in (False, True):
        inputs = _symbolic_inputs(input_data, dynamic)
        symbolic = _call(layer, inputs, call_kwargs)
        assert isinstance(symbolic, keras.KerasTensor), type(symbolic)
        expected_symbolic = (None, *expected_output_shape[1:])
        _assert_shape(
            symbolic.shape, expected_symbolic, "symbolic output", allow_unknown=dynamic
        )
        model = keras.Model(inputs, symbolic)
        np.testing.assert_allclose(
            _to_numpy(model(input_data)), eager, atol=1e-6, rtol=1e-6
        )
        models.append(model)
    model = models[0]

    # (4) `.keras` save and load.
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    assert any(type(sub) is layer_cls for sub in loaded.layers)
    np.testing.assert_allclose(
        _to_numpy(loaded(input_data)), eager, atol=1e-6, rtol=1e-6
    )

    # (5) One training step (a layer without weights has nothing to train).
    if run_fit and expected_num_trainable_weights:
        _check_fit(model, input_data, eager)

    # (6) Mixed precision.
    if run_mixed_precision:
        _check_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs)
    return eager


def gradient(fn, x, jit=True):
    """`d sum(fn(x)) / dx` on the current backend, as float32 NumPy.

    On JAX the gradient is compiled as one program (`jit=True`), much
    cheaper on CPU than op-by-op; `jit=False` runs it op by op.
    """
    backend = keras.backend.backend()
    x = ops.convert_to_tensor(x)
    if backend == "jax":
        import jax

        grad_fn = jax.grad(lambda t: ops.sum(ops.cast(fn(t), "float32")))
        grad = (jax.jit(grad_fn) if jit else grad_fn)(x)
    elif backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(x)
            total = ops.sum(ops.cast(fn(x), "float32"))
        grad = tape.gradient(total, x)
    elif backend == "torch":
        import torch

        x = x.detach().clone().requires_grad_(True)
        total = ops.sum(ops.cast(fn(x), "float32"))
        (grad,) = torch.autograd.grad(total, x)
    else:
        raise NotImplementedError(f"gradient() does not support {backend}")
    return _to_numpy(grad)


def assert_same_sgd_step(layer, reference, x, y):
    """One SGD step of `layer` and of `reference` (equal weights) on `(x, y)`
    must leave equal weights: their gradients agree.
    """
    updated = []
    for each in (layer, reference):
        inputs = keras.Input(x.shape[1:])
        model = keras.Model(inputs, each(inputs))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        model.train_on_batch(x, y)
        updated.append(each.get_weights())
    for ours, theirs in zip(*updated):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
