"""A cached decoding step compiles as one graph under `torch.compile`.

JAX and TensorFlow trace the whole decoding loop; on torch,
`SequenceGenerator.compile(jit_compile=True)` hands Keras's predict step
to `torch.compile`, whose speed depends on how many graphs a step breaks
into. The step reads the current token and the position embeddings with
a traced index (`ops.take`, not `ops.slice`, whose traced start torch can
only read as a Python number), so one step is one graph:
`fullgraph=True` fails on any graph break.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.generation.causal_lm import _cached_step
from keras_attn.generation.decoding_loop import cached_step
from keras_attn.models import Transformer, TransformerLM

pytestmark = [
    pytest.mark.skipif(
        keras.backend.backend() != "torch", reason="torch.compile is torch's"
    ),
    # Keras's dtype inference is an `lru_cache` that Dynamo traces through.
    pytest.mark.filterwarnings("ignore:Dynamo detected a call to a"),
]

BATCH, PROMPT, MAX_LENGTH, VOCABULARY = 2, 3, 8, 40
SIZES = dict(
    vocabulary_size=VOCABULARY,
    num_layers=1,
    hidden_dim=8,
    num_heads=2,
    intermediate_dim=16,
    max_sequence_length=MAX_LENGTH,
)


def compile_and_compare(step, tokens, index, state):
    import torch

    with torch.no_grad():
        # Dynamo's capture and AOTAutograd's functionalized graph, run
        # without Inductor's C++ code generation (minutes of compiling on
        # a 2-core machine): graph breaks are Dynamo's, not Inductor's.
        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        index = ops.convert_to_tensor(index, "int32")
        compiled_logits, _ = compiled(tokens, index, state)
        eager_logits, _ = step(tokens, index, state)
    np.testing.assert_allclose(
        ops.convert_to_numpy(compiled_logits),
        ops.convert_to_numpy(eager_logits),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("position", ["learned", "rotary"])
def test_causal_lm_step_is_one_graph(position):
    lm = TransformerLM(**SIZES, position=position)
    prompts = np.random.default_rng(0).integers(4, VOCABULARY, (BATCH, PROMPT))
    tokens = ops.convert_to_tensor(
        np.pad(prompts, ((0, 0), (0, MAX_LENGTH - PROMPT))), "int32"
    )
    step, cache = _cached_step(lm, tokens, BATCH, MAX_LENGTH)
    compile_and_compare(step, tokens, PROMPT, cache)


def test_translation_step_is_one_graph():
    model = Transformer(**SIZES)
    source = ops.convert_to_tensor(
        np.random.default_rng(0).integers(4, VOCABULARY, (BATCH, 5)), "int32"
    )
    encoder_output, padding_mask = model.encode(source)
    cache = model.initial_cache(encoder_output, padding_mask, MAX_LENGTH)
    tokens = ops.convert_to_tensor(np.full((BATCH, MAX_LENGTH), 2), "int32")
    compile_and_compare(cached_step(model), tokens, 0, cache)
