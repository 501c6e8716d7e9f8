"""`greedy_search`: a shorthand for `generate_seq2seq` with a `GreedySampler`."""

from keras_attn.generation.samplers import GreedySampler
from keras_attn.generation.seq2seq import generate_seq2seq


def greedy_search(
    model,
    encoder_tokens,
    start_id,
    end_id,
    max_length=None,
    use_cache=True,
):
    """Translates by taking the most likely token at every step.

    A one-line shorthand: `generate_seq2seq` with a `GreedySampler`. The
    encoder runs once;
    cross-attention keys and values are computed once per sentence and the
    decoder's self-attention keys and values once per generated token
    (`use_cache=True`). The loop is a `keras.ops.while_loop` that stops as
    soon as every sentence has produced `end_id`, so it compiles under XLA
    (JAX) and `tf.function` (TensorFlow); see
    `keras_attn.generation.SequenceGenerator` for a compiled entry point.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`, padded with the
            model's `pad_id`.
        start_id: int, the id that starts every target sentence.
        end_id: int, the id that ends a sentence.
        max_length: int, the most tokens to generate. Defaults to `None`,
            meaning `source_length + 50` (section 6.1 of the paper).
        use_cache: bool, whether to use the key/value cache. `False`
            recomputes the whole decoder at every step (a baseline for
            tests and benchmarks). Defaults to `True`.

    Returns:
        A dict with `"tokens"`, int32 `(batch, max_length)` (the sentence,
        `end_id`, then `pad_id`), and `"scores"`, float32 `(batch,)` summed
        log-probabilities of the generated tokens.

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=20)
    >>> out = keras_attn.generation.greedy_search(
    ...     model, keras.ops.ones((2, 6), "int32"), start_id=2, end_id=3)
    >>> tuple(out["tokens"].shape)
    (2, 56)
    """
    return generate_seq2seq(
        model,
        encoder_tokens,
        start_id,
        end_id,
        sampler=GreedySampler(),
        max_length=max_length,
        use_cache=use_cache,
    )
