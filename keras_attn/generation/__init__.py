"""Decoding for `keras_attn.models.Transformer` and `TransformerLM`.

One loop (`decoding_loop.generate_tokens`) serves every model: it uses the
model's key/value cache and a `keras.ops.while_loop` that stops when all
sequences have ended. How the next token is chosen is a sampler object
(`GreedySampler`, `BeamSampler`, `RandomSampler`, `TopKSampler`,
`TopPSampler`), as in keras-hub. `generate_seq2seq` and `generate_lm` take a
sampler; `SequenceGenerator` runs them compiled (XLA on JAX, `tf.function`
on TensorFlow). `greedy_search`, `beam_search` and `sample` are one-line
shorthands for `generate_seq2seq` with a sampler, kept for the paper's
vocabulary (`beam_size`, `top_k`); new code passes a sampler. Logits
processors (`RepetitionPenalty`, `NoRepeatNGram`, `MinNewTokens`,
`BannedTokens`, `BannedSequences`, `MinP`) steer any sampler from inside
the loop (`processors=[...]`). `stop_sequences=[[ids...]]` end a row on
several tokens, `return_token_scores=True` reports each token's
log-probability, and `SequenceGenerator.stream` decodes in compiled,
resumable chunks (`keras_attn.generation.streaming`).
"""

from keras_attn.generation import samplers as samplers
from keras_attn.generation.beam_search import beam_search
from keras_attn.generation.causal_lm import generate_lm
from keras_attn.generation.greedy_search import greedy_search
from keras_attn.generation.logits_processors import (
    BannedSequences,
    BannedTokens,
    DecodingContext,
    LogitsProcessor,
    MinNewTokens,
    MinP,
    NoRepeatNGram,
    RepetitionPenalty,
)
from keras_attn.generation.sample import sample
from keras_attn.generation.samplers import (
    BeamSampler,
    GreedySampler,
    RandomSampler,
    Sampler,
    TopKSampler,
    TopPSampler,
    filter_logits,
    length_penalty,
)
from keras_attn.generation.seq2seq import generate_seq2seq
from keras_attn.generation.sequence_generator import SequenceGenerator

__all__ = [
    "BannedSequences",
    "BannedTokens",
    "BeamSampler",
    "DecodingContext",
    "GreedySampler",
    "LogitsProcessor",
    "MinNewTokens",
    "MinP",
    "NoRepeatNGram",
    "RandomSampler",
    "RepetitionPenalty",
    "Sampler",
    "SequenceGenerator",
    "TopKSampler",
    "TopPSampler",
    "beam_search",
    "filter_logits",
    "generate_lm",
    "generate_seq2seq",
    "greedy_search",
    "length_penalty",
    "sample",
]
