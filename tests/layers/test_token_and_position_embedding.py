"""`TokenAndPositionEmbedding`: sections 3.4 (scaled, tied embeddings) and 3.5."""

import math

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import MultiHeadAttention, TokenAndPositionEmbedding

VOCAB, LENGTH, DIM = 11, 6, 8
IDS = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 0, 0]], "int32")


def sinusoids(length, dim, start=0):
    """The paper's PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos."""
    pos = np.arange(start, start + length)[:, None]
    i = np.arange(dim // 2)[None, :]
    angle = pos / 10000.0 ** (2 * i / dim)
    encoding = np.zeros((length, dim))
    encoding[:, 0::2], encoding[:, 1::2] = np.sin(angle), np.cos(angle)
    return encoding


def init_kwargs(**overrides):
    return dict(vocabulary_size=VOCAB, sequence_length=LENGTH, embedding_dim=DIM) | (
        overrides
    )


@pytest.mark.parametrize("position, weights", [("sinusoidal", 1), ("learned", 2)])
def test_layer_contract(position, weights):
    run_layer_test(
        TokenAndPositionEmbedding,
        init_kwargs(position=position, mask_zero=True),
        IDS,
        expected_output_shape=(2, 5, DIM),
        expected_num_trainable_weights=weights,
    )


def test_layer_contract_reverse():
    hidden = np.random.default_rng(0).normal(size=(2, 5, DIM)).astype("float32")
    run_layer_test(
        TokenAndPositionEmbedding,
        init_kwargs(),
        hidden,
        call_kwargs={"reverse": True},
        expected_output_shape=(2, 5, VOCAB),
        expected_num_trainable_weights=1,
    )


def token_table(layer):
    return ops.convert_to_numpy(layer.token_embedding.embeddings)


@pytest.mark.parametrize("start", [0, 2])
def test_sinusoidal_output_matches_equations(start):
    layer = TokenAndPositionEmbedding(**init_kwargs())
    output = ops.convert_to_numpy(layer(IDS, start_index=start))
    expected = token_table(layer)[IDS] * math.sqrt(DIM) + sinusoids(5, DIM, start)
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_learned_output_without_scaling():
    layer = TokenAndPositionEmbedding(
        **init_kwargs(position="learned", scale_by_sqrt_dim=False)
    )
    output = ops.convert_to_numpy(layer(IDS, start_index=1))
    positions = ops.convert_to_numpy(layer.position_encoding.position_embeddings)
    expected = token_table(layer)[IDS] + positions[1:6]
    np.testing.assert_allclose(output, expected, atol=1e-6)


def test_default_initializer_has_unit_variance_after_scaling():
    layer = TokenAndPositionEmbedding(
        vocabulary_size=1000, sequence_length=4, embedding_dim=64
    )
    layer.build((1, 4))
    scaled = token_table(layer) * math.sqrt(64)
    assert abs(scaled.std() - 1.0) < 0.05


def test_reverse_is_the_transposed_embedding():
    layer = TokenAndPositionEmbedding(**init_kwargs())
    layer(IDS)
    hidden = np.random.default_rng(1).normal(size=(2, 5, DIM)).astype("float32")
    logits = ops.convert_to_numpy(layer(hidden, reverse=True))
    np.testing.assert_allclose(logits, hidden @ token_table(layer).T, atol=1e-5)


def test_mask_zero_reaches_attention():
    tokens = keras.Input((None,), dtype="int32")
    embedding = TokenAndPositionEmbedding(**init_kwargs(mask_zero=True))
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    hidden = embedding(tokens)
    model = keras.Model(tokens, attention(hidden, hidden))
    np.testing.assert_array_equal(
        ops.convert_to_numpy(embedding.compute_mask(IDS)), IDS != 0
    )
    embedded = ops.convert_to_numpy(embedding(IDS))
    explicit = attention(embedded, embedded, query_mask=IDS != 0, value_mask=IDS != 0)
    unmasked = attention(embedded, embedded)
    from_model = ops.convert_to_numpy(model(IDS))
    np.testing.assert_allclose(from_model, ops.convert_to_numpy(explicit), atol=1e-6)
    assert (
        np.abs(from_model[1, :3] - ops.convert_to_numpy(unmasked)[1, :3]).max() > 1e-4
    )


def test_odd_dimension_with_sinusoids_is_rejected():
    with pytest.raises(ValueError, match="embedding_dim=7"):
        TokenAndPositionEmbedding(**init_kwargs(embedding_dim=7))
    # Learned positions have no such constraint.
    layer = TokenAndPositionEmbedding(
        **init_kwargs(embedding_dim=7, position="learned")
    )
    assert tuple(layer(IDS).shape) == (2, 5, 7)


def test_unknown_position_kind():
    with pytest.raises(ValueError, match="position='rope'"):
        TokenAndPositionEmbedding(**init_kwargs(position="rope"))


def test_learned_positions_too_long():
    layer = TokenAndPositionEmbedding(
        **init_kwargs(position="learned", sequence_length=4)
    )
    with pytest.raises(ValueError, match=r"sequence_length=4.*length 5"):
        layer(IDS)


@pytest.mark.parametrize(
    "argument", ["vocabulary_size", "sequence_length", "embedding_dim"]
)
def test_non_positive_sizes(argument):
    with pytest.raises(ValueError, match=f"{argument}=0"):
        TokenAndPositionEmbedding(**init_kwargs(**{argument: 0}))
