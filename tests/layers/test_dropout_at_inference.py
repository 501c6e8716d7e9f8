"""Residual and feed-forward dropout: skipped at inference, applied in training.

The blocks and `FeedForward` do not call their `FastDropout` layers unless
`training` is true (dropout is the identity otherwise, and each layer call
costs host time in an eager torch decoding step); in training, and so in
`fit`, they still drop.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    FastDropout,
    FeedForward,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

BATCH, LENGTH, DIM = 2, 5, 8


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.fixture
def dropout_calls(monkeypatch):
    """Counts the calls of every `FastDropout` layer."""
    calls = []
    original = FastDropout.call

    def counted(self, inputs, training=False):
        calls.append(training)
        return original(self, inputs, training=training)

    monkeypatch.setattr(FastDropout, "call", counted)
    return calls


BLOCK = dict(num_heads=2, intermediate_dim=16, dropout=0.5, attention={"dropout": 0.0})


@pytest.mark.parametrize(
    "layer_class, arguments, call_arguments",
    [
        (FeedForward, dict(intermediate_dim=16, dropout=0.5), {}),
        (TransformerEncoderBlock, BLOCK, {}),
        (
            TransformerDecoderBlock,
            BLOCK,
            {"encoder_sequence": normal(BATCH, 4, DIM, seed=1)},
        ),
    ],
    ids=["feed_forward", "encoder_block", "decoder_block"],
)
def test_not_called_at_inference_and_applied_in_training(
    layer_class, arguments, call_arguments, dropout_calls
):
    layer, kwargs = layer_class(**arguments), call_arguments
    x = normal(BATCH, LENGTH, DIM)
    inference = ops.convert_to_numpy(layer(x, training=False, **kwargs))
    assert ops.convert_to_numpy(layer(x, **kwargs)).tolist() == inference.tolist()
    assert dropout_calls == []
    trained = ops.convert_to_numpy(layer(x, training=True, **kwargs))
    assert dropout_calls and all(dropout_calls)
    # Rate 0.5 on every residual branch: the outputs move.
    assert np.max(np.abs(trained - inference)) > 1e-3


def test_inference_equals_the_same_layer_without_dropout():
    x = normal(BATCH, LENGTH, DIM)
    with_dropout = TransformerEncoderBlock(
        num_heads=2, intermediate_dim=16, dropout=0.5
    )
    without = TransformerEncoderBlock(num_heads=2, intermediate_dim=16, dropout=0.0)
    with_dropout.build(x.shape)
    without.build(x.shape)
    without.set_weights(with_dropout.get_weights())
    np.testing.assert_allclose(
        ops.convert_to_numpy(with_dropout(x, training=False)),
        ops.convert_to_numpy(without(x)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_fit_applies_dropout(dropout_calls):
    inputs = keras.Input((LENGTH, DIM))
    outputs = TransformerEncoderBlock(num_heads=2, intermediate_dim=16, dropout=0.5)(
        inputs
    )
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    dropout_calls.clear()  # (building the functional model calls the layers)
    model.fit(normal(4, LENGTH, DIM), normal(4, LENGTH, DIM), epochs=1, verbose=0)
    assert dropout_calls and all(dropout_calls)
    dropout_calls.clear()
    model.predict(normal(4, LENGTH, DIM), verbose=0)
    assert dropout_calls == []
