"""`RelativePositionBias` / `relative_position_bucket` against T5's code."""

import math
import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops
from keras_hub.src.models.t5.t5_multi_head_attention import T5MultiHeadAttention

from keras_attn.layers import RelativePositionBias, relative_position_bucket


def numpy_t5_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    """T5's `_relative_position_bucket` (Hugging Face's PyTorch port of
    Mesh TensorFlow's), line by line in NumPy, float32 as the original.
    """
    relative_position = np.asarray(relative_position, "int64")
    relative_buckets = np.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).astype("int64") * num_buckets
        relative_position = np.abs(relative_position)
    else:
        relative_position = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0), masked below
        relative_position_if_large = max_exact + (
            np.log(relative_position.astype("float32") / max_exact)
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(num_buckets - max_exact)
        ).astype("int64")
    relative_position_if_large = np.minimum(relative_position_if_large, num_buckets - 1)
    return relative_buckets + np.where(
        is_small, relative_position, relative_position_if_large
    )


def numpy_bias(embeddings, query_length, key_length, query_offset, **bucket_args):
    """`embeddings[bucket(key - query)]` as `(1, heads, query, key)`."""
    query = np.arange(query_length)[:, None] + query_offset
    key = np.arange(key_length)[None, :]
    buckets = numpy_t5_bucket(key - query, **bucket_args)
    return np.transpose(embeddings[buckets], (2, 0, 1))[None]


def to_numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


BUCKET_ARGS = [
    {"bidirectional": True, "num_buckets": 32, "max_distance": 128},
    {"bidirectional": False, "num_buckets": 32, "max_distance": 128},
    {"bidirectional": True, "num_buckets": 8, "max_distance": 20},
    {"bidirectional": False, "num_buckets": 10, "max_distance": 50},
    {"bidirectional": True, "num_buckets": 64, "max_distance": 256},
]
RELATIVE_POSITIONS = np.arange(-400, 400).reshape(2, -1)  # (2, 400)


@pytest.mark.parametrize("bucket_args", BUCKET_ARGS, ids=str)
def test_buckets_equal_t5_reference(bucket_args):
    actual = relative_position_bucket(
        ops.convert_to_tensor(RELATIVE_POSITIONS), **bucket_args
    )
    expected = numpy_t5_bucket(RELATIVE_POSITIONS, **bucket_args)
    np.testing.assert_array_equal(ops.convert_to_numpy(actual), expected)
    assert 0 <= expected.min() and expected.max() < bucket_args["num_buckets"]


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_keras_hub_t5(bidirectional):
    relative = ops.convert_to_tensor(RELATIVE_POSITIONS, "int32")
    peer = T5MultiHeadAttention._relative_position_bucket(relative, bidirectional)
    ours = relative_position_bucket(relative, bidirectional)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(ours), ops.convert_to_numpy(peer)
    )


@pytest.mark.parametrize(
    "bucket_args, query_length, key_length, query_offset",
    [
        (BUCKET_ARGS[0], 5, 9, 0),
        (BUCKET_ARGS[1], 1, 40, 39),
        (BUCKET_ARGS[2], 3, 30, 20),
    ],
)
def test_bias_equals_the_numpy_reference(
    bucket_args, query_length, key_length, query_offset
):
    layer = RelativePositionBias(num_heads=3, **bucket_args)
    embeddings = np.random.default_rng(0).normal(size=layer.embeddings.shape)
    layer.embeddings.assign(embeddings.astype("float32"))
    actual = layer(
        query_length=query_length,
        key_length=key_length,
        query_offset=ops.convert_to_tensor(query_offset),
    )
    expected = numpy_bias(
        embeddings, query_length, key_length, query_offset, **bucket_args
    )
    np.testing.assert_allclose(to_numpy(actual), expected, rtol=1e-6)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_bias_equals_keras_hub_t5_with_the_same_weights(is_decoder):
    peer = T5MultiHeadAttention(
        is_decoder=is_decoder,
        hidden_dim=8,
        key_value_dim=2,
        num_heads=4,
        dropout=0.0,
        use_relative_attention_bias=True,
    )
    ours = RelativePositionBias(num_heads=4, bidirectional=not is_decoder)
    ours.set_weights([peer.relative_attention_bias.numpy()])
    np.testing.assert_array_equal(
        to_numpy(ours(query_length=6, key_length=150)),
        to_numpy(peer.compute_bias(6, 150)),
    )
    np.testing.assert_array_equal(
        to_numpy(ours(query_length=1, key_length=150, query_offset=140)),
        to_numpy(peer.compute_bias(1, 150, query_start_index=140)),
    )


def test_cached_rows_equal_the_full_bias():
    layer = RelativePositionBias(num_heads=2, bidirectional=False)
    full = to_numpy(layer(query_length=6, key_length=6))
    for index in range(6):
        step = to_numpy(layer(query_length=1, key_length=6, query_offset=index))
        np.testing.assert_array_equal(step, full[:, :, index : index + 1])


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class _ScoresWithRelativeBias(keras.layers.Layer):
    """Adds a `RelativePositionBias` to `(batch, heads, query, key)` scores."""

    def __init__(self, bias=None, **kwargs):
        super().__init__(**kwargs)
        self.bias = bias or RelativePositionBias(num_heads=2, num_buckets=8)

    def call(self, scores):
        shape = ops.shape(scores)
        return scores + self.bias(query_length=shape[2], key_length=shape[3])

    def get_config(self):
        config = super().get_config()
        config["bias"] = keras.saving.serialize_keras_object(self.bias)
        return config

    @classmethod
    def from_config(cls, config):
        config["bias"] = keras.saving.deserialize_keras_object(config["bias"])
        return cls(**config)


def test_config_and_keras_file_round_trip():
    layer = RelativePositionBias(
        num_heads=2, num_buckets=8, max_distance=16, bidirectional=False
    )
    config = layer.get_config()
    revived = RelativePositionBias.from_config(config)
    assert revived.get_config() == config
    assert [w.path for w in layer.weights] == [w.path for w in revived.weights]

    scores = np.random.default_rng(0).normal(size=(2, 2, 3, 5)).astype("float32")
    inputs = keras.Input((2, 3, 5))
    model = keras.Model(inputs, _ScoresWithRelativeBias()(inputs))
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(loaded(scores)), to_numpy(model(scores)))


def test_mixed_precision_keeps_float32_weights():
    layer = RelativePositionBias(num_heads=2, dtype="mixed_bfloat16")
    bias = layer(query_length=2, key_length=3)
    assert keras.backend.standardize_dtype(bias.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(layer.embeddings.dtype) == "float32"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RelativePositionBias(num_heads=0), "num_heads=0"),
        (lambda: RelativePositionBias(2, num_buckets=2), "num_buckets=2"),
        (
            lambda: RelativePositionBias(2, num_buckets=1, bidirectional=False),
            "num_buckets=1",
        ),
        (
            lambda: RelativePositionBias(2, num_buckets=32, max_distance=8),
            "max_distance=8",
        ),
        (lambda: RelativePositionBias(2, bidirectional="yes"), "bidirectional='yes'"),
        (
            lambda: RelativePositionBias(2)(query_length=0, key_length=3),
            "query_length=0",
        ),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert message in str(error.value)
