"""LiteRT (`.tflite`) export of zoo models' forward passes."""

import keras

from keras_attn.export.atomic_export import check_file_destination, export_file
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

    The file is written beside `path` under a hidden name, checked to be a
    LiteRT flatbuffer and renamed over `path`: a kill, a full disk or a
    failed conversion leaves a previous file at `path` byte-identical.

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

    path = check_file_destination(path, "export_litert")
    quantize = check_choice(quantize, "quantize", QUANTIZATIONS)
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    if sequence_length is not None:
        sequence_length = check_positive_int(sequence_length, "sequence_length")
    options = {"target_spec": {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS]}}
    if quantize == "dynamic_range":
        options["optimizations"] = [tf.lite.Optimize.DEFAULT]
    signature = _input_signature(model, batch_size, sequence_length)

    def write(temporary):
        model.export(
            str(temporary),
            format="litert",
            input_signature=signature,
            verbose=False,
            **options,
        )

    return str(
        export_file(path, write, lambda temporary: _check_litert(temporary, path))
    )


def _check_litert(path, destination):
    """Raises `RuntimeError` unless `path` starts as a LiteRT flatbuffer."""
    with open(path, "rb") as file:
        header = file.read(8)
    # A flatbuffer holds its file identifier at bytes 4-8; LiteRT's is TFL3.
    if header[4:8] != b"TFL3":
        raise RuntimeError(
            "The LiteRT converter wrote a file that is not a LiteRT model "
            f"(no TFL3 identifier), so {destination} was not replaced."
        )
