"""The one decoding loop: every model, every sampler.

`generate_tokens` runs token by token under a `keras.ops.while_loop` (so it
compiles under XLA and `tf.function`) for the encoder-decoder `Transformer`
and the decoder-only `TransformerLM` alike; a sampler object
(`keras_attn.generation.samplers`) says how the next token is chosen. The
model enters through a `step` function, so the same loop runs with the
key/value cache and without it (the baseline the tests compare against).

The loop carries a `DecodeState` (as Flax's `BeamState`); one iteration is
three small pure steps: `step_log_probs` (the model), `candidates` (what
each hypothesis may become) and `advance` (the sampler's choice applied).
"""

from typing import Any, NamedTuple

import keras
from keras import ops

from keras_attn.generation.logits_processors import DecodingContext, apply_processors
from keras_attn.generation.stop_sequences import ends_with_stop_sequence

# Log-probability of the placeholder beams that fill the beam at the start
# (only the first hypothesis is real then).
_COPY = -1.0e9
# Log-probability of a continuation that can not be taken (after the end,
# or where a prompt fixes the token): finite, so sums stay NaN-free, and
# far below `_COPY` and the -1e9 of banned ids in `step_log_probs`.
MASKED = -1.0e18


def banned_ids(vocabulary_size, token_ids):
    """Boolean `(vocabulary,)`: where `token_ids` (padding, start) stand.

    A decoder must never emit the padding or start token; without this an
    undertrained model can, and detokenization would silently drop it.
    """
    vocabulary = ops.arange(vocabulary_size, dtype="int32")
    banned = ops.zeros_like(vocabulary, dtype="bool")
    for token_id in token_ids:
        banned = ops.logical_or(banned, ops.equal(vocabulary, token_id))
    return banned


def cached_step(model):
    """Step function reading/writing the key/value cache (one position of work)."""

    def step(tokens, index, cache):
        current = ops.expand_dims(ops.take(tokens, index, axis=1), 1)  # (batch, 1)
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
    """`tensor[b, beam_indices[b, j]]` for `(batch, beams, ...)` tensors.

    One `ops.take` of int32 rows of the `(batch * beams, ...)` tensor, as
    `reorder_self_attention` does. (`ops.take_along_axis` with indices of
    more than two axes makes TensorFlow transpose int64 indices, which its
    oneDNN graph pass reports as an error line, `oneDNN supports DT_INT64
    only on platforms with AVX-512`.) Dimensions unknown at trace time (the
    batch in a SavedModel export) are read from `ops.shape`.
    """
    shape = ops.shape(tensor)
    batch_size, beams, rest = shape[0], shape[1], tuple(shape[2:])
    chosen = beam_indices.shape[1] if beam_indices.shape[1] is not None else -1
    # (batch, 1)
    offsets = ops.arange(batch_size, dtype="int32")[:, None] * beams
    # (batch * chosen,)
    rows = ops.reshape(offsets + ops.cast(beam_indices, "int32"), (-1,))
    gathered = ops.take(ops.reshape(tensor, (-1, *rest)), rows, axis=0)
    return ops.reshape(gathered, (batch_size, chosen, *rest))


class DecodeState(NamedTuple):
    """What the decoding loop carries from one step to the next.

    `beams` is the sampler's `num_beams` (1 but for beam search).
    """

    index: Any  # int32 scalar: the position whose logits come next.
    tokens: Any  # int32 (batch, beams, total_length)
    log_probs: Any  # float32 (batch, beams): summed log-probabilities.
    ended: Any  # bool (batch, beams): the hypothesis has produced `end_id`.
    lengths: Any  # int32 (batch, beams): generated tokens, end included.
    cache: Any  # The step function's state (a key/value cache, or not).
    # float32 (batch, beams, total_length): the log-probability of each
    # generated token (0 elsewhere), or a float32 scalar when not tracked.
    token_scores: Any


class LoopInputs(NamedTuple):
    """What every step of the loop reads but never changes."""

    given: Any  # bool (batch, total_length): the token is given (a prompt).
    draws: Any  # float32 (total_length - 1, batch) uniforms, or None.
    prompt_lengths: Any  # int32 (batch,): the given tokens at the start.


class Candidates(NamedTuple):
    """Every continuation of every hypothesis at one step."""

    log_probs: Any  # float32 (batch, beams, vocabulary)
    lengths: Any  # int32 (batch, beams): the length once extended.
    generating: Any  # bool (batch, beams): the next token is generated.
    next_given: Any  # bool (batch,): the next token is given (a prompt).
    given_ids: Any  # int32 (batch,): the given next token (else padding).
    # float32 (batch, beams, vocabulary): each token's own log-probability.
    token_log_probs: Any


def initial_state(tokens, beams, first_index, cache, track_token_scores=False):
    """The state before the first step: every beam holds the given tokens.

    With `track_token_scores`, the state keeps each generated token's
    log-probability (`DecodeState.token_scores`).
    """
    batch_size, total_length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    # (batch, beams, total_length)
    tokens = ops.repeat(ops.expand_dims(tokens, 1), beams, axis=1)
    first_beam = ops.convert_to_tensor([0.0] + [_COPY] * (beams - 1), "float32")
    if track_token_scores:
        token_scores = ops.zeros((batch_size, beams, total_length), "float32")
    else:
        token_scores = ops.zeros((), "float32")
    return DecodeState(
        index=ops.cast(first_index, "int32"),
        tokens=tokens,
        log_probs=ops.tile(first_beam[None, :], (batch_size, 1)),  # (batch, beams)
        ended=ops.zeros((batch_size, beams), "bool"),
        lengths=ops.zeros((batch_size, beams), "int32"),
        cache=cache,
        token_scores=token_scores,
    )


def tracks_token_scores(state):
    """Whether `state` keeps each token's log-probability."""
    return len(state.token_scores.shape) == 3


def step_log_probs(
    step, state, suppressed_ids, processors=(), prompt_lengths=None, end_ids=()
):
    """Runs the model one position; returns `(logits, log_probs, cache)`.

    Logits and log-probabilities are float32 `(batch, beams, vocabulary)`,
    with `suppressed_ids` suppressed: at `-inf` in the logits (the
    sampler's input, divided by any temperature), at a finite `-1e9` before
    the log-softmax (the scores). The `processors`
    (`keras_attn.generation.LogitsProcessor`) then change the logits, in
    order, and the log-probabilities are those of the processed logits
    (what a processor bans is at `-1e9` before the log-softmax there).
    `prompt_lengths`, int32 `(batch,)`, and `end_ids` are what the
    processors read beside the tokens (`DecodingContext`).
    """
    batch_size, beams, total_length = ops.shape(state.tokens)
    # (batch * beams, total_length)
    flat_tokens = ops.reshape(state.tokens, (batch_size * beams, total_length))
    logits, cache = step(flat_tokens, state.index, state.cache)
    logits = ops.cast(logits, "float32")
    vocabulary_size = ops.shape(logits)[-1]
    banned = banned_ids(vocabulary_size, suppressed_ids)  # (vocabulary,)
    if processors:
        context = DecodingContext(
            tokens=flat_tokens,
            index=state.index,
            # (batch * beams,)
            prompt_lengths=ops.repeat(prompt_lengths, beams, axis=0),
            end_ids=tuple(end_ids),
        )
        logits = apply_processors(
            processors, ops.where(banned, -float("inf"), logits), context
        )
        # (batch * beams, vocabulary) -> (batch, beams, vocabulary)
        logits = ops.reshape(logits, (batch_size, beams, vocabulary_size))
        # -inf becomes the finite -1e9 of suppressed ids: sums stay NaN-free.
        return logits, ops.log_softmax(ops.maximum(logits, -1.0e9), axis=-1), cache
    # (batch * beams, vocabulary) -> (batch, beams, vocabulary)
    logits = ops.reshape(logits, (batch_size, beams, vocabulary_size))
    # The scores take a finite value (sums stay NaN-free); the sampler gets
    # `-inf`, which no temperature brings back (a finite -1e9 divided by a
    # temperature of 1e9 is -1, as likely as any token).
    log_probs = ops.log_softmax(ops.where(banned, -1.0e9, logits), axis=-1)
    return ops.where(banned, -float("inf"), logits), log_probs, cache


def end_ids_tuple(end_id):
    """`end_id` (an int, a sequence of ints, or `None`) as a tuple of ints."""
    if end_id is None:
        return ()
    if isinstance(end_id, (list, tuple)):
        return tuple(int(token) for token in end_id)
    return (int(end_id),)


def is_end(ids, end_ids):
    """bool, the shape of `ids`: `True` where an id is one of `end_ids`."""
    ended = ops.zeros_like(ids, "bool")
    for end_id in end_ids:
        ended = ops.logical_or(ended, ops.equal(ids, end_id))
    return ended


def candidates(state, log_probs, given, pad_id):
    """Scores every continuation of every hypothesis.

    A hypothesis whose next token is given (a prompt), or that has ended
    (then padding follows), has exactly one continuation, at no cost.
    """
    vocabulary = ops.arange(ops.shape(log_probs)[-1], dtype="int32")
    next_position = state.index + 1
    next_given = ops.take(given, next_position, axis=1)  # (batch,)
    given_ids = ops.take(state.tokens[:, 0, :], next_position, axis=1)  # (batch,)
    # In the log-probabilities' dtype: a Python float would take floatx
    # (float64 under `set_floatx("float64")`, which TensorFlow won't add).
    zero = ops.zeros((), log_probs.dtype)
    masked = ops.full((), MASKED, log_probs.dtype)
    only_given = ops.where(
        ops.equal(vocabulary[None, :], given_ids[:, None]), zero, masked
    )  # (batch, vocabulary)
    only_padding = ops.where(ops.equal(vocabulary, pad_id), zero, masked)
    log_probs = ops.where(next_given[:, None, None], only_given[:, None, :], log_probs)
    log_probs = ops.where(state.ended[:, :, None], only_padding, log_probs)
    generating = ops.logical_and(
        ops.logical_not(state.ended), ops.logical_not(next_given[:, None])
    )  # (batch, beams)
    return Candidates(
        log_probs=state.log_probs[:, :, None] + log_probs,
        lengths=state.lengths + ops.cast(generating, "int32"),
        generating=generating,
        next_given=next_given,
        given_ids=given_ids,
        token_log_probs=log_probs,
    )


def advance(
    state,
    candidates,
    parents,
    ids,
    cache,
    end_id,
    pad_id,
    reorder,
    stop_sequences=(),
    prompt_lengths=None,
):
    """The state once each hypothesis `parents[b, j]` is extended by `ids[b, j]`.

    `parents` and `ids` are the sampler's choice, int32 `(batch, beams)`;
    given tokens and the padding after the end replace what it chose there.
    A hypothesis ends at an id of `end_id` or once its generated tokens
    (from `prompt_lengths`, int32 `(batch,)`, on) end with one of
    `stop_sequences` (tuples of ids).
    """
    batch_size, beams = ops.shape(state.tokens)[0], state.tokens.shape[1]
    was_ended = ops.take_along_axis(state.ended, parents, axis=1)
    generated = ops.take_along_axis(candidates.generating, parents, axis=1)
    ids = ops.where(candidates.next_given[:, None], candidates.given_ids[:, None], ids)
    ids = ops.where(was_ended, pad_id, ids)
    vocabulary_size = ops.shape(candidates.log_probs)[-1]
    chosen = parents * vocabulary_size + ids  # (batch, beams)
    # (batch, beams * vocabulary) -> the chosen candidates' log-probs.
    log_probs = ops.take_along_axis(
        ops.reshape(candidates.log_probs, (batch_size, -1)), chosen, axis=1
    )
    ended = was_ended
    end_ids = end_ids_tuple(end_id)
    if end_ids:
        ended = ops.logical_or(ended, ops.logical_and(generated, is_end(ids, end_ids)))
    tokens, token_scores = state.tokens, state.token_scores
    if beams > 1:
        tokens = gather_beams(tokens, parents)
        if tracks_token_scores(state):
            token_scores = gather_beams(token_scores, parents)
        if reorder is not None:
            # (batch, 1)
            sentence_offsets = ops.arange(batch_size, dtype="int32")[:, None] * beams
            cache = reorder(cache, ops.reshape(sentence_offsets + parents, (-1,)))
    tokens = ops.slice_update(tokens, (0, 0, state.index + 1), ids[:, :, None])
    if tracks_token_scores(state):
        # (batch, beams): the chosen tokens' own log-probabilities.
        step_scores = ops.take_along_axis(
            ops.reshape(candidates.token_log_probs, (batch_size, -1)), chosen, axis=1
        )
        token_scores = ops.slice_update(
            token_scores, (0, 0, state.index + 1), step_scores[:, :, None]
        )
    if stop_sequences:
        stopped = ends_with_stop_sequence(
            tokens, state.index + 1, stop_sequences, prompt_lengths
        )
        ended = ops.logical_or(ended, ops.logical_and(generated, stopped))
    return DecodeState(
        index=state.index + 1,
        tokens=tokens,
        log_probs=log_probs,
        ended=ended,
        lengths=ops.take_along_axis(candidates.lengths, parents, axis=1),
        cache=cache,
        token_scores=token_scores,
    )


def loop_inputs(sampler, given, prompt_lengths=None):
    """The `LoopInputs` of a decoding: the random draws made here, once.

    `prompt_lengths` defaults to the number of `given` positions per row.
    """
    batch_size, total_length = ops.shape(given)[0], ops.shape(given)[1]
    if prompt_lengths is None:
        prompt_lengths = ops.sum(ops.cast(given, "int32"), axis=1)  # (batch,)
    return LoopInputs(
        given=given,
        draws=sampler.random_draws(total_length - 1, batch_size),
        prompt_lengths=ops.cast(prompt_lengths, "int32"),
    )


class LoopSettings(NamedTuple):
    """How the loop decodes: what stays the same from call to call.

    The fields are `generate_tokens`'s arguments of the same names.
    """

    step: Any
    sampler: Any
    end_id: Any
    pad_id: int
    suppressed_ids: tuple = ()
    reorder: Any = None
    processors: tuple = ()
    stop_sequences: tuple = ()


def decode_steps(settings, state, inputs, max_steps=None):
    """Runs the loop from `state` until every hypothesis has ended, the
    tokens are full, or `max_steps` (int or scalar tensor) steps are done.

    One `keras.ops.while_loop`; the returned `DecodeState` continues where
    this one stopped (the resumable step of streaming,
    `keras_attn.generation.streaming`). `settings` is a `LoopSettings`,
    `inputs` a `LoopInputs`.
    """
    total_length = ops.shape(state.tokens)[2]
    last_index = total_length - 1
    if max_steps is not None:
        last_index = ops.minimum(last_index, state.index + max_steps)
    end_ids = end_ids_tuple(settings.end_id)

    def cond(state):
        return ops.logical_and(
            state.index < last_index, ops.logical_not(ops.all(state.ended))
        )

    def body(state):
        logits, log_probs, cache = step_log_probs(
            settings.step,
            state,
            settings.suppressed_ids,
            settings.processors,
            inputs.prompt_lengths,
            end_ids,
        )
        options = candidates(state, log_probs, inputs.given, settings.pad_id)
        draws = inputs.draws
        draw = None if draws is None else ops.take(draws, state.index, axis=0)
        parents, ids = settings.sampler.select(
            logits, options.log_probs, options.lengths, draw
        )
        new_state = advance(
            state,
            options,
            parents,
            ids,
            cache,
            settings.end_id,
            settings.pad_id,
            settings.reorder,
            settings.stop_sequences,
            inputs.prompt_lengths,
        )
        return [new_state]

    # A one-element list: Keras unpacks a tuple (the named state) otherwise.
    (final,) = ops.while_loop(cond, body, [state])
    return final


def finish(state, sampler):
    """`(tokens, scores, token_scores)` of a finished loop, best first.

    `token_scores` is `None` unless the state tracks them.
    """
    scores = sampler.final_scores(state.log_probs, state.lengths)
    tokens = state.tokens
    token_scores = state.token_scores if tracks_token_scores(state) else None
    if sampler.num_beams > 1:
        # Re-rank by final score (live hypotheses cut at the end included).
        scores, order = top_k_rows(scores, sampler.num_beams)
        tokens = gather_beams(tokens, order)
        if token_scores is not None:
            token_scores = gather_beams(token_scores, order)
    return tokens, scores, token_scores


def generate_tokens(
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
    processors=(),
    prompt_lengths=None,
    stop_sequences=(),
    return_token_scores=False,
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
        end_id: int, a sequence of ints (a hypothesis ends at any of
            them), or `None` to run until `tokens` is full.
        pad_id: int, the padding id.
        suppressed_ids: ids never generated (padding, start). Defaults to
            `()`.
        first_index: int or scalar tensor, the first position whose logits
            are computed. Defaults to `0`.
        reorder: `(state, flat_parents) -> state`, or `None` when the state
            does not follow the beams. Defaults to `None`.
        processors: `keras_attn.generation.LogitsProcessor`s applied, in
            order, to the logits before the sampler. Defaults to `()`.
        prompt_lengths: int32 `(batch,)`, the given tokens at the start of
            each row, for the processors and stop sequences. Defaults to
            `None`, meaning the number of `given` positions.
        stop_sequences: tuples of ids: a hypothesis also ends once its
            generated tokens end with one of them. Defaults to `()`.
        return_token_scores: bool, whether to return each generated
            token's log-probability. Defaults to `False`.

    Returns:
        `(tokens, scores, token_scores)`: int32 `(batch, beams,
        total_length)`, float32 `(batch, beams)` (`sampler.final_scores`),
        best hypothesis first, and float32 `(batch, beams, total_length)`
        (each generated token's log-probability, 0 at given positions and
        padding) or `None` without `return_token_scores`.
    """
    inputs = loop_inputs(sampler, given, prompt_lengths)
    initial = initial_state(
        tokens, sampler.num_beams, first_index, state, return_token_scores
    )
    settings = LoopSettings(
        step=step,
        sampler=sampler,
        end_id=end_id,
        pad_id=pad_id,
        suppressed_ids=tuple(suppressed_ids),
        reorder=reorder,
        processors=tuple(processors),
        stop_sequences=tuple(stop_sequences),
    )
    return finish(decode_steps(settings, initial, inputs), sampler)
