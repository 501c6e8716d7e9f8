"""The decoding cache's memory layout (issue #37).

`initial_cache` returns `(batch, max_length, kv_heads, head_dim)` slots, as
documented, stored heads-first: the fused kernel reads heads-first, and on
torch (the one backend with strides) Keras's kernel then reads the cache
in place instead of copying it every step. The layout must survive the
cache writes of decoding, or the copies come back.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.models import TransformerLM

BATCH, MAX_LENGTH, HEADS, KV_HEADS, HIDDEN = 2, 7, 4, 2, 16


def small_lm():
    return TransformerLM(
        vocabulary_size=30,
        num_layers=2,
        hidden_dim=HIDDEN,
        num_heads=HEADS,
        intermediate_dim=32,
        max_sequence_length=MAX_LENGTH,
        attention={"num_key_value_heads": KV_HEADS},
    )


def test_initial_cache_is_zeros_of_the_documented_shape():
    lm = small_lm()
    for keys, values in lm.initial_cache(BATCH, MAX_LENGTH)["self_attention"]:
        for slots in (keys, values):
            assert tuple(slots.shape) == (BATCH, MAX_LENGTH, KV_HEADS, HIDDEN // HEADS)
            np.testing.assert_array_equal(ops.convert_to_numpy(slots), 0.0)


@pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="only torch tensors have strides"
)
def test_the_cache_stays_heads_first_through_decoding():
    lm = small_lm()
    tokens = np.array([[3, 4, 5], [6, 7, 8]], "int32")
    lm(tokens)  # builds
    cache = lm.initial_cache(BATCH, MAX_LENGTH)
    _, cache = lm.decode_step(tokens, cache, 0)  # the prompt, in one pass
    _, cache = lm.decode_step(tokens[:, :1], cache, ops.convert_to_tensor(3))
    head_dim = HIDDEN // HEADS
    for keys, values in cache["self_attention"]:
        for slots in (keys, values):
            # (batch, max_length, heads, head_dim) over heads-first memory
            assert slots.stride() == (
                KV_HEADS * MAX_LENGTH * head_dim,
                head_dim,
                MAX_LENGTH * head_dim,
                1,
            )
