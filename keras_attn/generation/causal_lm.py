"""Text generation for `keras_attn.models.TransformerLM` with any sampler."""

import functools

from keras import ops

from keras_attn.generation import samplers as samplers_lib
from keras_attn.generation.decoding_inputs import (
    check_end_ids,
    check_max_length_for,
    check_token_batch,
    max_length_limit,
)
from keras_attn.generation.decoding_loop import (
    LoopSettings,
    cached_step,
    decode_steps,
    finish,
    initial_state,
    loop_inputs,
    reorder_self_attention,
)
from keras_attn.generation.samplers import check_sampling_args, from_strategy
from keras_attn.generation.seq2seq import (
    check_decoding_options,
    decoding_result,
    empty_decoding_result,
)
from keras_attn.validation import check_choice

LM_STRATEGIES = ("greedy", "sample")
# `generate_lm`'s sampler options and their defaults: with `sampler=`, these
# must keep them.
_STRATEGY_DEFAULTS = dict(
    strategy="greedy", top_k=None, top_p=None, temperature=1.0, seed=None
)


def _resolve_sampler(sampler, options):
    """The sampler of `generate_lm`'s `sampler` or `strategy` + `options`."""
    if sampler is None:
        strategy = check_choice(options.pop("strategy"), "strategy", LM_STRATEGIES)
        check_sampling_args(options["top_k"], options["top_p"], options["temperature"])
        return from_strategy(strategy, **(options if strategy == "sample" else {}))
    sampler = samplers_lib.get(sampler)
    changed = [
        name
        for name, default in _STRATEGY_DEFAULTS.items()
        if options[name] is not default and options[name] != default
    ]
    if changed:
        raise ValueError(
            f"Pass either `sampler` or {', '.join(f'`{n}`' for n in changed)}, "
            f"not both. Received: sampler={sampler!r}, "
            + ", ".join(f"{n}={options[n]!r}" for n in changed)
        )
    return sampler


def check_prompt(model, prompt_tokens, max_length):
    """The prompts as int32 after checking them against the model and `max_length`.

    Each prompt must fit the model (learned positions, or the sequence
    length it is configured for) and leave `max_length`, the total length,
    at least its own width.
    """
    prompt_tokens = check_token_batch(
        prompt_tokens, "prompt_tokens", model.vocabulary_size
    )
    prompt_length = prompt_tokens.shape[1]
    if prompt_length in (None, 0):
        raise ValueError(
            "`prompt_tokens` must have shape (batch, prompt_length) with a "
            f"known prompt_length > 0. Received: prompt_tokens.shape="
            f"{tuple(prompt_tokens.shape)}"
        )
    limit, reason = max_length_limit(model)
    if prompt_length > limit:
        raise ValueError(
            "`prompt_tokens` is longer than the model's max length, "
            f"{reason}. Received: prompt_tokens.shape="
            f"{tuple(prompt_tokens.shape)}"
        )
    max_length = check_max_length_for(model, max_length)
    if max_length < prompt_length:
        raise ValueError(
            "`max_length`, the total length of the returned sequences, must "
            f"be at least the prompt length {prompt_length}. Received: "
            f"max_length={max_length}"
        )
    return prompt_tokens


def _check_prompt(model, prompt_tokens, max_length, end_id):
    """Checks `generate_lm`'s arguments; returns `(prompts, max_length, end_id)`."""
    prompt_tokens = check_prompt(model, prompt_tokens, max_length)
    end_id = check_end_ids(
        end_id, model.vocabulary_size, pad_id=model.pad_id, allow_none=True
    )
    return prompt_tokens, int(max_length), end_id


def _prompt_block(prompt_tokens, max_length, pad_id):
    """`(tokens, in_prompt, first_index)`: the prompts padded to `max_length`.

    Decoding starts at the shortest prompt's last token.
    """
    batch_size = ops.shape(prompt_tokens)[0]
    # (batch, max_length): the prompts, then padding to fill in.
    tokens = ops.full((batch_size, max_length), pad_id, dtype="int32")
    tokens = ops.slice_update(tokens, (0, 0), prompt_tokens)
    in_prompt = ops.not_equal(tokens, pad_id)  # (batch, max_length)
    prompt_lengths = ops.sum(ops.cast(in_prompt, "int32"), axis=1)  # (batch,)
    return tokens, in_prompt, ops.maximum(ops.min(prompt_lengths) - 1, 0)


def _cached_step(model, prompt_tokens, batch_size, max_length):
    """Prefills the cache with the prompt, returns `(step, cache)`."""
    cache = model.initial_cache(batch_size, max_length)
    # One parallel pass writes the keys/values of every prompt position.
    _, cache = model.decode_step(prompt_tokens, cache, 0)
    return cached_step(model), cache


def _uncached_step(model, tokens, index, state):
    """Recomputes the whole sequence every step (the baseline for tests)."""
    logits = model(tokens, training=False)  # (batch, max_length, vocabulary)
    batch_size, _, vocabulary_size = ops.shape(logits)
    # (batch, 1, vocabulary) -> (batch, vocabulary)
    logits = ops.slice(logits, (0, index, 0), (batch_size, 1, vocabulary_size))
    return logits[:, 0, :], state


def lm_settings(model, end_id, sampler, use_cache, processors=(), stop_sequences=()):
    """The `LoopSettings` of a causal LM (arguments already checked)."""
    uncached = functools.partial(_uncached_step, model)
    return LoopSettings(
        step=cached_step(model) if use_cache else uncached,
        sampler=sampler,
        end_id=end_id,
        pad_id=model.pad_id,
        suppressed_ids=(model.pad_id,),
        reorder=reorder_self_attention if use_cache else None,
        processors=tuple(processors),
        stop_sequences=tuple(stop_sequences),
    )


def start_lm(
    model, prompt_tokens, sampler, max_length, use_cache=True, track_token_scores=False
):
    """`(DecodeState, LoopInputs)` before the first step (arguments checked).

    With the cache, one parallel pass of the whole padded prompt block
    writes the keys/values of every prompt position here.
    """
    beams = sampler.num_beams
    tokens, in_prompt, first_index = _prompt_block(
        prompt_tokens, max_length, model.pad_id
    )
    state = ()
    if use_cache:
        batch_size = ops.shape(prompt_tokens)[0]
        _, state = _cached_step(
            model,
            ops.repeat(prompt_tokens, beams, axis=0),
            batch_size * beams,
            max_length,
        )
    inputs = loop_inputs(sampler, in_prompt)
    return initial_state(tokens, beams, first_index, state, track_token_scores), inputs


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
    processors=None,
    stop_sequences=None,
    return_token_scores=False,
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
    (`keras_attn.generation.decoding_loop.generate_tokens`); `sampler` picks the
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
        temperature: float >= `1e-6`. Defaults to `1.0`. Sampling only.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.
        end_id: int, the id that ends a sequence, or a list of ids (a
            sequence ends at any of them). Defaults to `None` (run to
            `max_length`).
        use_cache: bool, whether to use the key/value cache. `False`
            recomputes the whole sequence at every step. Defaults to `True`.
        sampler: a `keras_attn.generation.Sampler` or its name; when given,
            `strategy`, `top_k`, `top_p`, `temperature` and `seed` must keep
            their defaults. Defaults to `None` (use `strategy`).
        processors: a list of `keras_attn.generation.LogitsProcessor`
            applied, in order, to the logits of every step before the
            sampler (`MinNewTokens` counts the tokens after each row's
            prompt). Defaults to `None` (none).
        stop_sequences: a list of lists of token ids: a row also ends once
            the tokens it generated end with one of them (kept in the
            output; a match must not reach into the prompt). Defaults to
            `None` (none).
        return_token_scores: bool, whether to add `"token_scores"`, float32
            `(batch, max_length)`: each generated token's log-probability
            (0 at the prompt and padding), which sum to the unnormalized
            score. Defaults to `False`.

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
    options = dict(
        strategy=strategy, top_k=top_k, top_p=top_p, temperature=temperature, seed=seed
    )
    sampler = _resolve_sampler(sampler, options)
    use_cache, processors, stop_sequences, return_token_scores = check_decoding_options(
        model, use_cache, processors, stop_sequences, return_token_scores
    )
    prompt_tokens, max_length, end_id = _check_prompt(
        model, prompt_tokens, max_length, end_id
    )
    if prompt_tokens.shape[0] == 0:
        return empty_decoding_result(sampler, max_length, return_token_scores)
    settings = lm_settings(
        model, end_id, sampler, use_cache, processors, stop_sequences
    )
    state, inputs = start_lm(
        model, prompt_tokens, sampler, max_length, use_cache, return_token_scores
    )
    tokens, scores, token_scores = finish(
        decode_steps(settings, state, inputs), sampler
    )
    return decoding_result(tokens, scores, sampler, token_scores)
