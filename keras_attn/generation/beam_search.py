"""Beam search with the paper's length penalty and a key/value cache."""

from keras_attn.generation.samplers import (
    BeamSampler,
    check_length_penalty_alpha,
    length_penalty,
)
from keras_attn.generation.seq2seq import generate_seq2seq
from keras_attn.validation import check_positive_int

__all__ = ["beam_search", "check_beam_search_args", "length_penalty"]


def check_beam_search_args(beam_size, length_penalty_alpha):
    """Checks the beam options by their names."""
    check_positive_int(beam_size, "beam_size")
    check_length_penalty_alpha(length_penalty_alpha)


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

    `generate_seq2seq` with a `BeamSampler(beam_size, length_penalty_alpha)`.
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
        length_penalty_alpha: float in `[0, 10]`, `alpha`. Defaults to `0.6`.
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
    check_beam_search_args(beam_size, length_penalty_alpha)
    sampler = BeamSampler(
        num_beams=int(beam_size), length_penalty_alpha=length_penalty_alpha
    )
    return generate_seq2seq(
        model, encoder_tokens, start_id, end_id, sampler=sampler, max_length=max_length
    )
