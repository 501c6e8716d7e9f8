"""Beam search with the paper's length penalty and a key/value cache."""

import keras
from keras import ops

from keras_attn.generation.decoding_loop import (
    check_token_ids,
    encode_source,
    is_integer,
    resolve_max_length,
    suppress_ids,
)

# Log-probability of impossible candidates; finite so arithmetic stays NaN-free.
_IMPOSSIBLE = -1.0e9


def length_penalty(length, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al., 2016)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def check_beam_search_args(beam_size, length_penalty_alpha):
    if not is_integer(beam_size) or beam_size <= 0:
        raise ValueError(
            f"`beam_size` must be a positive integer. Received: beam_size={beam_size!r}"
        )
    if not length_penalty_alpha >= 0:
        raise ValueError(
            "`length_penalty_alpha` must be >= 0. "
            f"Received: length_penalty_alpha={length_penalty_alpha!r}"
        )


def _gather_beams(tensor, beam_indices):
    """`tensor[b, beam_indices[b, j]]` for `(batch, beams, ...)` tensors."""
    indices = beam_indices
    # (batch, beams, 1, ...): expand_dims, not a reshape to `beam_indices.shape`,
    # which holds `None` when the batch size is unknown (TF SavedModel export).
    for _ in range(len(tensor.shape) - 2):
        indices = ops.expand_dims(indices, -1)
    return ops.take_along_axis(tensor, indices, axis=1)


def _top_k(scores, k):
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


def beam_search(
    model,
    encoder_tokens,
    start_id,
    end_id,
    beam_size=4,
    length_penalty_alpha=0.6,
    max_length=None,
):
    """Beam search as in section 6.1 of the paper (beam 4, alpha 0.6).

    Hypotheses are ranked by `log P(y | x) / lp(y)` with the GNMT length
    penalty `lp(y) = ((5 + |y|) / 6) ** alpha`, `|y|` counting the end
    token. At every step each live hypothesis is extended by every token and
    the `beam_size` best-scoring candidates are kept; a hypothesis that has
    produced `end_id` stays in the beam unchanged (extended by padding at
    no cost) and competes with its final score. The search stops when every
    kept hypothesis of every sentence has ended, or after `max_length`
    tokens.

    The decoder's self-attention cache is reordered with the beams; the
    encoder output and cross-attention keys/values are computed once.
    With `beam_size=1` the search is exactly greedy search.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`.
        start_id: int, the start id.
        end_id: int, the end id.
        beam_size: int, the number of hypotheses kept. Defaults to `4`.
        length_penalty_alpha: float >= 0, `alpha`. Defaults to `0.6`.
        max_length: int. Defaults to `None`, meaning `source_length + 50`.

    Returns:
        A dict with `"tokens"` int32 `(batch, max_length)`, the best
        hypothesis per sentence, `"scores"` float32 `(batch,)`, its
        length-normalised log-probability, and `"beam_tokens"` /
        `"beam_scores"` with all `beam_size` hypotheses, best first.

    References:
        Vaswani et al., 2017, section 6.1; Wu et al., "Google's Neural
        Machine Translation System", 2016, section 7.
    """
    check_token_ids(start_id, end_id, model.vocabulary_size)
    check_beam_search_args(beam_size, length_penalty_alpha)
    encoder_tokens, encoder_output, encoder_mask = encode_source(model, encoder_tokens)
    max_length = resolve_max_length(model, encoder_tokens, max_length)
    batch_size = ops.shape(encoder_tokens)[0]
    beams = int(beam_size)
    vocabulary_size = model.vocabulary_size
    pad_id = model.pad_id

    # Every beam of a sentence shares its encoder output: (batch * beams, ...).
    cache = model.initial_cache(
        ops.repeat(encoder_output, beams, axis=0),
        ops.repeat(encoder_mask, beams, axis=0),
        max_length,
    )
    # (batch, beams, max_length + 1); position 0 holds the start token.
    tokens = ops.full((batch_size, beams, max_length + 1), pad_id, "int32")
    tokens = ops.slice_update(
        tokens, (0, 0, 0), ops.full((batch_size, beams, 1), start_id, "int32")
    )
    # Only the first beam is real at the start: the others are copies.
    first_beam = ops.convert_to_tensor([0.0] + [_IMPOSSIBLE] * (beams - 1))
    log_probs = ops.tile(first_beam[None, :], (batch_size, 1))  # (batch, beams)
    ended = ops.zeros((batch_size, beams), "bool")
    lengths = ops.zeros((batch_size, beams), "int32")
    sentence_offsets = ops.arange(batch_size)[:, None] * beams  # (batch, 1)
    # An ended hypothesis continues with padding at log-probability 0.
    padding_only = ops.where(
        ops.equal(ops.arange(vocabulary_size), pad_id), 0.0, _IMPOSSIBLE
    )  # (vocabulary,)

    def cond(index, tokens, log_probs, ended, lengths, cache):
        return ops.logical_and(index < max_length, ops.logical_not(ops.all(ended)))

    def body(index, tokens, log_probs, ended, lengths, cache):
        # (batch * beams, 1): the newest token of every hypothesis.
        current = ops.reshape(
            ops.slice(tokens, (0, 0, index), (batch_size, beams, 1)),
            (batch_size * beams, 1),
        )
        logits, cache = model.decode_step(current, cache, index)
        # (batch * beams, vocabulary) -> (batch, beams, vocabulary)
        step_log_probs = ops.reshape(
            ops.log_softmax(
                suppress_ids(ops.cast(logits[:, 0, :], "float32"), (pad_id, start_id)),
                axis=-1,
            ),
            (batch_size, beams, vocabulary_size),
        )
        step_log_probs = ops.where(ended[:, :, None], padding_only, step_log_probs)
        candidate_log_probs = log_probs[:, :, None] + step_log_probs
        candidate_lengths = lengths + ops.cast(ops.logical_not(ended), "int32")
        penalties = length_penalty(candidate_lengths, length_penalty_alpha)
        # (batch, beams * vocabulary): length-normalised candidate scores.
        candidate_scores = ops.reshape(
            candidate_log_probs / penalties[:, :, None],
            (batch_size, beams * vocabulary_size),
        )
        _, best = _top_k(candidate_scores, beams)  # (batch, beams)
        parents = best // vocabulary_size
        new_ids = ops.cast(best % vocabulary_size, "int32")

        log_probs = ops.take_along_axis(
            ops.reshape(candidate_log_probs, (batch_size, -1)), best, axis=1
        )
        lengths = ops.take_along_axis(candidate_lengths, parents, axis=1)
        was_ended = ops.take_along_axis(ended, parents, axis=1)
        ended = ops.logical_or(was_ended, ops.equal(new_ids, end_id))
        tokens = _gather_beams(tokens, parents)
        tokens = ops.slice_update(tokens, (0, 0, index + 1), new_ids[:, :, None])
        flat_parents = ops.reshape(
            sentence_offsets + parents, (-1,)
        )  # (batch * beams,)
        cache = {
            **cache,
            "self_attention": keras.tree.map_structure(
                lambda slots: ops.take(slots, flat_parents, axis=0),
                cache["self_attention"],
            ),
        }
        return index + 1, tokens, log_probs, ended, lengths, cache

    state = (
        ops.convert_to_tensor(0, "int32"),
        tokens,
        log_probs,
        ended,
        lengths,
        cache,
    )
    _, tokens, log_probs, ended, lengths, _ = ops.while_loop(cond, body, state)
    # Re-rank by final score (live hypotheses cut at max_length included).
    scores = log_probs / length_penalty(lengths, length_penalty_alpha)
    scores, order = _top_k(scores, beams)
    tokens = _gather_beams(tokens, order)[:, :, 1:]
    return {
        "tokens": tokens[:, 0],
        "scores": scores[:, 0],
        "beam_tokens": tokens,
        "beam_scores": scores,
    }
