"""A training step carries no more state than the model needs.

Every variable is passed into and out of the compiled step (on JAX, as
arguments and results), so per-step state is host time: a seed generator
exists only where a dropout rate is positive, and the only non-trainable
variables are those seed generators.
"""

import numpy as np
import pytest

import keras_attn

LAYERS = 2


def build(dropout, attention_dropout):
    model = keras_attn.models.Transformer(
        vocabulary_size=50,
        num_layers=LAYERS,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=16,
        dropout=dropout,
        attention={"dropout": attention_dropout},
        max_sequence_length=8,
    )
    tokens = np.ones((1, 4), "int32")
    model({"encoder_tokens": tokens, "decoder_tokens": tokens})
    return model


def seed_generators(model):
    return [v for v in model.non_trainable_variables if "seed_generator" in v.path]


# Residual and embedding dropout: 2 embeddings, 2 sub-layers per encoder
# block, 3 per decoder block. Attention dropout: 1 attention per encoder
# block, 2 per decoder block.
RESIDUAL_SITES = 2 + 2 * LAYERS + 3 * LAYERS
ATTENTION_SITES = LAYERS + 2 * LAYERS


def test_attention_dropout_adds_one_generator_per_attention():
    model = build(dropout=0.1, attention_dropout=0.1)
    assert len(seed_generators(model)) == RESIDUAL_SITES + ATTENTION_SITES
    assert len(model.non_trainable_variables) == len(seed_generators(model))


@pytest.mark.parametrize(
    "dropout, expected", [(0.1, RESIDUAL_SITES), (0.0, 0)], ids=["paper", "none"]
)
def test_no_generator_without_a_dropout_rate(dropout, expected):
    model = build(dropout=dropout, attention_dropout=0.0)
    assert len(seed_generators(model)) == expected
    assert len(model.non_trainable_variables) == expected


def test_counts_survive_a_config_round_trip():
    model = build(dropout=0.1, attention_dropout=0.1)
    clone = keras_attn.models.Transformer.from_config(model.get_config())
    tokens = np.ones((1, 4), "int32")
    clone({"encoder_tokens": tokens, "decoder_tokens": tokens})
    assert len(clone.non_trainable_variables) == len(model.non_trainable_variables)
    assert len(clone.trainable_variables) == len(model.trainable_variables)
