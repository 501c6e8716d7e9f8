"""`sample`: a shorthand for `generate_seq2seq` with a random sampler."""

from keras_attn.generation.samplers import from_strategy
from keras_attn.generation.seq2seq import generate_seq2seq

__all__ = ["sample"]


def sample(
    model,
    encoder_tokens,
    start_id,
    end_id,
    top_k=None,
    top_p=None,
    temperature=1.0,
    seed=None,
    max_length=None,
    use_cache=True,
):
    """Samples translations, optionally from the top-k / top-p candidates.

    A one-line shorthand: `generate_seq2seq` with a `RandomSampler`,
    `TopKSampler` (`top_k`) or `TopPSampler` (`top_p`, with or without
    `top_k`). All random numbers are drawn before the loop from `seed`, one
    uniform number per sentence and step, so a seed gives the same output
    with and without the cache and on every run.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`.
        start_id: int, the start id.
        end_id: int, the end id.
        top_k: int. Defaults to `None` (no top-k filtering).
        top_p: float in `(0, 1]`. Defaults to `None` (no nucleus filtering).
        temperature: float >= `1e-6`. Defaults to `1.0`.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.
        max_length: int. Defaults to `None`, meaning `source_length + 50`.
        use_cache: bool. Defaults to `True`.

    Returns:
        A dict with `"tokens"` `(batch, max_length)` and `"scores"` `(batch,)`
        (summed log-probabilities under the unfiltered model).
    """
    sampler = from_strategy(
        "sample", top_k=top_k, top_p=top_p, temperature=temperature, seed=seed
    )
    return generate_seq2seq(
        model,
        encoder_tokens,
        start_id,
        end_id,
        sampler=sampler,
        max_length=max_length,
        use_cache=use_cache,
    )
