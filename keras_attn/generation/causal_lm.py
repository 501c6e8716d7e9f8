"""Text generation for `keras_attn.models.TransformerLM` with any sampler."""

import functools

from keras import ops

from keras_attn.generation import samplers as samplers_lib
from keras_attn.generation.decoding_loop import (
    decode,
    is_integer,
    reorder_self_attention,
)
from keras_attn.generation.samplers import from_strategy
from keras_attn.generation.sampling import check_sampling_args
from keras_attn.validation import check_choice

LM_STRATEGIES = ("greedy", "sample")


def _check_prompt(model, prompt_tokens, max_length, end_id):
    prompt_tokens = ops.convert_to_tensor(prompt_tokens, "int32")
    if len(prompt_tokens.shape) != 2 or prompt_tokens.shape[1] in (None, 0):
        raise ValueError(
            "`prompt_tokens` must have shape (batch, prompt_length) with a "
            f"known prompt_length > 0. Received: prompt_tokens.shape="
            f"{tuple(prompt_tokens.shape)}"
        )
    if not is_integer(max_length) or max_length < prompt_tokens.shape[1]:
        raise ValueError(
            "`max_length` must be an integer at least the prompt length "
            f"{prompt_tokens.shape[1]}. Received: max_length={max_length!r}"
        )
    if model.position == "learned" and max_length > model.max_sequence_length:
        raise ValueError(
            f"`max_length` must be at most max_sequence_length="
            f"{model.max_sequence_length} with learned positions. "
            f"Received: max_length={max_length}"
        )
    if end_id is not None and (
        not is_integer(end_id) or not 0 <= end_id < model.vocabulary_size
    ):
        raise ValueError(
            f"`end_id` must be None or a token id in [0, {model.vocabulary_size}). "
            f"Received: end_id={end_id!r}"
        )
    return prompt_tokens


def _cached_step(model, prompt_tokens, batch_size, max_length):
    """Prefills the cache with the prompt, returns `(step, cache)`."""
    cache = model.initial_cache(batch_size, max_length)
    # One parallel pass writes the keys/values of every prompt position.
    _, cache = model.decode_step(prompt_tokens, cache, 0)

    def step(tokens, index, cache):
        current = ops.slice(tokens, (0, index), (ops.shape(tokens)[0], 1))  # (batch, 1)
        logits, cache = model.decode_step(current, cache, index)
        return logits[:, 0, :], cache  # (batch, vocabulary)

    return step, cache


def _uncached_step(model, tokens, index, state):
    """Recomputes the whole sequence every step (the baseline for tests)."""
    logits = model(tokens, training=False)  # (batch, max_length, vocabulary)
    batch_size, _, vocabulary_size = ops.shape(logits)
    # (batch, 1, vocabulary) -> (batch, vocabulary)
    logits = ops.slice(logits, (0, index, 0), (batch_size, 1, vocabulary_size))
    return logits[:, 0, :], state


def generate_lm(
    model,
    prompt_tokens,
    max_length,
    strategy="greedy",
    top_k=None,
    top_p=None,
    temperature=1.0,
    seed=None,
    end_id=None,
    use_cache=True,
    sampler=None,
):
    """Continues prompts with a causal language model.

    Prompts are right-padded with `model.pad_id` and may have different
    lengths: each row keeps its own prompt tokens and is continued after
    its last one. The whole padded prompt block is run through the model
    once to fill the key/value cache (`decode_step` with
    `new_length = prompt_length`); then one position per step is decoded,
    starting at the shortest prompt's last token (for longer prompts those
    steps only recompute prompt positions and keep the prompt token). The
    loop is a `keras.ops.while_loop` that stops when every row has produced
    `end_id` or `max_length` tokens exist.

    The loop is the one every model shares
    (`keras_attn.generation.decoding_loop.decode`); `sampler` picks the
    strategy (greedy, beam, top-k, top-p, temperature), or the older
    `strategy` with its keyword options does. With a random sampler every
    uniform random number is drawn before
    the loop from `seed` (one per row and position), so a seed gives the same
    text with and without the cache.

    Args:
        model: a `keras_attn.models.TransformerLM`.
        prompt_tokens: int tensor `(batch, prompt_length)`, each row at
            least one token, right-padded with `model.pad_id`.
        max_length: int, the total length (prompt included) of the
            returned sequences.
        strategy: `"greedy"` or `"sample"`. Defaults to `"greedy"`.
        top_k: int, sample among the `k` most likely ids. Defaults to
            `None` (all). Sampling only.
        top_p: float in `(0, 1]`, nucleus sampling. Defaults to `None`
            (all). Sampling only.
        temperature: float > 0. Defaults to `1.0`. Sampling only.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.
        end_id: int, the id that ends a sequence. Defaults to `None` (run to
            `max_length`).
        use_cache: bool, whether to use the key/value cache. `False`
            recomputes the whole sequence at every step. Defaults to `True`.
        sampler: a `keras_attn.generation.Sampler` or its name; when given,
            `strategy`, `top_k`, `top_p`, `temperature` and `seed` must keep
            their defaults. Defaults to `None` (use `strategy`).

    Returns:
        A dict with `"tokens"`, int32 `(batch, max_length)` (the prompt,
        its continuation up to and including `end_id`, then `pad_id`), and
        `"scores"`, float32 `(batch,)`: the summed log-probabilities of the
        generated tokens under the unfiltered model (divided by the length
        penalty for a `BeamSampler`, which also adds `"beam_tokens"` and
        `"beam_scores"`).

    Example:

    >>> model = keras_attn.models.TransformerLM.from_preset(
    ...     "lm_tiny", vocabulary_size=20)
    >>> out = keras_attn.generation.generate_lm(
    ...     model, np.array([[2, 7, 9]]), max_length=10, strategy="sample",
    ...     top_p=0.9, seed=1)
    >>> tuple(out["tokens"].shape)
    (1, 10)
    """
    if sampler is None:
        check_choice(strategy, "strategy", LM_STRATEGIES)
        check_sampling_args(top_k, top_p, temperature)
        options = dict(top_k=top_k, top_p=top_p, temperature=temperature, seed=seed)
        sampler = from_strategy(strategy, **(options if strategy == "sample" else {}))
    else:
        sampler = samplers_lib.get(sampler)
        given = dict(
            strategy=strategy,
            top_k=top_k,
            top_p=top_p,
            temperature=temperature,
            seed=seed,
        )
        defaults = dict(
            strategy="greedy", top_k=None, top_p=None, temperature=1.0, seed=None
        )
        changed = [name for name in given if given[name] != defaults[name]]
        if changed:
            raise ValueError(
                f"Pass either `sampler` or {', '.join(f'`{n}`' for n in changed)}, "
                f"not both. Received: sampler={sampler!r}, "
                + ", ".join(f"{n}={given[n]!r}" for n in changed)
            )
    prompt_tokens = _check_prompt(model, prompt_tokens, max_length, end_id)
    max_length = int(max_length)
    end_id = None if end_id is None else int(end_id)
    pad_id = model.pad_id
    batch_size = ops.shape(prompt_tokens)[0]
    beams = sampler.num_beams

    # (batch, max_length): the prompts, then padding to fill in.
    tokens = ops.full((batch_size, max_length), pad_id, dtype="int32")
    tokens = ops.slice_update(tokens, (0, 0), prompt_tokens)
    in_prompt = ops.not_equal(tokens, pad_id)  # (batch, max_length)
    prompt_lengths = ops.sum(ops.cast(in_prompt, "int32"), axis=1)  # (batch,)
    # Decoding starts at the shortest prompt's last token.
    first_index = ops.maximum(ops.min(prompt_lengths) - 1, 0)

    if use_cache:
        step, state = _cached_step(
            model,
            ops.repeat(prompt_tokens, beams, axis=0),
            batch_size * beams,
            max_length,
        )
        reorder = reorder_self_attention
    else:
        step, state, reorder = functools.partial(_uncached_step, model), (), None
    tokens, scores = decode(
        step,
        state,
        tokens,
        in_prompt,
        sampler,
        end_id=end_id,
        pad_id=pad_id,
        suppressed_ids=(pad_id,),
        first_index=first_index,
        reorder=reorder,
    )
    result = {"tokens": tokens[:, 0], "scores": scores[:, 0]}
    if isinstance(sampler, samplers_lib.BeamSampler):
        result.update(beam_tokens=tokens, beam_scores=scores)
    return result
