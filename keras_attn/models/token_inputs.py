"""Checks of a model's inputs at its boundary: names, rank, batch, values.

Ranks, dtypes and input names are checked whenever a model is called,
traced or not. Values can only be read in eager calls, where ids must be
whole numbers (integer arrays, or float arrays of whole numbers, which the
model casts to int32 as any Keras functional model does) inside the
vocabulary. Inside `jit`/`tf.function` the token embedding clamps an id
outside the vocabulary into `[0, vocabulary_size)` (see
`docs/reliability.md`).
"""

import keras
import numpy as np

from keras_attn.validation import eager_values


def as_array(value, name):
    """`value` itself if it has a shape, else as a NumPy array (a nested list).

    Raises:
        ValueError: a ragged nested list, naming `name`.
    """
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    try:
        return np.asarray(value)
    except ValueError as error:  # Ragged: "inhomogeneous shape".
        raise ValueError(
            f"`{name}` must be a rectangular batch (every row of the same "
            f"length; pad the shorter ones). Received: {name}={value!r:.100}"
        ) from error


def check_input_names(inputs, expected):
    """Raises unless `inputs` is a dict with exactly the `expected` keys."""
    if not isinstance(inputs, dict):
        raise TypeError(
            f"The model's inputs must be a dict with keys {list(expected)}. "
            f"Received: inputs of type {type(inputs).__name__}"
        )
    unknown = sorted(set(inputs) - set(expected), key=str)
    missing = [name for name in expected if name not in inputs]
    if unknown or missing:
        raise ValueError(
            f"The model's inputs must be a dict with keys {list(expected)}. "
            f"Received: keys {list(inputs)} (unknown: {unknown}, missing: "
            f"{missing})"
        )


def check_token_batch(tokens, name, vocabulary_size, kind="token"):
    """Raises if `tokens` is not a 2-D integer batch of ids in the vocabulary.

    `kind="segment"` checks segment ids against `num_segments` instead,
    `vocabulary_size` being their number. Defaults to `"token"`.
    """
    shape = tuple(tokens.shape)
    if len(shape) != 2:
        raise ValueError(
            f"`{name}` must be a 2-D batch of {kind} ids (batch, length). "
            f"Received: {name}.shape={shape}"
        )
    dtype = keras.backend.standardize_dtype(tokens.dtype)
    if not ("int" in dtype or "float" in dtype):
        # Booleans and strings would be read as ids 0/1 or fail deep inside.
        raise TypeError(
            f"`{name}` must hold integer {kind} ids. Received: {name} with dtype={dtype}"
        )
    values = eager_values(tokens)
    if values is None or not values.size:
        # Traced or symbolic: the functional model casts to its int32 input
        # (Keras's own symbolic build may even pass a float spec here).
        return
    if values.dtype.kind == "f" and not np.all(np.mod(values, 1) == 0):
        raise TypeError(
            f"`{name}` must hold integer {kind} ids. Received: {name} with "
            f"dtype={values.dtype} and non-integer values"
        )
    low, high = int(values.min()), int(values.max())
    bound = "vocabulary_size" if kind == "token" else "num_segments"
    if low < 0 or high >= vocabulary_size:
        raise ValueError(
            f"`{name}` holds {kind} ids outside [0, {bound}={vocabulary_size}). "
            f"Received: ids from {low} to {high}"
        )


def check_same_batch_size(named_tensors):
    """Raises if the tensors' known batch sizes differ."""
    sizes = {name: tensor.shape[0] for name, tensor in named_tensors.items()}
    # Compared, not hashed: under `torch.export` a size is a `SymInt`.
    known = [size for size in sizes.values() if size is not None]
    if any(size != known[0] for size in known[1:]):
        received = ", ".join(
            f"{name}.shape={tuple(tensor.shape)}"
            for name, tensor in named_tensors.items()
        )
        raise ValueError(
            f"{' and '.join(f'`{name}`' for name in sizes)} must have the same "
            f"batch size. Received: {received}"
        )
