"""Streaming: the decoding loop in chunks of steps, resumed from its state.

`SequenceGenerator.stream` runs the one decoding loop
(`decoding_loop.decode_steps`) for at most `chunk_tokens` steps per call
and hands its whole state (the `DecodeState`: tokens, index, scores, ended
flags, the key/value cache; and the `LoopInputs`: given positions, random
draws, prompt lengths) back to the caller, who passes it in again for the
next chunk. Both the start (encoder or prompt prefill, the random draws)
and the chunk are calls of the generator's compiled predict function
(`jax.jit` on JAX, `tf.function` on TensorFlow), each traced once per
input shape: one Python call per chunk, never one per token. The steps are
the unstreamed loop's, so the tokens are the same, random draws included.

Beam search is not streamed: the best hypothesis after a chunk may lose
to another later, so text already shown would have to be taken back.

The state travels as a flat dict of tensors (`pack` / `unpack`).
"""

import numpy as np

from keras_attn.generation.decoding_inputs import resolve_max_length
from keras_attn.generation.decoding_loop import (
    DecodeState,
    LoopInputs,
    decode_steps,
)

# The keys of a streamed call's input: the start, or a chunk.
START_KEY = "stream_start"
STATE_KEY = "stream_state"
STEPS_KEY = "chunk_tokens"


def pack(state, inputs):
    """A `DecodeState` and `LoopInputs` as one flat dict (no `None`)."""
    packed = {**state._asdict(), **inputs._asdict()}
    if packed["draws"] is None:
        del packed["draws"]
    return packed


def unpack(packed):
    """`(DecodeState, LoopInputs)` from `pack`'s dict."""
    state = DecodeState(**{name: packed[name] for name in DecodeState._fields})
    inputs = LoopInputs(
        given=packed["given"],
        draws=packed.get("draws"),
        prompt_lengths=packed["prompt_lengths"],
    )
    return state, inputs


def start(generator, tokens, prefix_tokens=None):
    """The packed state before the first step (traced in `generator.call`).

    `tokens` are source ids, or an LM's prompts padded to `max_length`.
    """
    from keras_attn.generation.causal_lm import start_lm
    from keras_attn.generation.seq2seq import start_seq2seq

    use_cache = generator.decode_options.get("use_cache", True)
    if generator.is_lm:
        state, inputs = start_lm(
            generator.model,
            tokens,
            generator.sampler,
            generator.decode_options["max_length"],
            use_cache,
        )
    else:
        max_length = resolve_max_length(
            generator.model, tokens, generator.decode_options.get("max_length")
        )
        state, inputs = start_seq2seq(
            generator.model,
            tokens,
            generator.start_id,
            generator.sampler,
            max_length,
            use_cache,
            prefix_tokens,
        )
    return pack(state, inputs)


def resume(generator, packed, chunk_tokens):
    """Runs at most `chunk_tokens` (int32 scalar) more steps of a packed state."""
    state, inputs = unpack(packed)
    state = decode_steps(generator.loop_settings(), state, inputs, chunk_tokens)
    return pack(state, inputs)


def is_done(packed):
    """Whether a packed state (NumPy) has nothing left to decode."""
    total_length = packed["tokens"].shape[-1]
    return bool(packed["ended"].all()) or int(packed["index"]) >= total_length - 1


def best_tokens(packed, is_lm):
    """The tokens decoded so far, `(batch, length)` NumPy, as `generate` lays
    them out (a sequence-to-sequence model's start token left out)."""
    tokens = packed["tokens"][:, 0]
    return tokens if is_lm else tokens[:, 1:]


def chunk_input(packed, chunk_tokens):
    """The input of a chunk's call."""
    return {STATE_KEY: packed, STEPS_KEY: np.asarray(chunk_tokens, "int32")}
