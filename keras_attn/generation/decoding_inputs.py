"""What the decoding entry points check before the loop runs.

The user's token ids (shape, integer dtype, values inside the vocabulary,
eagerly before anything is compiled), the special ids and `max_length`;
and the result of decoding an empty batch, which needs no model.
"""

import keras
import numpy as np
from keras import ops

from keras_attn.validation import check_positive_int, check_token_id, eager_values

# Extra target positions beyond the source length (section 6.1 of the paper:
# "maximum output length to input length + 50").
MAX_LENGTH_OFFSET = 50


def check_special_token_ids(start_id, end_id, vocabulary_size, pad_id=None):
    """Checks the start and end ids a decoder is given, by their names.

    Each must be an id of the vocabulary, and they must differ from each
    other and from the model's `pad_id` (`check_distinct_ids`). `end_id`
    may be a list of ids (`check_end_ids`).
    """
    check_token_id(start_id, "start_id", vocabulary_size)
    return check_end_ids(end_id, vocabulary_size, start_id, pad_id)


def check_end_ids(
    end_id, vocabulary_size, start_id=None, pad_id=None, allow_none=False
):
    """`end_id`, one id or a non-empty list of ids, checked; a tuple for a list.

    Every id must lie in the vocabulary and differ from `start_id` and
    `pad_id` (`check_distinct_ids`); a hypothesis ends at any of them.
    """
    if end_id is None and allow_none:
        return None
    if not isinstance(end_id, (list, tuple)):
        end_id = check_token_id(end_id, "end_id", vocabulary_size)
        check_distinct_ids(start_id, end_id, pad_id)
        return end_id
    if not end_id:
        raise ValueError(
            "`end_id` must be a token id or a non-empty list of token ids. "
            f"Received: end_id={end_id!r}"
        )
    for token in end_id:
        check_token_id(token, "end_id", vocabulary_size)
        check_distinct_ids(start_id, token, pad_id)
    return tuple(int(token) for token in end_id)


def check_distinct_ids(start_id, end_id, pad_id):
    """Refuses special ids that are equal, naming both.

    With `start_id == end_id` or `end_id == pad_id` a hypothesis can never
    end (the start token and padding are never generated), and with
    `start_id == pad_id` the decoder would read its start token as padding.
    `None` (no start id: a decoder-only model; no end id; no pad id) is
    not compared.
    """
    if start_id is not None and start_id == end_id:
        raise ValueError(
            "`start_id` and `end_id` must differ: the start id is never "
            "generated, so no sentence could end. Received: "
            f"start_id={start_id}, end_id={end_id}"
        )
    if pad_id is None:
        return
    if end_id is not None and end_id == pad_id:
        raise ValueError(
            "`end_id` must differ from the model's `pad_id`: padding is never "
            "generated, so no sentence could end. Received: "
            f"end_id={end_id}, pad_id={pad_id}"
        )
    if start_id is not None and start_id == pad_id:
        raise ValueError(
            "`start_id` must differ from the model's `pad_id`: the decoder "
            "would read its start token as padding. Received: "
            f"start_id={start_id}, pad_id={pad_id}"
        )


def check_max_length(max_length):
    """`max_length` as an `int` if it is a positive integer."""
    return check_positive_int(max_length, "max_length")


def max_length_limit(model):
    """The longest `max_length` the model supports, and why, as `(limit, reason)`.

    Learned positions end at `max_sequence_length`. Sinusoids have no end,
    but `max_sequence_length` is the longest sequence the model is
    configured for (its decoding caches): a decoder-only model generates at
    most that many positions, an encoder-decoder at most the longest source
    plus 50 (section 6.1 of the paper). Without a bound, a mistyped
    `max_length=10000` decodes for minutes before anything is returned.
    """
    limit = int(model.max_sequence_length)
    scheme = model.position_scheme
    if scheme.max_length is not None:
        return limit, (
            f"max_sequence_length={limit}, the number of {scheme.name} positions"
        )
    if not hasattr(model, "encode"):
        return limit, f"max_sequence_length={limit}, the model's longest sequence"
    return limit + MAX_LENGTH_OFFSET, (
        f"max_sequence_length + {MAX_LENGTH_OFFSET}={limit + MAX_LENGTH_OFFSET}, "
        "the model's longest source plus 50"
    )


def check_max_length_for(model, max_length):
    """`max_length` as an `int`, refused above what `model` supports."""
    max_length = check_max_length(max_length)
    limit, reason = max_length_limit(model)
    if max_length > limit:
        raise ValueError(
            f"`max_length` must be at most the model's limit, {reason}. "
            f"Received: max_length={max_length}"
        )
    return max_length


def _as_array(tokens, name):
    """Anything but a tensor as a NumPy array; ragged rows refused by name."""
    if isinstance(tokens, np.ndarray) or ops.is_tensor(tokens):
        return tokens
    if isinstance(tokens, keras.KerasTensor):
        return tokens
    try:
        array = np.asarray(tokens)
    except ValueError as error:  # Rows of different lengths.
        raise ValueError(
            f"`{name}` must be a rectangular batch (batch, length) of token "
            "ids; pad the shorter rows. Received: rows of different lengths"
        ) from error
    # `[]` and `[[]]` are float64 to NumPy; an empty batch has no dtype.
    return array.astype("int32") if array.size == 0 else array


def _dtype_name(tokens):
    try:
        return keras.backend.standardize_dtype(tokens.dtype)
    except ValueError:  # Strings, objects: no Keras dtype.
        return str(tokens.dtype)


def check_token_batch(tokens, name, vocabulary_size):
    """Returns `tokens` as int32 after checking it is a batch of token ids.

    Checked wherever decoding starts, traced or not: the shape
    `(batch, length)` and an integer dtype (float ids are refused, never
    truncated; booleans are not ids). Eagerly, before anything is compiled,
    the values too: every id in `[0, vocabulary_size)`.

    Args:
        tokens: the user's ids: a tensor, a NumPy array or nested lists.
        name: the argument's public name, for the messages.
        vocabulary_size: the model's vocabulary size.

    Raises:
        TypeError: for a dtype that is not an integer type.
        ValueError: for another rank, ragged lists or ids outside the
            vocabulary.
    """
    tokens = _as_array(tokens, name)
    dtype = _dtype_name(tokens)
    if "int" not in dtype:
        raise TypeError(
            f"`{name}` must hold integer token ids. Received: {name} of dtype={dtype}"
        )
    if len(tokens.shape) != 2:
        raise ValueError(
            f"`{name}` must have shape (batch, length). "
            f"Received: {name}.shape={tuple(tokens.shape)}"
        )
    values = eager_values(tokens)
    if values is not None and values.size:
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= vocabulary_size:
            raise ValueError(
                f"`{name}` must hold token ids in [0, vocabulary_size="
                f"{vocabulary_size}). Received: ids from {low} to {high}"
            )
    return ops.convert_to_tensor(tokens, "int32")


def resolve_max_length(model, encoder_tokens, max_length):
    """`max_length` if given, else source length + 50 (the paper's rule).

    A given `max_length` above the model's limit (`max_length_limit`) is
    refused; the default is cut to that limit.
    """
    limit, _ = max_length_limit(model)
    if max_length is None:
        source_length = encoder_tokens.shape[1]
        if source_length is None:
            # Only in a TensorFlow graph whose input shapes were relaxed
            # (`tf.function` retracing): the bound is a tensor there.
            max_length = ops.shape(encoder_tokens)[1] + MAX_LENGTH_OFFSET
            return ops.minimum(max_length, limit)
        return min(source_length + MAX_LENGTH_OFFSET, limit)
    return check_max_length_for(model, max_length)


def check_source(model, encoder_tokens):
    """The source ids, checked (`check_token_batch`), at least one long and,
    with learned positions, at most `max_sequence_length` long."""
    encoder_tokens = check_token_batch(
        encoder_tokens, "encoder_tokens", model.vocabulary_size
    )
    source_length = encoder_tokens.shape[1]
    if source_length == 0:
        raise ValueError(
            "`encoder_tokens` must have at least one position (a source "
            "sentence holds at least its end id). Received: "
            f"encoder_tokens.shape={tuple(encoder_tokens.shape)}"
        )
    if (
        model.position_scheme.max_length is not None
        and isinstance(source_length, int)
        and source_length > model.position_scheme.max_length
    ):
        raise ValueError(
            "`encoder_tokens` is longer than the model's max_sequence_length="
            f"{model.max_sequence_length} {model.position_scheme.name} positions. "
            "Received: "
            f"encoder_tokens.shape={tuple(encoder_tokens.shape)}"
        )
    return encoder_tokens
