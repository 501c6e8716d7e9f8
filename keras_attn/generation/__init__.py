"""Decoding for `keras_attn.models.Transformer`: greedy, beam search, sampling.

Every strategy uses the model's key/value cache and a `keras.ops.while_loop`
that stops when all sentences have ended; `SequenceGenerator` runs them
compiled (XLA on JAX, `tf.function` on TensorFlow).
"""

from keras_attn.generation.beam_search import beam_search, length_penalty
from keras_attn.generation.causal_lm import generate_lm
from keras_attn.generation.greedy_search import greedy_search
from keras_attn.generation.sampling import filter_logits, sample
from keras_attn.generation.sequence_generator import SequenceGenerator

__all__ = [
    "SequenceGenerator",
    "beam_search",
    "filter_logits",
    "generate_lm",
    "greedy_search",
    "length_penalty",
    "sample",
]
