"""Decoding for `keras_attn.models.Transformer` with any sampler."""

from keras import ops

from keras_attn.generation import samplers as samplers_lib
from keras_attn.generation.decoding_loop import (
    cached_step,
    check_token_ids,
    decode,
    encode_source,
    reorder_self_attention,
    resolve_max_length,
    uncached_step,
)


def generate_seq2seq(
    model,
    encoder_tokens,
    start_id,
    end_id,
    sampler="greedy",
    max_length=None,
    use_cache=True,
):
    """Translates a batch of source ids with one decoding loop and a sampler.

    The encoder runs once; cross-attention keys and values are computed once
    per sentence and the decoder's self-attention keys and values once per
    generated token (`use_cache=True`). The loop
    (`keras_attn.generation.decoding_loop.decode`) is a
    `keras.ops.while_loop` that stops as soon as every hypothesis has
    produced `end_id`, so it compiles under XLA (JAX) and `tf.function`
    (TensorFlow); `keras_attn.generation.SequenceGenerator` compiles it.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`, padded with the
            model's `pad_id`.
        start_id: int, the id that starts every target sentence.
        end_id: int, the id that ends a sentence.
        sampler: a `keras_attn.generation.Sampler` or its name (`"greedy"`,
            `"beam"`, `"random"`, `"top_k"`, `"top_p"`). Defaults to
            `"greedy"`.
        max_length: int, the most tokens to generate. Defaults to `None`,
            meaning `source_length + 50` (section 6.1 of the paper).
        use_cache: bool, whether to use the key/value cache. `False`
            recomputes the whole decoder at every step (a baseline for
            tests and benchmarks). Defaults to `True`.

    Returns:
        A dict with `"tokens"`, int32 `(batch, max_length)` (the sentence,
        `end_id`, then `pad_id`), and `"scores"`, float32 `(batch,)`: summed
        log-probabilities of the generated tokens, divided by the length
        penalty for a `BeamSampler`, which also adds `"beam_tokens"` and
        `"beam_scores"` with every hypothesis, best first.

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
    check_token_ids(start_id, end_id, model.vocabulary_size)
    encoder_tokens, encoder_output, encoder_mask = encode_source(model, encoder_tokens)
    max_length = resolve_max_length(model, encoder_tokens, max_length)
    batch_size = ops.shape(encoder_tokens)[0]
    beams = sampler.num_beams
    if beams > 1:
        # Every beam of a sentence shares its encoder output: (batch * beams, ...).
        encoder_output = ops.repeat(encoder_output, beams, axis=0)
        encoder_mask = ops.repeat(encoder_mask, beams, axis=0)
    if use_cache:
        step, reorder = cached_step(model), reorder_self_attention
        state = model.initial_cache(encoder_output, encoder_mask, max_length)
    else:
        step, reorder = uncached_step(model), None
        state = (encoder_output, encoder_mask)
    # (batch, max_length + 1): position 0 holds the start token.
    tokens = ops.full((batch_size, max_length + 1), model.pad_id, "int32")
    tokens = ops.slice_update(
        tokens, (0, 0), ops.full((batch_size, 1), start_id, "int32")
    )
    # Only the start token is given, and the loop never asks about it.
    given = ops.zeros((batch_size, max_length + 1), "bool")
    tokens, scores = decode(
        step,
        state,
        tokens,
        given,
        sampler,
        end_id=end_id,
        pad_id=model.pad_id,
        suppressed_ids=(model.pad_id, start_id),
        reorder=reorder,
    )
    tokens = tokens[:, :, 1:]  # the start token left out
    result = {"tokens": tokens[:, 0], "scores": scores[:, 0]}
    if isinstance(sampler, samplers_lib.BeamSampler):
        result.update(beam_tokens=tokens, beam_scores=scores)
    return result
