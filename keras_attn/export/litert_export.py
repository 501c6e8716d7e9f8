"""LiteRT (`.tflite`) export of zoo models' forward passes."""

import keras

from keras_attn.export.onnx_export import _input_signature
from keras_attn.validation import check_choice, check_positive_int

QUANTIZATIONS = (None, "dynamic_range")


def export_litert(model, path, batch_size=None, sequence_length=None, quantize=None):
    """Writes a zoo model's forward pass as a `.tflite` file of builtin ops.

    Keras's `model.export(path, format="litert")` with the input signature
    of the functional model and LiteRT's builtin ops only: a model that
    would need TensorFlow ops (the "Flex" delegate, which the
    `ai-edge-litert` interpreter lacks) fails here, at conversion, instead
    of in the interpreter. Token inputs need a fixed `sequence_length`:
    with a dynamic one the converter keeps a TensorFlow `StridedSlice`.

    Args:
        model: a built zoo model.
        path: the file to write, ending in `.tflite`.
        batch_size: int, a fixed batch size. Defaults to `None` (dynamic).
        sequence_length: int, the length of token inputs. Defaults to `None`
            (dynamic: conversion fails for token models).
        quantize: `None` (float32) or `"dynamic_range"` (int8 weights,
            float activations). Defaults to `None`.

    Returns:
        The path written, as a `str`.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ValueError(
            "`export_litert` needs the TensorFlow backend (Keras exports "
            "LiteRT from torch only through litert-torch, untested here). "
            f"Received: backend={backend!r}"
        )
    import tensorflow as tf

    quantize = check_choice(quantize, "quantize", QUANTIZATIONS)
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    if sequence_length is not None:
        sequence_length = check_positive_int(sequence_length, "sequence_length")
    options = {"target_spec": {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS]}}
    if quantize == "dynamic_range":
        options["optimizations"] = [tf.lite.Optimize.DEFAULT]
    model.export(
        str(path),
        format="litert",
        input_signature=_input_signature(model, batch_size, sequence_length),
        verbose=False,
        **options,
    )
    return str(path)
