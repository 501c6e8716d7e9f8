"""Top-k / top-p (nucleus) sampling with a key/value cache."""

import keras
from keras import ops

from keras_attn.generation.decoding_loop import (
    check_token_ids,
    decoding_loop,
    decoding_state,
    encode_source,
    is_integer,
    resolve_max_length,
)


def filter_logits(logits, top_k=None, top_p=None, temperature=1.0):
    """Divides by `temperature` and keeps the top-k / top-p candidates.

    Args:
        logits: float tensor `(batch, vocabulary)`.
        top_k: int, keep the `k` most likely ids (all of them if `k` is at
            least the vocabulary size). Defaults to `None` (all).
        top_p: float in `(0, 1]`, keep the smallest set of most likely ids
            whose probability reaches `top_p` (Holtzman et al., 2020).
            Defaults to `None` (all).
        temperature: float > 0. Defaults to `1.0`.

    Returns:
        Logits of the same shape with discarded ids at `-inf`.
    """
    logits = ops.cast(logits, "float32") / temperature
    vocabulary_size = logits.shape[-1]
    if top_k is not None and vocabulary_size is not None:
        top_k = min(top_k, vocabulary_size)  # more than there are: keep all
    if top_k is not None:
        kth_best = ops.top_k(logits, top_k, sorted=True)[0][:, -1:]  # (batch, 1)
        logits = ops.where(logits < kth_best, -float("inf"), logits)
    if top_p is not None:
        vocabulary_size = ops.shape(logits)[-1]
        sorted_logits = ops.top_k(logits, vocabulary_size, sorted=True)[0]
        sorted_probs = ops.softmax(sorted_logits, axis=-1)
        # Probability mass strictly before each candidate, in sorted order.
        mass_before = ops.cumsum(sorted_probs, axis=-1) - sorted_probs
        kept = ops.where(mass_before < top_p, sorted_logits, float("inf"))
        threshold = ops.min(kept, axis=-1, keepdims=True)  # (batch, 1)
        logits = ops.where(logits < threshold, -float("inf"), logits)
    return logits


def check_sampling_args(top_k, top_p, temperature):
    if top_k is not None and (not is_integer(top_k) or top_k <= 0):
        raise ValueError(
            f"`top_k` must be a positive integer. Received: top_k={top_k!r}"
        )
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"`top_p` must be in (0, 1]. Received: top_p={top_p!r}")
    if not temperature > 0:
        raise ValueError(
            f"`temperature` must be positive. Received: temperature={temperature!r}"
        )


def sample_from_logits(logits, uniform):
    """Inverse-CDF sampling: the first id whose cumulative probability > `uniform`.

    Ids of zero probability (filtered to `-inf`) are never returned.

    Args:
        logits: float `(batch, vocabulary)`, `-inf` for excluded ids.
        uniform: float `(batch,)` in `[0, 1)`.

    Returns:
        int32 `(batch,)`.
    """
    probabilities = ops.softmax(logits, axis=-1)
    cumulative = ops.cumsum(probabilities, axis=-1)  # (batch, vocabulary)
    # Scaled by the total, which rounding leaves a little off 1: a draw just
    # below 1 would otherwise pass the whole sum and pick the last id.
    threshold = ops.cast(uniform, cumulative.dtype)[:, None] * cumulative[:, -1:]
    ids = ops.sum(ops.cast(cumulative <= threshold, "int32"), axis=-1)
    # If rounding still passes the sum, take the last id of nonzero
    # probability, never an excluded one.
    last = ops.shape(logits)[-1] - 1
    possible = ops.cast(probabilities > 0, "int32")
    last_possible = last - ops.cast(
        ops.argmax(ops.flip(possible, axis=-1), axis=-1), "int32"
    )
    return ops.minimum(ids, last_possible)


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

    All random numbers are drawn before the loop from `seed`, one uniform
    number per sentence and step, so a seed gives the same output with and
    without the cache and on every run.

    Args:
        model: a `keras_attn.models.Transformer`.
        encoder_tokens: int tensor `(batch, source_length)`.
        start_id: int, the start id.
        end_id: int, the end id.
        top_k: int. Defaults to `None` (no top-k filtering).
        top_p: float in `(0, 1]`. Defaults to `None` (no nucleus filtering).
        temperature: float > 0. Defaults to `1.0`.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.
        max_length: int. Defaults to `None`, meaning `source_length + 50`.
        use_cache: bool. Defaults to `True`.

    Returns:
        A dict with `"tokens"` `(batch, max_length)` and `"scores"` `(batch,)`
        (summed log-probabilities under the unfiltered model).
    """
    check_token_ids(start_id, end_id, model.vocabulary_size)
    check_sampling_args(top_k, top_p, temperature)
    encoder_tokens, encoder_output, encoder_mask = encode_source(model, encoder_tokens)
    max_length = resolve_max_length(model, encoder_tokens, max_length)
    batch_size = ops.shape(encoder_tokens)[0]
    # (max_length, batch): one uniform draw per step and sentence.
    uniforms = keras.random.uniform((max_length, batch_size), seed=seed)
    step, state = decoding_state(
        model, encoder_output, encoder_mask, max_length, use_cache
    )

    def choose(logits, index):
        filtered = filter_logits(logits, top_k, top_p, temperature)
        return sample_from_logits(filtered, ops.take(uniforms, index, axis=0))

    tokens, scores = decoding_loop(
        step, state, batch_size, max_length, start_id, end_id, model.pad_id, choose
    )
    return {"tokens": tokens, "scores": scores}
