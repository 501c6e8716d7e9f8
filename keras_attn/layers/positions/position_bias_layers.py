"""The layers that put a position scheme's attention bias into a model.

A model that biases its attention scores holds one bias layer per stack of
blocks and calls it once per pass (or cached step), handing the bias to
every block of the stack. `PositionScheme.attention_bias_layer` builds it
(see `keras_attn.layers.positions.position_schemes`): `PositionBias` gives
a scheme's weightless `attention_bias` (ALiBi); its subclass
`RelativeBias` holds the weights of T5's learned bias, a
`keras_attn.layers.RelativePositionBias` (the layer of T5's bias, called
with lengths). Both are called as `layer(query_sequence,
key_sequence=None, query_offset=0)`; only the sequences' lengths are used.
"""

import keras
from keras import ops

from keras_attn.layers.positions.relative_position_bias import RelativePositionBias


class PositionBias(keras.layers.Layer):
    """The attention bias of one stack of a model's blocks, as a layer.

    Built by `PositionScheme.attention_bias_layer`, held by the model that
    names the scheme in its config (this layer has no config of its own).
    This class gives a scheme's weightless `attention_bias` (ALiBi); a
    scheme whose bias has weights gives a subclass that holds them
    (`RelativeBias`) and overrides `attention_bias`.

    Args:
        scheme: the `PositionScheme` whose `attention_bias` this gives.
        bidirectional: bool, see `PositionScheme.attention_bias`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        query_sequence: tensor `(batch, query_length, ...)`; only its
            length is used.
        key_sequence: tensor `(batch, key_length, ...)`. Defaults to
            `None`, meaning `query_sequence` (self-attention).
        query_offset: int or scalar int tensor, the position of the first
            query. Defaults to `0`.

    Returns:
        The bias, broadcastable to `(batch, heads, query_length,
        key_length)`.
    """

    def __init__(self, scheme, bidirectional, **kwargs):
        super().__init__(**kwargs)
        self.scheme = scheme
        self.bidirectional = bidirectional

    def call(self, query_sequence, key_sequence=None, query_offset=0):
        if key_sequence is None:
            key_sequence = query_sequence
        return self.attention_bias(
            ops.shape(query_sequence)[1], ops.shape(key_sequence)[1], query_offset
        )

    def attention_bias(self, query_length, key_length, query_offset):
        """The bias of `query_length` queries from position `query_offset`
        against `key_length` keys from position 0."""
        return self.scheme.attention_bias(
            query_length,
            key_length,
            query_offset=query_offset,
            bidirectional=self.bidirectional,
        )


# `RelativePositionBias`'s arguments, the config of a `RelativeBias`.
_RELATIVE_BIAS_ARGUMENTS = (
    "num_heads",
    "num_buckets",
    "max_distance",
    "bidirectional",
    "embeddings_initializer",
)


@keras.saving.register_keras_serializable(package="keras_attn")
class RelativeBias(PositionBias):
    """T5's relative position bias, as a model's bias layer of one stack.

    Built by `RelativePositions.attention_bias_layer`: a `PositionBias`
    whose bias is that of its `keras_attn.layers.RelativePositionBias`
    (the weight, `embeddings` `(num_buckets, num_heads)`, saved under this
    layer's `relative_position_bias`). A model calls it once per stack and
    hands the bias to every block, as T5 computes it in the first layer
    and shares it.

    Its arguments, and its config, are those of `RelativePositionBias`
    with the same defaults (`num_heads`, `num_buckets=32`,
    `max_distance=128`, `bidirectional=True`,
    `embeddings_initializer="random_normal"`), checked and held by it;
    `**kwargs` are the base `keras.layers.Layer` arguments.

    Call arguments: as a `PositionBias`.

    Returns:
        A tensor `(1, num_heads, query_length, key_length)`.
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
        # No scheme: the bias is this layer's weights'.
        super().__init__(scheme=None, bidirectional=bidirectional, **kwargs)
        # `RelativePositionBias` makes its weight when constructed: made in
        # this layer's name scope, so that the weight's path names its
        # stack (`encoder_position_bias/relative_position_bias/embeddings`).
        with keras.name_scope(self.name):
            self.relative_position_bias = RelativePositionBias(
                num_heads,
                num_buckets=num_buckets,
                max_distance=max_distance,
                bidirectional=bidirectional,
                embeddings_initializer=embeddings_initializer,
                dtype=self.dtype_policy,
                name="relative_position_bias",
            )
        self.bidirectional = self.relative_position_bias.bidirectional  # checked

    @property
    def num_heads(self):
        return self.relative_position_bias.num_heads

    @property
    def num_buckets(self):
        return self.relative_position_bias.num_buckets

    @property
    def max_distance(self):
        return self.relative_position_bias.max_distance

    def build(self, query_sequence_shape, key_sequence_shape=None):
        # The bias layer holds the weight since it was made.
        self.built = True

    def attention_bias(self, query_length, key_length, query_offset):
        # (1, num_heads, query_length, key_length)
        return self.relative_position_bias(
            query_length=query_length,
            key_length=key_length,
            query_offset=query_offset,
        )

    def get_config(self):
        config = super().get_config()
        bias_config = self.relative_position_bias.get_config()
        config.update({name: bias_config[name] for name in _RELATIVE_BIAS_ARGUMENTS})
        return config
