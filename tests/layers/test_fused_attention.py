"""The fused attention path: the kernel chosen up front, and no logged errors.

The choice is checked as a table (it is pure logic over backend, device,
dtype and shapes, so the GPU rows run on a CPU too); the numbers are
checked against the explicit path with padding, causal and both masks; and
a call with every mask, eager, symbolic and under a gradient, must log no
error (Keras logs a traceback whenever a kernel it tried fails).
"""

import logging

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import gradient

from keras_attn.layers import MultiHeadAttention, scaled_dot_product_attention
from keras_attn.layers.attention.fused_attention import (
    choose_attention_kernel,
    device_platform,
    fused_dot_product_attention,
    fused_path_runs,
)

BF16 = "bfloat16"


@pytest.mark.parametrize(
    "query_shape, key_shape, dtype, has_mask, backend, platform, expected",
    [
        # cuDNN takes half precision with aligned head sizes, masked or not.
        ((2, 64, 8, 64), (2, 64, 8, 64), BF16, False, "jax", "gpu", "cudnn"),
        ((2, 64, 8, 64), (2, 32, 8, 64), BF16, True, "jax", "gpu", "cudnn"),
        ((2, 64, 8, 64), (2, 64, 8, 64), "float16", False, "jax", "gpu", "cudnn"),
        # A float16 mask bias (-45,000) is overcome by large scores: XLA.
        ((2, 64, 8, 64), (2, 64, 8, 64), "float16", True, "jax", "gpu", "xla"),
        # float32: no flash kernel at all.
        ((2, 64, 8, 64), (2, 64, 8, 64), "float32", False, "jax", "gpu", "xla"),
        # Head sizes cuDNN does not take.
        ((2, 64, 8, 12), (2, 64, 8, 12), BF16, False, "jax", "gpu", "xla"),
        ((2, 64, 8, 256), (2, 64, 8, 256), BF16, False, "jax", "gpu", "xla"),
        # A mask is a bias to cuDNN, which needs even lengths for one.
        ((2, 63, 8, 64), (2, 64, 8, 64), BF16, True, "jax", "gpu", "xla"),
        ((2, 64, 8, 64), (2, 1, 8, 64), BF16, True, "jax", "gpu", "xla"),
        ((2, 63, 8, 64), (2, 63, 8, 64), BF16, False, "jax", "gpu", "cudnn"),
        # Lengths unknown when traced.
        ((2, None, 8, 64), (2, None, 8, 64), BF16, False, "jax", "gpu", "xla"),
        # Other devices and backends.
        ((2, 64, 8, 64), (2, 64, 8, 64), BF16, False, "jax", "cpu", "xla"),
        ((2, 64, 8, 64), (2, 64, 8, 64), BF16, False, "jax", "tpu", "splash"),
        ((2, 64, 8, 64), (2, 64, 8, 64), BF16, True, "jax", "tpu", "xla"),
        ((2, 64, 8, 64), (2, 64, 8, 64), BF16, False, "tensorflow", "gpu", "xla"),
    ],
)
def test_kernel_choice(
    query_shape, key_shape, dtype, has_mask, backend, platform, expected
):
    kernel = choose_attention_kernel(
        query_shape, key_shape, dtype, has_mask, backend=backend, platform=platform
    )
    assert kernel == expected


def _masks(batch, query_length, key_length):
    """`{kind: (batch, query_length, key_length)}` boolean masks in NumPy."""
    causal = np.tril(np.ones((query_length, key_length), bool))[None]
    key_padding = np.arange(key_length)[None, None, :] < np.array([3, 2])[:, None, None]
    # The second sequence's last query is padding: a fully masked row.
    query_padding = (
        np.arange(query_length)[None, :, None] < np.array([4, 3])[:, None, None]
    )
    return {
        "padding": np.broadcast_to(key_padding, (batch, query_length, key_length)),
        "causal": np.broadcast_to(causal, (batch, query_length, key_length)),
        "padding_and_causal": key_padding & query_padding & causal,
    }


@pytest.mark.parametrize("kind", ["padding", "causal", "padding_and_causal"])
def test_fused_path_equals_explicit_path(kind):
    rng = np.random.default_rng(0)
    query, key, value = (
        rng.normal(size=(2, 4, 2, 8)).astype("float32") for _ in range(3)
    )
    mask = ops.convert_to_tensor(_masks(2, 4, 4)[kind])
    fused, explicit = (
        ops.convert_to_numpy(
            scaled_dot_product_attention(
                query, key, value, mask=mask, flash_attention=flash_attention
            )
        )
        for flash_attention in (None, False)
    )
    np.testing.assert_allclose(fused, explicit, rtol=1e-6, atol=1e-6)


def test_mask_reaches_the_kernel_in_the_full_layout(monkeypatch):
    calls = []
    original = ops.dot_product_attention

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", recording)
    query = key = value = np.ones((2, 4, 2, 8), "float32")
    # (1, 1, T, S): broadcast over the batch and the heads
    causal = np.tril(np.ones((4, 4), bool))[None, None]
    fused_dot_product_attention(query, key, value, mask=ops.convert_to_tensor(causal))
    (kwargs,) = calls
    assert tuple(kwargs["mask"].shape) == (2, 1, 4, 4)
    if device_platform() in ("cpu", "unknown"):
        # Chosen up front: XLA, never a try of cuDNN that fails.
        assert kwargs["flash_attention"] is False


def _error_records(caplog):
    return [
        record
        for record in caplog.records
        if record.levelno >= logging.WARNING or record.exc_info
    ]


def _attend_with_every_mask(dtype):
    """Fused MHA with padding and causal masks: eager, symbolic, gradient."""
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype=dtype)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 16)).astype("float32")
    padding = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    call = dict(query_mask=padding, value_mask=padding, use_causal_mask=True)
    layer(x, x, **call)
    inputs = keras.Input((None, 16))
    masks = keras.Input((None,), dtype="bool")
    model = keras.Model(
        [inputs, masks],
        layer(inputs, inputs, query_mask=masks, value_mask=masks, use_causal_mask=True),
    )
    model.predict([x, padding], verbose=0)
    grad = gradient(lambda t: layer(t, t, **call), x)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_attention_logs_no_error(caplog, capfd, dtype):
    caplog.set_level(logging.DEBUG)
    _attend_with_every_mask(dtype)
    assert not _error_records(caplog), [r.getMessage() for r in caplog.records]
    captured = capfd.readouterr()
    assert "Failed to apply" not in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's JAX path")
def test_the_log_check_can_fail(caplog, monkeypatch):
    import jax

    def failing(*args, **kwargs):
        raise ValueError("a kernel that rejects the call")

    # Keras logs the failed kernel with its traceback and falls back.
    monkeypatch.setattr(jax.nn, "dot_product_attention", failing)
    caplog.set_level(logging.DEBUG)
    query = np.ones((1, 2, 1, 8), "float32")
    ops.dot_product_attention(query, query, query)
    assert _error_records(caplog)


@pytest.mark.parametrize(
    "dtype, backend, platform, expected",
    [
        ("float32", "tensorflow", "gpu", True),
        ("bfloat16", "tensorflow", "gpu", True),
        # TensorFlow's kernel computes a float16 Q K^T, which overflows.
        ("float16", "tensorflow", "gpu", False),
        ("float16", "torch", "unknown", True),
        ("float16", "jax", "gpu", True),
        ("float16", "jax", "cpu", False),
    ],
)
def test_fused_path_runs(dtype, backend, platform, expected):
    assert fused_path_runs(dtype, backend=backend, platform=platform) is expected
