"""The token-by-token loop shared by greedy search and sampling."""

import numbers

from keras import ops

# Extra target positions beyond the source length (section 6.1 of the paper:
# "maximum output length to input length + 50").
MAX_LENGTH_OFFSET = 50


def is_integer(value):
    """True for Python and NumPy integers (not bools)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_token_ids(start_id, end_id, vocabulary_size):
    for name, value in (("start_id", start_id), ("end_id", end_id)):
        if not is_integer(value) or not 0 <= value < vocabulary_size:
            raise ValueError(
                f"`{name}` must be a token id in [0, {vocabulary_size}). "
                f"Received: {name}={value!r}"
            )


def check_max_length(max_length):
    if not is_integer(max_length) or max_length <= 0:
        raise ValueError(
            f"`max_length` must be a positive integer. Received: max_length={max_length!r}"
        )


def resolve_max_length(model, encoder_tokens, max_length):
    """`max_length` if given, else source length + 50 (the paper's rule)."""
    if max_length is None:
        source_length = encoder_tokens.shape[1]
        if source_length is None:
            # Only in a TensorFlow graph whose input shapes were relaxed
            # (`tf.function` retracing): the bound is a tensor there.
            max_length = ops.shape(encoder_tokens)[1] + MAX_LENGTH_OFFSET
            if model.position == "learned":
                max_length = ops.minimum(max_length, model.max_sequence_length)
            return max_length
        max_length = source_length + MAX_LENGTH_OFFSET
    check_max_length(max_length)
    max_length = int(max_length)
    if model.position == "learned":
        max_length = min(max_length, model.max_sequence_length)
    return max_length


def encode_source(model, encoder_tokens):
    """Converts ids to an int32 tensor and runs the encoder once."""
    encoder_tokens = ops.convert_to_tensor(encoder_tokens, "int32")
    if len(encoder_tokens.shape) != 2:
        raise ValueError(
            "`encoder_tokens` must have shape (batch, source_length). "
            f"Received: encoder_tokens.shape={tuple(encoder_tokens.shape)}"
        )
    encoder_output, encoder_padding_mask = model.encode(encoder_tokens)
    return encoder_tokens, encoder_output, encoder_padding_mask


def suppress_ids(logits, token_ids):
    """Sets the logits of `token_ids` (padding, start) to a large negative value.

    A decoder must never emit the padding or start token; without this an
    undertrained model can, and detokenization would silently drop it.
    """
    vocabulary = ops.arange(ops.shape(logits)[-1])
    banned = ops.zeros_like(vocabulary, dtype="bool")
    for token_id in token_ids:
        banned = ops.logical_or(banned, ops.equal(vocabulary, token_id))
    return ops.where(banned, -1.0e9, logits)


def cached_step(model):
    """Step function reading/writing the key/value cache (one position of work)."""

    def step(tokens, index, cache):
        batch_size = ops.shape(tokens)[0]
        current = ops.slice(tokens, (0, index), (batch_size, 1))  # (batch, 1)
        logits, cache = model.decode_step(current, cache, index)
        return logits[:, 0, :], cache  # (batch, vocabulary)

    return step


def uncached_step(model):
    """Step function recomputing the whole decoder each step (the baseline).

    The decoder runs over the full token buffer; causality makes the logits
    at `index` depend only on tokens `<= index`.
    """

    def step(tokens, index, state):
        encoder_output, encoder_padding_mask = state
        logits = model.decode(tokens, encoder_output, encoder_padding_mask)
        batch_size, _, vocabulary_size = ops.shape(logits)
        # (batch, 1, vocabulary) -> (batch, vocabulary)
        logits = ops.slice(logits, (0, index, 0), (batch_size, 1, vocabulary_size))
        return logits[:, 0, :], state

    return step


def decoding_loop(
    step, state, batch_size, max_length, start_id, end_id, pad_id, choose
):
    """Generates up to `max_length` tokens, stopping when every row has ended.

    Args:
        step: `(tokens, index, state) -> (logits (batch, vocabulary), state)`.
        state: the step's state (the cache, or the encoder output).
        batch_size: int or scalar tensor.
        max_length: int, the most tokens to generate.
        start_id, end_id, pad_id: special token ids.
        choose: `(logits, index) -> next ids (batch,)`.

    Returns:
        `(tokens, scores)`: int32 `(batch, max_length)` generated ids (`pad_id`
        after `end_id`) and float32 `(batch,)` summed log-probabilities.
    """
    # (batch, max_length + 1): position 0 holds the start token.
    tokens = ops.full((batch_size, max_length + 1), pad_id, dtype="int32")
    tokens = ops.slice_update(
        tokens, (0, 0), ops.full((batch_size, 1), start_id, dtype="int32")
    )
    finished = ops.zeros((batch_size,), dtype="bool")
    scores = ops.zeros((batch_size,), dtype="float32")

    def cond(index, tokens, state, finished, scores):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(finished)))

    def body(index, tokens, state, finished, scores):
        logits, state = step(tokens, index, state)
        logits = suppress_ids(ops.cast(logits, "float32"), (pad_id, start_id))
        next_ids = ops.cast(choose(logits, index), "int32")
        log_probs = ops.log_softmax(logits, axis=-1)
        chosen = ops.take_along_axis(log_probs, next_ids[:, None], axis=-1)[:, 0]
        scores = scores + ops.where(finished, 0.0, chosen)
        next_ids = ops.where(finished, pad_id, next_ids)
        tokens = ops.slice_update(tokens, (0, index + 1), next_ids[:, None])
        finished = ops.logical_or(finished, ops.equal(next_ids, end_id))
        return index + 1, tokens, state, finished, scores

    _, tokens, _, _, scores = ops.while_loop(
        cond, body, (ops.convert_to_tensor(0, "int32"), tokens, state, finished, scores)
    )
    return tokens[:, 1:], scores


def decoding_state(model, encoder_output, encoder_padding_mask, max_length, use_cache):
    if use_cache:
        return cached_step(model), model.initial_cache(
            encoder_output, encoder_padding_mask, max_length
        )
    return uncached_step(model), (encoder_output, encoder_padding_mask)
