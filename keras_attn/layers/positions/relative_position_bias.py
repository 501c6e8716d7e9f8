"""T5's relative position bias (Raffel et al., 2020, section 2.1).

No position embedding: each head adds a learned scalar to its attention
scores, one per bucket of the distance between query and key. Distances
below `num_buckets / 2` (per direction) have a bucket each, longer ones
share logarithmically wider buckets up to `max_distance`, and all longer
distances share the last bucket.
"""

import functools
import math

import keras
import numpy as np
from keras import ops

from keras_attn.layers.attention.masking import relative_positions
from keras_attn.validation import check_bool, check_positive_int, is_integer


@functools.lru_cache(maxsize=32)
def _distance_buckets(num_buckets, max_distance):
    """The bucket of each distance `0..max_distance`, in one direction.

    T5's float32 formula (`mesh_tensorflow`'s `_relative_position_bucket`)
    evaluated once in NumPy: a table read at run time gives the same
    integer buckets on every backend, where `int(log(...))` on each
    backend's float32 logarithm may land one bucket apart on the exact
    bucket edges (distances 16, 32, 64 with the defaults).
    """
    max_exact = num_buckets // 2
    distance = np.arange(max_distance + 1)
    # The log is only read where `distance >= max_exact`; the maximum keeps
    # log(0) out of the others.
    ratio = np.maximum(distance, max_exact).astype(np.float32) / np.float32(max_exact)
    scaled = (
        np.log(ratio)
        / np.float32(math.log(max_distance / max_exact))
        * np.float32(num_buckets - max_exact)
    )
    large = np.minimum(max_exact + scaled.astype(np.int32), num_buckets - 1)
    return tuple(np.where(distance < max_exact, distance, large).tolist())


def check_bucket_arguments(bidirectional, num_buckets, max_distance):
    """`(bidirectional, num_buckets, max_distance)` checked for T5's buckets.

    Shared by `RelativePositionBias` and the `"relative"` position scheme,
    which refuses bad sizes when a model is configured, before any layer.
    """
    bidirectional = check_bool(bidirectional, "bidirectional")
    num_buckets = check_positive_int(num_buckets, "num_buckets")
    max_distance = check_positive_int(max_distance, "max_distance")
    # Exact buckets per direction: at least one, and fewer than max_distance.
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_exact < 1:
        raise ValueError(
            f"`num_buckets` must be at least {4 if bidirectional else 2} "
            f"(bidirectional={bidirectional}). Received: num_buckets={num_buckets}"
        )
    if max_distance <= max_exact:
        raise ValueError(
            "`max_distance` must exceed the number of exact buckets per "
            f"direction ({max_exact} for num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}). Received: max_distance={max_distance}"
        )
    return bidirectional, num_buckets, max_distance


def relative_position_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    """T5's bucket of each relative position `key_position - query_position`.

    With `bidirectional=True` half of the buckets hold keys before the
    query (and the query itself), half keys after it; otherwise keys after
    the query share bucket 0 with the query (a causal mask hides them).
    Per direction the first `n / 2` buckets hold one distance each and the
    other `n / 2` grow logarithmically up to `max_distance`; farther keys
    share the last bucket.

    Args:
        relative_position: int tensor of any shape, `key_position -
            query_position`.
        bidirectional: bool, whether keys after the query have buckets of
            their own. Defaults to `True`.
        num_buckets: int, the number of buckets, both directions together.
            Defaults to `32`.
        max_distance: int, the distance from which all keys share a bucket.
            Defaults to `128`.

    Returns:
        An int32 tensor of the shape of `relative_position`, values in
        `[0, num_buckets)`.

    Example:

    >>> relative = keras.ops.convert_to_tensor([-200, -20, -1, 0, 1, 20])
    >>> buckets = keras_attn.layers.relative_position_bucket(relative)
    >>> keras.ops.convert_to_numpy(buckets).tolist()
    [15, 10, 1, 0, 17, 26]

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", 2020, section 2.1.
    """
    bidirectional, num_buckets, max_distance = check_bucket_arguments(
        bidirectional, num_buckets, max_distance
    )
    relative_position = ops.cast(relative_position, "int32")
    if bidirectional:
        num_buckets //= 2
        offset = ops.where(relative_position > 0, num_buckets, 0)
        distance = ops.abs(relative_position)
    else:
        offset = 0
        distance = -ops.minimum(relative_position, 0)
    # (max_distance + 1, 1): a 2-D table read along axis 0. Keras's torch
    # `take` of a 1-D table ends in a `squeeze` of the gathered values,
    # which torch's ONNX exporter writes as an ONNX `Squeeze` that refuses
    # more than one element (any shape but 1x1 failed in ONNX Runtime).
    table = ops.convert_to_tensor(
        _distance_buckets(num_buckets, max_distance), dtype="int32"
    )[:, None]
    # (..., 1) -> (...)
    buckets = ops.take(table, ops.minimum(distance, max_distance), axis=0)[..., 0]
    return offset + buckets


@keras.saving.register_keras_serializable(package="keras_attn")
class RelativePositionBias(keras.layers.Layer):
    """T5's learned relative position bias, one scalar per bucket and head.

    Holds `embeddings`, a `(num_buckets, num_heads)` weight (named as in
    keras-hub's T5 attention), and returns the bias to add to the attention
    scores of a query block against a key block. T5 computes it in the
    first layer of each stack and shares it with the others: share one
    instance for that, or give each attention layer its own.

    Args:
        num_heads: int, the number of attention heads.
        num_buckets: int, the number of distance buckets. Defaults to `32`.
        max_distance: int, the distance from which all keys share a bucket.
            Defaults to `128`.
        bidirectional: bool, `True` for an encoder (keys after the query
            have buckets of their own), `False` for a decoder. Defaults to
            `True`.
        embeddings_initializer: initializer of `embeddings`. Defaults to
            `"random_normal"`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments (by keyword; Keras takes only tensors by position):
        query_length: int or scalar int tensor, the number of queries.
        key_length: int or scalar int tensor, the number of keys.
        query_offset: int or scalar int tensor, the position of the first
            query (the cache index in cached decoding). Defaults to `0`.

    Returns:
        A tensor `(1, num_heads, query_length, key_length)` in the layer's
        compute dtype.

    Example:

    >>> bias = keras_attn.layers.RelativePositionBias(num_heads=4)
    >>> tuple(bias(query_length=5, key_length=7).shape)
    (1, 4, 5, 7)
    >>> step = bias(query_length=1, key_length=7, query_offset=4)
    >>> bool(keras.ops.all(step == bias(query_length=5, key_length=7)[:, :, 4:]))
    True

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", 2020, section 2.1.
        Shaw et al., "Self-Attention with Relative Position
        Representations", 2018.
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        embeddings_initializer="random_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.bidirectional, self.num_buckets, self.max_distance = (
            check_bucket_arguments(bidirectional, num_buckets, max_distance)
        )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        # The weight's shape is known now: build here, so that the layer
        # (called with lengths, not tensors) is ready to load weights.
        self.build()

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, query_length, key_length, query_offset=0):
        for name, value in (
            ("query_length", query_length),
            ("key_length", key_length),
        ):
            if is_integer(value):
                check_positive_int(value, name)
        # (query_length, key_length)
        relative = relative_positions(query_length, key_length, query_offset)
        buckets = relative_position_bucket(
            relative, self.bidirectional, self.num_buckets, self.max_distance
        )
        values = ops.take(self.embeddings, buckets, axis=0)  # (query, key, heads)
        values = ops.transpose(values, (2, 0, 1))[None]  # (1, heads, query, key)
        return ops.cast(values, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
