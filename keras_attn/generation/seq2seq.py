"""Decoding for `keras_attn.models.Transformer` with any sampler."""

import keras
from keras import ops

from keras_attn.generation import samplers as samplers_lib
from keras_attn.generation.decoding_inputs import (
    check_source,
    check_special_token_ids,
    check_token_batch,
    resolve_max_length,
)
from keras_attn.generation.decoding_loop import (
    LoopSettings,
    cached_step,
    decode_steps,
    finish,
    initial_state,
    loop_inputs,
    reorder_self_attention,
    uncached_step,
)
from keras_attn.generation.logits_processors import check_processors
from keras_attn.generation.stop_sequences import check_stop_sequences
from keras_attn.validation import check_bool


def _step_state(model, encoder_tokens, max_length, beams, use_cache):
    """Runs the encoder once; returns the step's state (a cache, or not)."""
    encoder_output, encoder_mask = model.encode(encoder_tokens)
    if beams > 1:
        # Every beam of a sentence shares its encoder output: (batch * beams, ...)
        # (a tuple of outputs for a `TransformerEnsemble`).
        encoder_output = keras.tree.map_structure(
            lambda output: ops.repeat(output, beams, axis=0), encoder_output
        )
        encoder_mask = ops.repeat(encoder_mask, beams, axis=0)
    if use_cache:
        return model.initial_cache(encoder_output, encoder_mask, max_length)
    return encoder_output, encoder_mask


def seq2seq_settings(
    model, start_id, end_id, sampler, use_cache, processors=(), stop_sequences=()
):
    """The `LoopSettings` of an encoder-decoder (arguments already checked)."""
    return LoopSettings(
        step=cached_step(model) if use_cache else uncached_step(model),
        sampler=sampler,
        end_id=end_id,
        pad_id=model.pad_id,
        suppressed_ids=(model.pad_id, start_id),
        reorder=reorder_self_attention if use_cache else None,
        processors=tuple(processors),
        stop_sequences=tuple(stop_sequences),
    )


def start_seq2seq(
    model,
    encoder_tokens,
    start_id,
    sampler,
    max_length,
    use_cache=True,
    prefix_tokens=None,
    track_token_scores=False,
):
    """`(DecodeState, LoopInputs)` before the first step (arguments checked).

    The encoder runs here, once; the target buffer holds `max_length + 1`
    positions (the start token first).
    """
    state = _step_state(model, encoder_tokens, max_length, sampler.num_beams, use_cache)
    batch_size = ops.shape(encoder_tokens)[0]
    tokens, given, prompt_lengths = _start_tokens(
        batch_size, max_length, start_id, model.pad_id, prefix_tokens
    )
    inputs = loop_inputs(sampler, given, prompt_lengths)
    state = initial_state(tokens, sampler.num_beams, 0, state, track_token_scores)
    return state, inputs


def _start_tokens(batch_size, max_length, start_id, pad_id, prefix_tokens=None):
    """`(tokens, given, prompt_lengths)` of the target buffer.

    `tokens`, int32 `(batch, max_length + 1)`: the start token, the prefix
    (if any), then padding; `given`, bool, `True` at the prefix's tokens;
    `prompt_lengths`, int32 `(batch,)`: the start token and the prefix.
    """
    tokens = ops.full((batch_size, max_length + 1), pad_id, "int32")
    tokens = ops.slice_update(
        tokens, (0, 0), ops.full((batch_size, 1), start_id, "int32")
    )
    # Only the prefix is given; the loop never asks about the start token.
    given = ops.zeros((batch_size, max_length + 1), "bool")
    if prefix_tokens is None:
        return tokens, given, ops.ones((batch_size,), "int32")
    tokens = ops.slice_update(tokens, (0, 1), prefix_tokens)
    given = ops.slice_update(given, (0, 1), ops.not_equal(prefix_tokens, pad_id))
    return tokens, given, 1 + ops.sum(ops.cast(given, "int32"), axis=1)


def check_prefix(model, prefix_tokens, max_length, batch_size):
    """The target prefixes as int32 `(batch, prefix_length)`, or `None`.

    Right-padded with `model.pad_id`; at most `max_length - 1` long (one
    token is left to generate) when `max_length` is known.
    """
    if prefix_tokens is None:
        return None
    prefix_tokens = check_token_batch(
        prefix_tokens, "prefix_tokens", model.vocabulary_size
    )
    if isinstance(batch_size, int) and prefix_tokens.shape[0] not in (None, batch_size):
        raise ValueError(
            "`prefix_tokens` must have one row per source sentence, "
            f"{batch_size}. Received: prefix_tokens.shape={tuple(prefix_tokens.shape)}"
        )
    width = prefix_tokens.shape[1]
    if isinstance(max_length, int) and width is not None and width >= max_length:
        raise ValueError(
            "`prefix_tokens` must be shorter than `max_length` (at least one "
            f"token is generated). Received: prefix_tokens.shape="
            f"{tuple(prefix_tokens.shape)}, max_length={max_length}"
        )
    return prefix_tokens


def decoding_result(tokens, scores, sampler, token_scores=None):
    """The dict the decoding functions return, from `(batch, beams, ...)`."""
    result = {"tokens": tokens[:, 0], "scores": scores[:, 0]}
    beam = isinstance(sampler, samplers_lib.BeamSampler)
    if beam:
        result.update(beam_tokens=tokens, beam_scores=scores)
    if token_scores is not None:
        result["token_scores"] = token_scores[:, 0]
        if beam:
            result["beam_token_scores"] = token_scores
    return result


def empty_decoding_result(sampler, max_length, return_token_scores=False):
    """`decoding_result` of an empty batch: no rows, the usual columns."""
    tokens = ops.zeros((0, sampler.num_beams, max_length), "int32")
    scores = ops.zeros((0, sampler.num_beams), "float32")
    token_scores = ops.zeros(tokens.shape, "float32") if return_token_scores else None
    return decoding_result(tokens, scores, sampler, token_scores)


def check_decoding_options(
    model, use_cache, processors, stop_sequences, return_token_scores
):
    """The options that every model's decoding takes, checked:
    `(use_cache, processors, stop_sequences, return_token_scores)`."""
    return (
        check_bool(use_cache, "use_cache"),
        check_processors(processors, model.vocabulary_size),
        check_stop_sequences(stop_sequences, model.vocabulary_size, model.pad_id),
        check_bool(return_token_scores, "return_token_scores"),
    )


def generate_seq2seq(
    model,
    encoder_tokens,
    start_id,
    end_id,
    sampler="greedy",
    max_length=None,
    use_cache=True,
    processors=None,
    prefix_tokens=None,
    stop_sequences=None,
    return_token_scores=False,
):
    """Translates a batch of source ids with one decoding loop and a sampler.

    The encoder runs once; cross-attention keys and values are computed once
    per sentence and the decoder's self-attention keys and values once per
    generated token (`use_cache=True`). The loop
    (`keras_attn.generation.decoding_loop.generate_tokens`) is a
    `keras.ops.while_loop` that stops as soon as every hypothesis has
    produced `end_id`, so it compiles under XLA (JAX) and `tf.function`
    (TensorFlow); `keras_attn.generation.SequenceGenerator` compiles it.

    The source ids are checked first, also when traced: shape
    `(batch, source_length)` with `source_length >= 1`, an integer dtype
    (float ids are refused, not truncated); eagerly, every id inside the
    vocabulary. An empty batch gives empty results.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`, padded with the
            model's `pad_id`.
        start_id: int, the id that starts every target sentence.
        end_id: int, the id that ends a sentence, or a list of ids (a
            sentence ends at any of them).
        sampler: a `keras_attn.generation.Sampler` or its name (`"greedy"`,
            `"beam"`, `"random"`, `"top_k"`, `"top_p"`). Defaults to
            `"greedy"`.
        max_length: int, the most tokens to generate. Defaults to `None`,
            meaning `source_length + 50` (section 6.1 of the paper).
        use_cache: bool, whether to use the key/value cache. `False`
            recomputes the whole decoder at every step (a baseline for
            tests and benchmarks). Defaults to `True`.
        processors: a list of `keras_attn.generation.LogitsProcessor`
            applied, in order, to the logits of every step before the
            sampler. Defaults to `None` (none).
        prefix_tokens: int tensor `(batch, prefix_length)`, right-padded
            with the model's `pad_id`: each sentence's target starts with
            its prefix (forced decoding), then the sampler continues it.
            The prefix's tokens cost nothing in the scores. Defaults to
            `None` (no prefix).
        stop_sequences: a list of lists of token ids: a sentence also ends
            once its generated tokens end with one of them (kept in the
            output). Defaults to `None` (none).
        return_token_scores: bool, whether to add `"token_scores"`, float32
            `(batch, max_length)`: each generated token's log-probability
            (0 at the prefix and padding), which sum to the unnormalized
            score. Defaults to `False`.

    Returns:
        A dict with `"tokens"`, int32 `(batch, max_length)` (the sentence,
        `end_id`, then `pad_id`), and `"scores"`, float32 `(batch,)`: summed
        log-probabilities of the generated tokens, divided by the length
        penalty for a `BeamSampler`, which also adds `"beam_tokens"` and
        `"beam_scores"` with every hypothesis, best first (and
        `"beam_token_scores"` with `return_token_scores`).

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=20)
    >>> out = keras_attn.generation.generate_seq2seq(
    ...     model, keras.ops.ones((2, 6), "int32"), start_id=2, end_id=3,
    ...     sampler=keras_attn.generation.BeamSampler(num_beams=3))
    >>> tuple(out["beam_tokens"].shape)
    (2, 3, 56)
    """
    sampler = samplers_lib.get(sampler)
    end_id = check_special_token_ids(
        start_id, end_id, model.vocabulary_size, model.pad_id
    )
    use_cache, processors, stop_sequences, return_token_scores = check_decoding_options(
        model, use_cache, processors, stop_sequences, return_token_scores
    )
    encoder_tokens = check_source(model, encoder_tokens)
    max_length = resolve_max_length(model, encoder_tokens, max_length)
    prefix_tokens = check_prefix(
        model, prefix_tokens, max_length, encoder_tokens.shape[0]
    )
    if encoder_tokens.shape[0] == 0:
        return empty_decoding_result(sampler, max_length, return_token_scores)
    settings = seq2seq_settings(
        model, start_id, end_id, sampler, use_cache, processors, stop_sequences
    )
    state, inputs = start_seq2seq(
        model,
        encoder_tokens,
        start_id,
        sampler,
        max_length,
        use_cache,
        prefix_tokens,
        return_token_scores,
    )
    tokens, scores, token_scores = finish(
        decode_steps(settings, state, inputs), sampler
    )
    if token_scores is not None:
        token_scores = token_scores[:, :, 1:]
    # The start token left out.
    return decoding_result(tokens[:, :, 1:], scores, sampler, token_scores)
