"""Checks of token-id inputs at a model's boundary: rank, batch, values.

Ranks are checked whenever a model is called, traced or not. Values can
only be read in eager calls, where ids must be whole numbers (integer
arrays, or float arrays of whole numbers, which the model casts to int32
as any Keras functional model does) inside the vocabulary. Inside
`jit`/`tf.function` an embedding lookup of an id outside the vocabulary is backend behaviour (JAX
clamps it to the nearest row, TensorFlow on CPU raises at run time).
"""

import keras
import numpy as np


def _eager_values(tensor):
    """The NumPy values of `tensor`, or `None` while it is traced or symbolic."""
    if isinstance(tensor, keras.KerasTensor):
        return None
    try:
        return keras.ops.convert_to_numpy(tensor)
    except Exception:  # A JAX tracer or a graph-mode tf.Tensor has no values.
        return None


def check_token_ids(tokens, name, vocabulary_size):
    """Raises if `tokens` is not a 2-D integer batch of ids in the vocabulary."""
    shape = tuple(tokens.shape)
    if len(shape) != 2:
        raise ValueError(
            f"`{name}` must be a 2-D batch of token ids (batch, length). "
            f"Received: {name}.shape={shape}"
        )
    values = _eager_values(tokens)
    if values is None or not values.size:
        # Traced or symbolic: the functional model casts to its int32 input
        # (Keras's own symbolic build may even pass a float spec here).
        return
    if values.dtype.kind == "f" and not np.all(np.mod(values, 1) == 0):
        raise TypeError(
            f"`{name}` must hold integer token ids. Received: {name} with "
            f"dtype={values.dtype} and non-integer values"
        )
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= vocabulary_size:
        raise ValueError(
            f"`{name}` holds token ids outside [0, vocabulary_size="
            f"{vocabulary_size}). Received: ids from {low} to {high}"
        )


def check_same_batch_size(named_tensors):
    """Raises if the tensors' known batch sizes differ."""
    sizes = {name: tensor.shape[0] for name, tensor in named_tensors.items()}
    if len({size for size in sizes.values() if size is not None}) > 1:
        received = ", ".join(
            f"{name}.shape={tuple(tensor.shape)}"
            for name, tensor in named_tensors.items()
        )
        raise ValueError(
            f"{' and '.join(f'`{name}`' for name in sizes)} must have the same "
            f"batch size. Received: {received}"
        )
