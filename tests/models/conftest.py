"""Fixtures of the model tests."""

import functools

import pytest

from keras_attn.layers import TransformerDecoderBlock, TransformerEncoderBlock


@pytest.fixture
def received_biases(monkeypatch):
    """`(block name, bias)` of every block call, eager and cached."""
    received = []

    def record(method, keyword):
        @functools.wraps(method)
        def recording(self, *args, **kwargs):
            received.append((self.name, kwargs.get(keyword)))
            return method(self, *args, **kwargs)

        return recording

    for block_class, method, keyword in [
        (TransformerEncoderBlock, "call", "attention_bias"),
        (TransformerDecoderBlock, "call", "self_attention_bias"),
        (TransformerDecoderBlock, "call_cached", "self_attention_bias"),
    ]:
        original = getattr(block_class, method)
        monkeypatch.setattr(block_class, method, record(original, keyword))
    return received
