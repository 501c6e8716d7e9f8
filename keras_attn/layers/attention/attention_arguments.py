"""Argument checks of `MultiHeadAttention`.

The checks keep `keras.layers.MultiHeadAttention`'s messages where the two
layers share an argument, so the layer stays a drop-in.
"""

import numbers


def check_head_dim(value, name, allow_none=False):
    """Positive int check with `keras.layers.MultiHeadAttention`'s message.

    Raises:
        TypeError: if `value` is not a number at all (`"2"`, a list), as
            the blocks' checks do.
        ValueError: if it is a number but not a positive integer (`0`,
            `1.5`, `True`), as Keras's layer does.
    """
    if allow_none and value is None:
        return None
    expected = "a positive integer or `None`" if allow_none else "a positive integer"
    if not isinstance(value, numbers.Real):
        raise TypeError(
            f"Received an invalid value for argument `{name}`, expected "
            f"{expected}. Received: {name}={value!r} of type "
            f"{type(value).__name__}"
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected "
            f"{expected}. Received: {name}={value}"
        )
    return int(value)


def _known_dims_differ(first, second):
    """Whether two shapes differ in rank or in a dimension known in both."""
    if len(first) != len(second):
        return True
    return any(
        a is not None and b is not None and a != b for a, b in zip(first, second)
    )


def check_key_value_shapes(value_shape, key_shape):
    if _known_dims_differ(tuple(value_shape)[1:-1], tuple(key_shape)[1:-1]):
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must be "
            f"equal. Received: value_shape={tuple(value_shape)} and "
            f"key_shape={tuple(key_shape)}"
        )


def check_input_shapes(query_shape, value_shape, key_shape):
    """`query`, `value` and `key` have one rank, >= 3, and known features."""
    check_key_value_shapes(value_shape, key_shape)
    rank = len(query_shape)
    for argument, shape in (
        ("query", query_shape),
        ("value", value_shape),
        ("key", key_shape),
    ):
        if len(shape) < 3 or shape[-1] is None:
            raise ValueError(
                f"`{argument}` must have shape (batch, length, features) "
                f"(or more axes, with `attention_axes`) with a known feature "
                f"size. Received: {argument}.shape={tuple(shape)}"
            )
        if len(shape) != rank:
            raise ValueError(
                f"`{argument}` must have the rank of `query`. Received: "
                f"query.shape={tuple(query_shape)}, "
                f"{argument}.shape={tuple(shape)}"
            )


def standardize_output_shape(output_shape):
    """`output_shape` (an int, or a tuple or list of ints) as a tuple, or None."""
    if output_shape is None:
        return None
    if isinstance(output_shape, numbers.Integral) and not isinstance(
        output_shape, bool
    ):
        output_shape = (output_shape,)
    if not isinstance(output_shape, (tuple, list)):
        raise ValueError(
            f"Invalid `output_shape`: {output_shape}. When specified, the "
            "`output_shape` should be of type tuple, list, or int."
        )
    if not output_shape:  # `()`, as in Keras: the default.
        return None
    for size in output_shape:
        check_head_dim(size, "output_shape")
    return tuple(int(size) for size in output_shape)


def standardize_attention_axes(attention_axes):
    """`attention_axes` as a tuple of ints, or `None`."""
    if attention_axes is None:
        return None
    if isinstance(attention_axes, numbers.Integral):
        return (int(attention_axes),)
    if not isinstance(attention_axes, (list, tuple)):
        raise ValueError(
            "`attention_axes` must be an int, list, or tuple. "
            f"Received: attention_axes={attention_axes}"
        )
    return tuple(attention_axes)


def check_sliding_window(sliding_window):
    """`None` or a positive int (`ValueError` otherwise, as for the dims)."""
    if sliding_window is not None and (
        isinstance(sliding_window, bool)
        or not isinstance(sliding_window, numbers.Integral)
        or sliding_window <= 0
    ):
        raise ValueError(
            "`sliding_window` must be `None` or a positive integer. "
            f"Received: sliding_window={sliding_window}"
        )
    return sliding_window if sliding_window is None else int(sliding_window)


def check_flash_attention(flash_attention, dropout):
    """`flash_attention` checked: `None`, `True` or `False`.

    Args:
        flash_attention: `None`, `True` or `False`.
        dropout: float, the attention dropout (refused beside
            `flash_attention=True`).

    Returns:
        `None`, `True` or `False`.
    """
    if flash_attention is not None and not isinstance(flash_attention, bool):
        raise ValueError(
            "`flash_attention` must be `None`, `True` or `False`. "
            f"Received: flash_attention={flash_attention}"
        )
    if flash_attention and dropout > 0.0:
        raise ValueError(
            "Dropout is not supported when flash attention is enabled. "
            "Please set dropout to 0.0 to use flash attention."
        )
    return flash_attention
