"""The one decoding loop: every model, every sampler.

`decode` runs token by token under a `keras.ops.while_loop` (so it compiles
under XLA and `tf.function`) for the encoder-decoder `Transformer` and the
decoder-only `TransformerLM` alike; a sampler object
(`keras_attn.generation.samplers`) says how the next token is chosen. The
model enters through a `step` function, so the same loop runs with the
key/value cache and without it (the baseline the tests compare against).
"""

import numbers

import keras
from keras import ops

# Extra target positions beyond the source length (section 6.1 of the paper:
# "maximum output length to input length + 50").
MAX_LENGTH_OFFSET = 50
# Log-probability of the placeholder beams that fill the beam at the start
# (only the first hypothesis is real then).
_COPY = -1.0e9
# Log-probability of a continuation that can not be taken (after the end,
# or where a prompt fixes the token): finite, so sums stay NaN-free, and
# far below `_COPY` and the -1e9 of `suppress_ids`.
MASKED = -1.0e18


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


def top_k_rows(scores, k):
    """`ops.top_k(scores, k)` over the last axis of `(batch, n)` scores.

    With a symbolic batch size (a shape-polymorphic jax2tf export, see
    `keras_attn.export`), `top_k` runs row by row: JAX serializes a batched
    `top_k` into StableHLO ops that TensorFlow 2.21 cannot specialize to a
    concrete shape when it loads the SavedModel, while the per-row `top_k`
    of a `keras.ops.map` has static shapes. Ties go to the lower index
    either way.
    """
    if scores.shape[0] is None or isinstance(scores.shape[0], int):
        return ops.top_k(scores, k)
    return ops.map(lambda row: ops.top_k(row, k), scores)


def reorder_self_attention(cache, flat_parents):
    """Reorders a cache's `"self_attention"` slots with the beams.

    Cross-attention keys/values and the encoder mask are the same for every
    beam of a sequence, so they are left as they are.
    """
    return {
        **cache,
        "self_attention": keras.tree.map_structure(
            lambda slots: ops.take(slots, flat_parents, axis=0),
            cache["self_attention"],
        ),
    }


def gather_beams(tensor, beam_indices):
    """`tensor[b, beam_indices[b, j]]` for `(batch, beams, ...)` tensors."""
    indices = beam_indices
    # (batch, beams, 1, ...): expand_dims, not a reshape to `beam_indices.shape`,
    # which holds `None` when the batch size is unknown (TF SavedModel export).
    for _ in range(len(tensor.shape) - 2):
        indices = ops.expand_dims(indices, -1)
    return ops.take_along_axis(tensor, indices, axis=1)


def decode(
    step,
    state,
    tokens,
    given,
    sampler,
    end_id,
    pad_id,
    suppressed_ids=(),
    first_index=0,
    reorder=None,
):
    """Fills `tokens` after its given positions, one token per step.

    The logits computed at position `index` choose the token at
    `index + 1`. Where `given` is `True` the token is kept (a prompt), at
    no cost to the score; after a hypothesis has produced `end_id` it
    continues with `pad_id`. The loop starts at `first_index` and stops
    when every hypothesis has ended or `tokens` is full. The sampler keeps
    `sampler.num_beams` hypotheses per sequence; with more than one, the
    tokens and the step's state are reordered with the beams.

    Args:
        step: `(tokens, index, state) -> (logits, state)`, with tokens
            int32 `(batch * beams, total_length)` and logits
            `(batch * beams, vocabulary)` at position `index`.
        state: the step's state (a key/value cache, or the encoder output).
        tokens: int32 `(batch, total_length)`, the given tokens, `pad_id`
            elsewhere.
        given: bool `(batch, total_length)`, `True` where the token is given.
        sampler: a `keras_attn.generation.Sampler`.
        end_id: int, or `None` to run until `tokens` is full.
        pad_id: int, the padding id.
        suppressed_ids: ids never generated (padding, start). Defaults to
            `()`.
        first_index: int or scalar tensor, the first position whose logits
            are computed. Defaults to `0`.
        reorder: `(state, flat_parents) -> state`, or `None` when the state
            does not follow the beams. Defaults to `None`.

    Returns:
        `(tokens, scores)`: int32 `(batch, beams, total_length)` and float32
        `(batch, beams)` (`sampler.final_scores`), best hypothesis first.
    """
    beams = sampler.num_beams
    batch_size, total_length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    draws = sampler.random_draws(total_length - 1, batch_size)
    # (batch, beams, total_length): every beam starts from the given tokens.
    tokens = ops.repeat(ops.expand_dims(tokens, 1), beams, axis=1)
    first_beam = ops.convert_to_tensor([0.0] + [_COPY] * (beams - 1))
    log_probs = ops.tile(first_beam[None, :], (batch_size, 1))  # (batch, beams)
    ended = ops.zeros((batch_size, beams), "bool")
    lengths = ops.zeros((batch_size, beams), "int32")
    sentence_offsets = ops.arange(batch_size)[:, None] * beams  # (batch, 1)

    def cond(index, tokens, log_probs, ended, lengths, state):
        return ops.logical_and(
            index < total_length - 1, ops.logical_not(ops.all(ended))
        )

    def body(index, tokens, log_probs, ended, lengths, state):
        # (batch * beams, total_length)
        flat_tokens = ops.reshape(tokens, (batch_size * beams, total_length))
        logits, state = step(flat_tokens, index, state)
        logits = suppress_ids(ops.cast(logits, "float32"), suppressed_ids)
        vocabulary_size = ops.shape(logits)[-1]
        # (batch * beams, vocabulary) -> (batch, beams, vocabulary)
        logits = ops.reshape(logits, (batch_size, beams, vocabulary_size))
        step_log_probs = ops.log_softmax(logits, axis=-1)
        vocabulary = ops.arange(vocabulary_size)
        next_given = ops.take(given, index + 1, axis=1)  # (batch,)
        given_ids = ops.take(tokens[:, 0, :], index + 1, axis=1)  # (batch,)
        # A given or ended hypothesis has exactly one continuation, free.
        only_given = ops.where(
            ops.equal(vocabulary[None, :], given_ids[:, None]), 0.0, MASKED
        )  # (batch, vocabulary)
        only_padding = ops.where(ops.equal(vocabulary, pad_id), 0.0, MASKED)
        step_log_probs = ops.where(
            next_given[:, None, None], only_given[:, None, :], step_log_probs
        )
        step_log_probs = ops.where(ended[:, :, None], only_padding, step_log_probs)
        candidate_log_probs = log_probs[:, :, None] + step_log_probs
        generating = ops.logical_and(
            ops.logical_not(ended), ops.logical_not(next_given[:, None])
        )  # (batch, beams)
        candidate_lengths = lengths + ops.cast(generating, "int32")
        draw = None if draws is None else ops.take(draws, index, axis=0)
        parents, ids = sampler.select(
            logits, candidate_log_probs, candidate_lengths, draw
        )
        was_ended = ops.take_along_axis(ended, parents, axis=1)
        generated = ops.take_along_axis(generating, parents, axis=1)
        ids = ops.where(next_given[:, None], given_ids[:, None], ids)
        ids = ops.where(was_ended, pad_id, ids)
        # (batch, beams * vocabulary) -> the chosen candidates' log-probs.
        log_probs = ops.take_along_axis(
            ops.reshape(candidate_log_probs, (batch_size, -1)),
            parents * vocabulary_size + ids,
            axis=1,
        )
        lengths = ops.take_along_axis(candidate_lengths, parents, axis=1)
        ended = was_ended
        if end_id is not None:
            ended = ops.logical_or(
                ended, ops.logical_and(generated, ops.equal(ids, end_id))
            )
        if beams > 1:
            tokens = gather_beams(tokens, parents)
            if reorder is not None:
                flat_parents = ops.reshape(sentence_offsets + parents, (-1,))
                state = reorder(state, flat_parents)
        tokens = ops.slice_update(tokens, (0, 0, index + 1), ids[:, :, None])
        return index + 1, tokens, log_probs, ended, lengths, state

    loop_state = (
        ops.cast(first_index, "int32"),
        tokens,
        log_probs,
        ended,
        lengths,
        state,
    )
    _, tokens, log_probs, _, lengths, _ = ops.while_loop(cond, body, loop_state)
    scores = sampler.final_scores(log_probs, lengths)
    if beams > 1:
        # Re-rank by final score (live hypotheses cut at the end included).
        scores, order = top_k_rows(scores, beams)
        tokens = gather_beams(tokens, order)
    return tokens, scores
