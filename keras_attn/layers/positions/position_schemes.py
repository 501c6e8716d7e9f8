"""Position schemes: what a model asks of the way it encodes positions.

Attention itself is blind to order; a position scheme puts order back in.
Schemes differ in where they act: the paper's sinusoids and learned
vectors are added to the token embeddings (section 3.5), a relative bias
(T5, ALiBi) is added to the attention scores, rotary embeddings rotate the
queries and keys. A model does not compare names: it asks its scheme.

| a model asks | the scheme answers |
|---|---|
| add vectors to the embeddings? | `adds_to_embeddings`, and `position_layer()` builds the layer that gives them |
| bias the attention scores? | `biases_attention_scores`, and `attention_bias(query_length, key_length, query_offset=0)`: a float bias broadcastable to `(batch, heads, query, key)` (`None` without one); `attention_bias_layer()` computes it in a model |
| rotate queries and keys? what do the blocks need? | `block_arguments()`: the rotation (`rotary_*` fields of `keras_attn.layers.AttentionSettings`) for a rotary scheme, `{}` for the others |
| how long may a sequence be? | `max_length` (`None`: no limit) |
| what at a cache index `i`? | the embedding at `start_index=i`, and the bias of the new positions against the cache, `attention_bias(new_length, cache_length, query_offset=i)` |

One position, three argument names, each for its role: `start_index`
(keras-hub's name, in its `PositionEmbedding` and `RotaryEmbedding`) is the
position of the first token a layer encodes; `query_offset` is where the
queries start against keys that start at 0, in every function of a query
and a key length (these biases, `keras_attn.layers.causal_mask`,
`RelativePositionBias`); `cache_index` (keras-hub's
`cache_update_index`) is where a decoding step writes into a cache. In
cached decoding all three are the same number.

`SinusoidalPositions` (`position="sinusoidal"`) and `LearnedPositions`
(`position="learned"`) are the first two, `AlibiPositions`
(`position="alibi"`) the first that biases the scores and
`RelativePositions` (`position="relative"`, T5) the first whose bias has
weights (its own `attention_bias_layer`, `RelativeBias`), and
`RotaryPositions` (`position="rotary"`, RoPE) the first that rotates the
queries and keys. A model builds its scheme once, with `get` (from its
`position` argument, its heads (and their size, where the model's
attention sets `head_dim`) and its longest sequence), and hands the
object down: to its `keras_attn.layers.TokenAndPositionEmbedding`, its
bias layers and its blocks. A new scheme is one class here, registered
with `@register`. The models pass a scheme's bias to every block
(`attention_bias=` of an encoder block, `self_attention_bias=` of a
decoder block), give every block the scheme's `block_arguments()` (in its
attention settings), and pass nothing at all for the schemes that add to
the embeddings, at no cost. The bias layers a model holds, `PositionBias`
and its subclass `RelativeBias`, are in
`keras_attn.layers.positions.position_bias_layers`.
"""

import dataclasses
import typing

import keras

from keras_attn.layers.positions.alibi_bias import alibi_bias
from keras_attn.layers.positions.position_bias_layers import PositionBias, RelativeBias
from keras_attn.layers.positions.position_embedding import PositionEmbedding
from keras_attn.layers.positions.relative_position_bias import check_bucket_arguments
from keras_attn.layers.positions.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)
from keras_attn.validation import (
    check_choice,
    check_max_wavelength,
    check_positive_float,
    check_positive_int,
    check_scaling_factor,
)

_SCHEMES = {}


def register(scheme_class):
    """Class decorator: makes a scheme available to `get` by its `name`.

    Args:
        scheme_class: a subclass of `PositionScheme` with a class attribute
            `name`, the string a model's `position` argument gives.

    Returns:
        `scheme_class`, unchanged.
    """
    _SCHEMES[scheme_class.name] = scheme_class
    return scheme_class


def names():
    """The names of the registered schemes, as a tuple of strings."""
    return tuple(_SCHEMES)


# Fields a model sets from its own arguments, not from a `position` dict:
# `PositionScheme.for_model` fills them in a scheme that has them.
_MODEL_FIELDS = ("num_heads", "sequence_length", "head_dim")


def _scheme_class(scheme_name, name):
    """The registered class of `scheme_name`; `name` is the argument's."""
    return _SCHEMES[check_choice(scheme_name, name, names())]


def _field_names(scheme_class):
    return {field.name for field in dataclasses.fields(scheme_class)}


def _check_fields(position, allowed, name):
    """Refuses the keys of the dict `position` that are not `allowed` fields."""
    unknown = sorted(set(position) - set(allowed) - {"name"})
    if unknown:
        raise ValueError(
            f"`{name}` of the {position['name']!r} scheme takes the fields "
            f"{sorted(allowed)}. Received: {name}={position!r}"
        )


def check_position(position, name="position"):
    """A model's `position`: a scheme's name, or a dict of it and its fields.

    The dict form sets a scheme's own fields, e.g. `{"name": "rotary",
    "max_wavelength": 500000.0, "scaling_factor": 2.0}` (Llama 3's
    `rope_theta`); `get` builds it. The fields the model sets itself
    (`num_heads`, `sequence_length`, `head_dim`) are not accepted.

    Returns:
        The name, or a copy of the dict.

    Raises:
        ValueError: an unknown name or field.
    """
    if not isinstance(position, dict):
        return check_choice(position, name, names())
    scheme_class = _scheme_class(position.get("name"), f"{name}['name']")
    _check_fields(position, _field_names(scheme_class) - set(_MODEL_FIELDS), name)
    return dict(position)


def get(identifier, sequence_length=None, num_heads=None, head_dim=None):
    """The position scheme that `identifier` names, for a model of this shape.

    A scheme that needs the model's shape has a field named `sequence_length`
    (learned positions) or `num_heads` (ALiBi, T5's bias, rotary):
    `PositionScheme.for_model` fills it from the argument of that name,
    unless `identifier` sets it.

    Args:
        identifier: a scheme's name (`"sinusoidal"`, `"learned"`,
            `"alibi"`, `"relative"`, `"rotary"`), a dict of a name and any
            of the scheme's fields (as `PositionScheme.get_config` gives),
            or a `PositionScheme`, returned as it is.
        sequence_length: int, the model's longest sequence (the number of
            learned positions). Defaults to `None`.
        num_heads: int, the model's attention heads (for schemes with a
            bias per head, and rotary's check of the head size). Defaults
            to `None`.
        head_dim: int, the features of each head where the model's
            attention sets them (`AttentionSettings.head_dim`), for a
            scheme that acts on heads (rotary's check of the head size).
            Defaults to `None`, meaning `hidden_dim / num_heads`.

    Returns:
        A `PositionScheme`.

    Raises:
        ValueError: `identifier` names no registered scheme (the error lists
            the known names) or a field the scheme does not have.
        TypeError: the scheme needs a size that is missing (the error names
            it: `Received: num_heads=None`).

    Example:

    >>> scheme = keras_attn.layers.positions.position_schemes.get(
    ...     "learned", sequence_length=512)
    >>> scheme.adds_to_embeddings, scheme.max_length
    (True, 512)
    >>> print(scheme.attention_bias(4, 4))
    None
    """
    if isinstance(identifier, PositionScheme):
        return identifier
    if isinstance(identifier, dict):
        fields = dict(identifier)
        scheme_class = _scheme_class(fields.pop("name", None), "position['name']")
        _check_fields(identifier, _field_names(scheme_class), "position")
    else:
        fields = {}
        scheme_class = _scheme_class(identifier, "position")
    sizes = {"sequence_length": sequence_length, "num_heads": num_heads}
    if head_dim is not None:
        # Only when set: a scheme's own `for_model` may not take it.
        sizes["head_dim"] = head_dim
    # Sizes the identifier sets (a scheme's config) win over the model's.
    sizes.update({name: fields.pop(name) for name in _MODEL_FIELDS if name in fields})
    try:
        scheme = scheme_class.for_model(**sizes)
    except TypeError as error:
        missing = [
            name
            for name in _MODEL_FIELDS
            if name in _field_names(scheme_class) and sizes.get(name) is None
        ]
        if not missing:
            raise
        # Named as the caller wrote it: a model passes its sizes itself.
        raise TypeError(
            f"The position scheme {scheme_class.name!r} is sized by the "
            f"model's `{missing[0]}`: give it in the dict, e.g. "
            f"{{'name': {scheme_class.name!r}, {missing[0]!r}: 8}}, or pass "
            f"a scheme object. Received: position={identifier!r}, "
            f"{missing[0]}=None"
        ) from error
    return dataclasses.replace(scheme, **fields) if fields else scheme


@dataclasses.dataclass(frozen=True)
class PositionScheme:
    """The interface of a position scheme; on its own, no positions at all.

    A subclass overrides what its scheme does and leaves the rest: it adds
    nothing to the embeddings, biases no score, rotates nothing and has no
    length limit.

    Class attributes:
        name: str, the name `get` and a model's `position` argument use.
        adds_to_embeddings: bool, whether `position_layer` builds a layer
            whose output is added to the token embeddings.
        biases_attention_scores: bool, whether `attention_bias` gives a
            bias (then a model builds `attention_bias_layer`s).
    """

    name: typing.ClassVar[str] = None
    adds_to_embeddings: typing.ClassVar[bool] = False
    biases_attention_scores: typing.ClassVar[bool] = False

    @classmethod
    def for_model(cls, sequence_length=None, num_heads=None, head_dim=None):
        """The scheme for a model of this shape (what `get` builds).

        The model's sizes fill the scheme's fields of the same names, and
        only those; a scheme that needs more than its fields say overrides
        this.

        Args:
            sequence_length: int or `None`, the model's longest sequence.
            num_heads: int or `None`, the model's attention heads.
            head_dim: int or `None`, the features of each head when the
                model's attention sets them (else `hidden_dim / num_heads`).

        Returns:
            An instance of `cls`.
        """
        sizes = {
            "sequence_length": sequence_length,
            "num_heads": num_heads,
            "head_dim": head_dim,
        }
        fields = _field_names(cls)
        return cls(**{name: size for name, size in sizes.items() if name in fields})

    def get_config(self):
        """The scheme as a dict that `get` builds it again from: its `name`
        and its fields, the sizes a model gave it included."""
        fields = {
            field.name: getattr(self, field.name) for field in dataclasses.fields(self)
        }
        return {"name": self.name, **fields}

    @property
    def max_length(self):
        """The most positions the scheme encodes; `None` for no limit."""
        return None

    def check_embedding_dim(self, embedding_dim, name):
        """Returns `embedding_dim` if the scheme can encode it, else raises.

        Args:
            embedding_dim: int, the model dimension.
            name: str, the argument's public name (for the message).
        """
        return embedding_dim

    def block_arguments(self):
        """The attention settings every block of a model with this scheme needs.

        A model adds them to its `keras_attn.layers.AttentionSettings`
        (`ZooModel._use_position_scheme`), which every block gets.

        Returns:
            A dict of `AttentionSettings` fields (a rotary scheme's
            rotation), `{}` for a scheme that acts outside the blocks'
            attention (embeddings, score biases).
        """
        return {}

    def position_layer(self, dtype=None):
        """The layer whose output `(batch, length, dim)` is added to the
        embeddings, called as `layer(embeddings, start_index=...)`; `None`
        when the scheme does not add to the embeddings.

        Args:
            dtype: dtype or `keras.DTypePolicy` of the layer. Defaults to
                `None`, meaning the global policy.
        """
        return None

    def attention_bias(
        self, query_length, key_length, query_offset=0, bidirectional=False
    ):
        """The bias added to the attention scores; `None` for none.

        Args:
            query_length: int or scalar tensor, the number of queries.
            key_length: int or scalar tensor, the number of keys.
            query_offset: int or scalar tensor, the position of the first
                query (the cache index when decoding; keys start at 0).
                Defaults to `0`.
            bidirectional: bool, `True` for an encoder (queries attend to
                later keys too), `False` for a causal decoder. Defaults to
                `False`.

        Returns:
            `None`, or a float tensor broadcastable to `(batch, heads,
            query_length, key_length)`.
        """
        return None

    def attention_bias_layer(self, bidirectional, dtype=None, name=None):
        """The layer a model calls for the bias of one stack of blocks.

        Called as `layer(query_sequence, key_sequence=None,
        query_offset=0)`, inside the functional graph (lengths unknown
        until run) and when decoding with a cache (the keys: the cache).
        A scheme whose bias has weights (T5's) returns a layer of its own.

        Args:
            bidirectional: bool, see `attention_bias`.
            dtype: dtype or `keras.DTypePolicy` of the layer. Defaults to
                `None`, meaning the global policy.
            name: str, the layer's name. Defaults to `None`.

        Returns:
            A `PositionBias` layer, or `None` when the scheme biases no
            score.
        """
        if not self.biases_attention_scores:
            return None
        return PositionBias(self, bidirectional, dtype=dtype, name=name)


@register
@dataclasses.dataclass(frozen=True)
class SinusoidalPositions(PositionScheme):
    """The paper's fixed sine and cosine encodings, added to the embeddings.

    Any length is encoded; the model dimension must be even (sine and
    cosine pairs). The layer is `keras_attn.layers.SinusoidalPositionEncoding`.

    Args:
        max_wavelength: float in `[1, 2**60]`, the base of the
            wavelengths (`keras_attn.validation.check_max_wavelength`).
            Defaults to `10000`.

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.5.
    """

    name: typing.ClassVar[str] = "sinusoidal"
    adds_to_embeddings: typing.ClassVar[bool] = True

    max_wavelength: float = 10000.0

    def __post_init__(self):
        check_max_wavelength(self.max_wavelength, "max_wavelength")

    def check_embedding_dim(self, embedding_dim, name):
        if embedding_dim % 2:
            raise ValueError(
                f"`{name}` must be even with sinusoidal positions (sine and "
                f"cosine pairs). Received: {name}={embedding_dim}, "
                "position='sinusoidal'"
            )
        return embedding_dim

    def position_layer(self, dtype=None):
        return SinusoidalPositionEncoding(
            max_wavelength=self.max_wavelength, dtype=dtype, name="position_encoding"
        )


@register
@dataclasses.dataclass(frozen=True)
class LearnedPositions(PositionScheme):
    """One trainable vector per position, added to the embeddings.

    Sequences end at `sequence_length` positions. The layer is
    `keras_attn.layers.PositionEmbedding`.

    Args:
        sequence_length: int, the number of learned positions.
        initializer: initializer of the vectors. Defaults to
            `"glorot_uniform"`.

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.5 and
        Table 3, row (E).
    """

    name: typing.ClassVar[str] = "learned"
    adds_to_embeddings: typing.ClassVar[bool] = True

    sequence_length: int
    initializer: object = "glorot_uniform"

    def __post_init__(self):
        check_positive_int(self.sequence_length, "sequence_length")

    @property
    def max_length(self):
        return self.sequence_length

    def position_layer(self, dtype=None):
        return PositionEmbedding(
            self.sequence_length,
            initializer=keras.initializers.get(self.initializer),
            dtype=dtype,
            name="position_embedding",
        )


@register
@dataclasses.dataclass(frozen=True)
class AlibiPositions(PositionScheme):
    """ALiBi: no position embedding, a linear distance penalty per head.

    Head `h` adds `-slope_h * |query_position - key_position|` to its
    scores (`keras_attn.layers.alibi_bias`; the slopes are
    `keras_attn.layers.alibi_slopes`). A decoder's causal mask leaves only
    keys at or before the query, so its bias is the paper's
    `-slope_h * (i - j)`; an encoder's queries see keys on both sides and
    are penalized by the distance either way. Nothing is learned and no
    length is fixed: a model trained short runs on longer sequences.

    Args:
        num_heads: int, the model's attention heads (one slope each).
        alibi_bias_max: float, see `keras_attn.layers.alibi_slopes`.
            Defaults to `8`.

    Example:

    >>> scheme = keras_attn.layers.positions.position_schemes.get("alibi", num_heads=2)
    >>> scheme.adds_to_embeddings, scheme.max_length
    (False, None)
    >>> # An encoder's query at position 1: keys on both sides are penalized.
    >>> bias = scheme.attention_bias(1, 3, query_offset=1, bidirectional=True)
    >>> keras.ops.convert_to_numpy(bias[0, :, 0]).tolist()
    [[-0.0625, 0.0, -0.0625], [-0.00390625, 0.0, -0.00390625]]

    References:
        Press et al., "Train Short, Test Long: Attention with Linear Biases
        Enables Input Length Extrapolation", 2021,
        https://arxiv.org/abs/2108.12409.
    """

    name: typing.ClassVar[str] = "alibi"
    biases_attention_scores: typing.ClassVar[bool] = True

    num_heads: int
    alibi_bias_max: float = 8.0

    def __post_init__(self):
        check_positive_int(self.num_heads, "num_heads")
        check_positive_float(self.alibi_bias_max, "alibi_bias_max")

    def attention_bias(
        self, query_length, key_length, query_offset=0, bidirectional=False
    ):
        # (1, num_heads, query_length, key_length)
        return alibi_bias(
            self.num_heads,
            query_length,
            key_length,
            query_offset=query_offset,
            alibi_bias_max=self.alibi_bias_max,
            bidirectional=bidirectional,
        )


@register
@dataclasses.dataclass(frozen=True)
class RelativePositions(PositionScheme):
    """T5's relative position bias: a learned scalar per distance bucket.

    No position embedding: each head adds a learned scalar to its scores,
    one per bucket of the distance between query and key
    (`keras_attn.layers.RelativePositionBias`). As in T5, one bias layer
    serves all the blocks of a stack: an encoder's buckets tell keys
    before the query from keys after it, a decoder's are causal. No length
    is fixed: all distances past `max_distance` share the last bucket.

    The bias has weights, so it lives in a layer, not in `attention_bias`:
    a model asks for it with `attention_bias_layer`, holds it and saves its
    weights.

    Args:
        num_heads: int, the model's attention heads (one scalar each per
            bucket).
        num_buckets: int, the number of distance buckets. Defaults to `32`.
        max_distance: int, the distance from which all keys share a bucket.
            Defaults to `128`.
        initializer: initializer of the bucket scalars. Defaults to
            `"random_normal"`.

    Example:

    >>> scheme = keras_attn.layers.positions.position_schemes.get("relative", num_heads=2)
    >>> scheme.adds_to_embeddings, scheme.max_length
    (False, None)
    >>> layer = scheme.attention_bias_layer(bidirectional=False)
    >>> tokens = keras.ops.zeros((1, 5, 8))
    >>> tuple(layer(tokens).shape)  # (1, heads, query, key)
    (1, 2, 5, 5)

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", 2020, section 2.1.
    """

    name: typing.ClassVar[str] = "relative"
    biases_attention_scores: typing.ClassVar[bool] = True

    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    initializer: object = "random_normal"

    def __post_init__(self):
        check_positive_int(self.num_heads, "num_heads")
        # One scheme serves encoders and decoders: both must have buckets.
        for bidirectional in (True, False):
            check_bucket_arguments(bidirectional, self.num_buckets, self.max_distance)

    def attention_bias(
        self, query_length, key_length, query_offset=0, bidirectional=False
    ):
        raise ValueError(
            "T5's relative bias is learned: it has no value without the "
            "layer that holds its weights. Ask the scheme for "
            "`attention_bias_layer(bidirectional)` and call that. "
            "Received: position='relative'"
        )

    def attention_bias_layer(self, bidirectional, dtype=None, name=None):
        return RelativeBias(
            self.num_heads,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            bidirectional=bidirectional,
            embeddings_initializer=self.initializer,
            dtype=dtype,
            name=name,
        )


@register
@dataclasses.dataclass(frozen=True)
class RotaryPositions(PositionScheme):
    """RoPE: the queries and keys of self-attention rotated by position.

    No position embedding and no score bias: each block's self-attention
    rotates its projected queries and keys, pairs of features `(x[i],
    x[i + d/2])` of a head by the angle `position * max_wavelength **
    (-2i / d)` (`keras_attn.layers.apply_rotary`), so that a query-key dot
    product depends only on their distance. Cross-attention is not
    rotated. The scheme gives the blocks their rotation arguments
    (`block_arguments()`); a decoder's cached step rotates at the cache
    index. No length is fixed: nothing is learned per position, so a model
    trained short runs on longer sequences (how well it does there is
    another matter; `scaling_factor` is linear position interpolation).

    Args:
        num_heads: int, the model's attention heads: each head's features
            (`hidden_dim / num_heads`) rotate in pairs, so their number
            must be even.
        head_dim: int, the features of each head where the model's
            attention sets them (`AttentionSettings.head_dim`); must be
            even. Set by the model, and written by `get_config` only when
            set. Defaults to `None`, meaning `hidden_dim / num_heads`.
        max_wavelength: float in `[1, 2**60]`, the base of the
            wavelengths (`keras_attn.validation.check_max_wavelength`).
            Defaults to `10000`.
        scaling_factor: float `s` in `[2**-32, 2**32]`, positions are
            divided by `s` (Chen et al., 2023;
            `keras_attn.validation.check_scaling_factor`). Defaults to
            `1.0` (no scaling).

    Example:

    >>> scheme = keras_attn.layers.positions.position_schemes.get("rotary", num_heads=4)
    >>> scheme.adds_to_embeddings, scheme.max_length
    (False, None)
    >>> scheme.block_arguments()
    {'rotary_max_wavelength': 10000.0}
    >>> scheme.check_embedding_dim(64, "hidden_dim")  # 16 features a head
    64

    References:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position
        Embedding", 2021, https://arxiv.org/abs/2104.09864.
    """

    name: typing.ClassVar[str] = "rotary"

    num_heads: int
    max_wavelength: float = 10000.0
    scaling_factor: float = 1.0
    head_dim: int | None = None

    def __post_init__(self):
        check_positive_int(self.num_heads, "num_heads")
        check_max_wavelength(self.max_wavelength, "max_wavelength")
        check_scaling_factor(self.scaling_factor, "scaling_factor")
        if self.head_dim is not None and (
            check_positive_int(self.head_dim, "head_dim") % 2
        ):
            raise ValueError(
                "`head_dim` (the features of a head) must be even with "
                "rotary positions (features rotate in pairs). Received: "
                f"head_dim={self.head_dim}, position='rotary'"
            )

    def get_config(self):
        config = super().get_config()
        if self.head_dim is None:
            # As saved before the field: `hidden_dim / num_heads` features.
            del config["head_dim"]
        return config

    def check_embedding_dim(self, embedding_dim, name):
        if self.head_dim is not None:
            # The heads' size is set apart from the model dimension.
            return embedding_dim
        if embedding_dim % self.num_heads or (embedding_dim // self.num_heads) % 2:
            raise ValueError(
                f"`{name}` / `num_heads` (the features of a head) must be an "
                "even integer with rotary positions (features rotate in "
                f"pairs). Received: {name}={embedding_dim}, "
                f"num_heads={self.num_heads}, position='rotary'"
            )
        return embedding_dim

    def block_arguments(self):
        arguments = {"rotary_max_wavelength": float(self.max_wavelength)}
        if self.scaling_factor != 1.0:
            arguments["rotary_scaling_factor"] = float(self.scaling_factor)
        return arguments
