"""`beam_search`: a shorthand for `generate_seq2seq` with a `BeamSampler`."""

from keras_attn.generation.samplers import from_strategy
from keras_attn.generation.seq2seq import generate_seq2seq

__all__ = ["beam_search"]


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

    A one-line shorthand, in the paper's words: `generate_seq2seq` with
    `BeamSampler(num_beams=beam_size, length_penalty_alpha=...)`, which
    documents the search. Hypotheses are ranked by `log P(y | x) / lp(y)`
    with the GNMT length penalty `lp(y) = ((5 + |y|) / 6) ** alpha`, `|y|`
    counting the end token. The search stops when every kept hypothesis of
    every sentence has ended, or after `max_length` tokens; the decoder's
    self-attention cache is reordered with the beams, the encoder output
    and cross-attention keys/values are computed once. With `beam_size=1`
    the search is exactly greedy search.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`.
        start_id: int, the start id.
        end_id: int, the end id.
        beam_size: int, the number of hypotheses kept. Defaults to `4`.
        length_penalty_alpha: float in `[0, 10]`, `alpha`. Defaults to `0.6`.
        max_length: int. Defaults to `None`, meaning `source_length + 50`.

    Returns:
        A dict with `"tokens"` int32 `(batch, max_length)`, the best
        hypothesis per sentence, `"scores"` float32 `(batch,)`, its
        length-normalised log-probability, and `"beam_tokens"` /
        `"beam_scores"` with all `beam_size` hypotheses, best first.

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=20)
    >>> out = keras_attn.generation.beam_search(
    ...     model, keras.ops.ones((2, 6), "int32"), start_id=2, end_id=3)
    >>> tuple(out["beam_tokens"].shape)
    (2, 4, 56)

    References:
        Vaswani et al., 2017, section 6.1; Wu et al., "Google's Neural
        Machine Translation System", 2016, section 7.
    """
    sampler = from_strategy(
        "beam", beam_size=beam_size, length_penalty_alpha=length_penalty_alpha
    )
    return generate_seq2seq(
        model, encoder_tokens, start_id, end_id, sampler=sampler, max_length=max_length
    )
