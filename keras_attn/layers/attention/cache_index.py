"""The index at which a decoding step writes its new positions into a cache.

Every cached decoding entry point (`TransformerDecoderBlock.call_cached`,
the block's keras-hub cache call, `Transformer.decode_step`,
`TransformerLM.decode_step`) hands its index to `resolve_cache_index`
before it reads or writes anything, so an index means the same on every
backend:

- a Python or NumPy integer (the value a caller writes, known before
  anything runs) must lie in `[0, cache_length - new_length]`, the slots
  the new positions fit in; anything else is a `ValueError` naming the
  argument, its value and that range (`-1` is not "the last slot": the
  backends disagreed on what it wrote, and torch wrote nothing);
- a tensor is clipped into that range in `keras.ops`, and the whole step
  (the slots written, the causal mask, the rotary and embedding
  positions) runs at the clipped index. A tensor index is the decoding
  loop's: traced inside `jit` / `tf.function` / JAX's `while_loop` its
  value cannot be read, and run eagerly (torch's and eager TensorFlow's
  `while_loop`) reading it would cost a device sync per step and behave
  otherwise than on JAX. Clipping is what XLA's `dynamic_update_slice`
  does to the write alone; here it is one behaviour on every backend.
"""

import keras
import numpy as np
from keras import ops

from keras_attn.validation import is_integer


def _length(tensor, axis):
    """The static size of `axis`, or a scalar tensor where it is unknown."""
    size = tensor.shape[axis]
    return ops.shape(tensor)[axis] if size is None else size


def _check_index_type(cache_index, name):
    """Refuses a boolean, a float or a tensor that is not an integer scalar."""
    if isinstance(cache_index, bool | np.bool_) or not hasattr(cache_index, "dtype"):
        if not is_integer(cache_index):
            raise TypeError(
                f"`{name}` must be an integer or a scalar integer tensor. "
                f"Received: {name}={cache_index!r:.100} of type "
                f"{type(cache_index).__name__}"
            )
        return
    dtype = keras.backend.standardize_dtype(cache_index.dtype)
    if "int" not in dtype:
        raise TypeError(
            f"`{name}` must be an integer or a scalar integer tensor. "
            f"Received: {name} with dtype={dtype}"
        )
    if tuple(cache_index.shape) != ():
        raise ValueError(
            f"`{name}` must be a scalar (one index for the whole batch). "
            f"Received: {name}.shape={tuple(cache_index.shape)}"
        )


def resolve_cache_index(cache_index, cache, new_positions, name="cache_index"):
    """`cache_index` checked (an integer) or clipped (a tensor) to where the
    step fits.

    Args:
        cache_index: int, NumPy integer or scalar int tensor, the slot of
            the first new position.
        cache: tensor whose axis 1 holds the cache's slots, `(batch,
            max_length, ...)`.
        new_positions: tensor whose axis 1 holds the new positions,
            `(batch, new_length, ...)`.
        name: str, the argument's public name, for the message. Defaults
            to `"cache_index"`.

    Returns:
        For a Python or NumPy integer, the `int` itself, checked to lie in
        `[0, max_length - new_length]`; for a tensor, the index clipped
        into that range (a `KerasTensor` is returned as it is).

    Raises:
        TypeError: `cache_index` is not an integer (a float, a boolean,
            a float tensor).
        ValueError: it is not a scalar, an integer outside the range, or
            the new positions do not fit the cache at all.
    """
    _check_index_type(cache_index, name)
    max_length = _length(cache, 1)
    new_length = _length(new_positions, 1)
    last = max_length - new_length
    if isinstance(last, int) and last < 0:
        raise ValueError(
            f"{new_length} new positions do not fit a cache of max_length="
            f"{max_length} slots, at any `{name}`. Received: {name}="
            f"{cache_index!r:.100}, new_length={new_length}"
        )
    if isinstance(cache_index, keras.KerasTensor):
        return cache_index
    if isinstance(cache_index, np.ndarray):  # 0-d: checked as its integer.
        cache_index = cache_index.item()
    if not is_integer(cache_index) or not isinstance(last, int):
        # A tensor (or a cache of unknown length): one behaviour everywhere.
        return ops.clip(cache_index, 0, last)
    if not 0 <= cache_index <= last:
        raise ValueError(
            f"`{name}` must be an integer in [0, {last}] (max_length - "
            f"new_length: the {new_length} new position(s) must fit the "
            f"cache's max_length={max_length} slots from `{name}` on). "
            f"Received: {name}={cache_index}"
        )
    return int(cache_index)
