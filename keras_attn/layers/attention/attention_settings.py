"""`AttentionSettings`: what every attention layer of a block or model shares.

A setting that several levels need (model -> block -> `MultiHeadAttention`)
is made and checked once, here, and handed down as this object, the way a
position scheme is (`keras_attn.layers.positions.position_schemes`). Each field
declares its check; a new setting is one field (`_setting(default, check)`),
and reaches `MultiHeadAttention` through `layer_arguments()` under its own
name, which is the layer's argument of that name. A setting the
cross-attention must not take is dropped in `for_cross_attention()`.

A setting added after configs were saved with the others may be written
only when set (`_setting(..., written_at_default=False)`): a config at its
default then reads as the one files saved before it hold, and loads in
the versions before it. `head_dim` is such a setting, and the one that is
no argument of `MultiHeadAttention` under its own name: it is the layer's
`key_dim` (`key_dim(hidden_dim, num_heads)`), which a block passes itself.
"""

import dataclasses

import keras

from keras_attn.layers.attention.attention_arguments import (
    check_head_dim,
    check_sliding_window,
)
from keras_attn.layers.attention.query_key_heads import (
    check_num_key_value_heads,
    check_rotary_arguments,
)
from keras_attn.validation import (
    check_bool,
    check_divisible,
    check_float,
    check_rate,
)

# The smallest normal float32 number: the scores are capped in (at least)
# float32, where a smaller cap flushes to zero and `0 * tanh(s / 0)` is NaN.
_SMALLEST_SOFT_CAP = 2.0**-126


def check_logit_soft_cap(logit_soft_cap, flash_attention=None):
    """`logit_soft_cap` checked: `None`, or a finite float `>= 2**-126`.

    Refused beside `flash_attention=True`: `keras.ops.dot_product_attention`
    caps scores only with JAX on a TPU (and with another formula), so a
    capped call always runs the explicit path. The one check of the
    setting, for `AttentionSettings` and `MultiHeadAttention` alike.

    Returns:
        `None`, or the cap as a `float`.
    """
    logit_soft_cap = check_float(
        logit_soft_cap,
        "logit_soft_cap",
        min_value=_SMALLEST_SOFT_CAP,
        allow_none=True,
        reason="a positive normal float32 number",
    )
    if logit_soft_cap is not None and flash_attention:
        raise ValueError(
            "`logit_soft_cap` needs the explicit attention path: the fused "
            "`keras.ops.dot_product_attention` caps scores only with JAX on "
            "a TPU. Use `flash_attention=None` (which falls back) or `False`. "
            f"Received: logit_soft_cap={logit_soft_cap}, flash_attention=True"
        )
    return logit_soft_cap


def check_scale(scale):
    """`scale` checked: `None`, or a finite float `> 0`.

    The one check of the setting, for `AttentionSettings` and
    `MultiHeadAttention` alike.

    Returns:
        `None`, or the scale as a `float`.
    """
    return check_float(
        scale,
        "scale",
        min_value=0.0,
        include_min=False,
        allow_none=True,
    )


def check_rotated_head_dim(head_dim, rotary_max_wavelength, rotary_dim):
    """Refuses an odd `head_dim` whose every feature is rotated (RoPE turns
    pairs of features); `head_dim=None` is checked where it is known (the
    model's position scheme, `MultiHeadAttention`'s `key_dim`)."""
    if (
        head_dim is not None
        and rotary_max_wavelength is not None
        and rotary_dim is None
        and head_dim % 2
    ):
        raise ValueError(
            "`head_dim` must be even with rotary positions, which turn pairs "
            "of a head's features (or set an even `rotary_dim` below it). "
            f"Received: head_dim={head_dim}, "
            f"rotary_max_wavelength={rotary_max_wavelength}"
        )
    return head_dim


def _setting(default, check=None, written_at_default=True):
    """A field of `AttentionSettings`; `check(value)` returns it canonical.

    `written_at_default=False`: `get_config()` leaves the field out while
    it holds `default` (a setting newer than saved configs).
    """
    return dataclasses.field(
        default=default,
        metadata={"check": check, "written_at_default": written_at_default},
    )


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class AttentionSettings:
    """The settings every attention layer of a block (or model) shares.

    Frozen and checked when made: an invalid value raises there, named
    with its value, before any layer is built. A Transformer block takes
    one as `attention=` and builds its `MultiHeadAttention` sub-layers from
    it (`layer_arguments()`; the cross-attention from
    `for_cross_attention()`);
    the models of `keras_attn.models` build one from their flat arguments
    (`attention_dropout`, `flash_attention`, `num_key_value_heads`,
    `qk_norm`, and the position scheme's rotation) and hand it to every
    block. Its config (`get_config()`) is plain JSON data.

    Args:
        dropout: float in `[0, 1)`, dropout on the attention weights (named
            `attention_dropout` in messages, as in the blocks' and models'
            configs, where `dropout` is the residual dropout). Defaults to
            `0.0`.
        flash_attention: `None`, `True` or `False`, as on
            `keras_attn.layers.MultiHeadAttention`: `None` uses the fused
            `keras.ops.dot_product_attention` kernel when possible, `True`
            requires it (with `dropout=0.0`), `False` never uses it.
            Defaults to `None`.
        num_key_value_heads: positive int, the key and value heads
            (grouped-query attention; `1` is multi-query attention); it
            must divide the layers' `num_heads` (`key_value_heads`).
            Defaults to `None`, meaning `num_heads`.
        qk_norm: bool, RMS-normalize the projected queries and keys over
            each head's features, before any rotation (Dehghani et al.,
            2023). Defaults to `False`.
        rotary_max_wavelength: float in `[1, 2**60]`, rotary position
            embeddings (RoPE) of this maximum wavelength on the queries and
            keys of self-attention (`10000.0` in RoFormer). Defaults to
            `None`, meaning no rotation.
        rotary_scaling_factor: float in `[2**-32, 2**32]`, RoPE's linear
            position interpolation: positions are divided by it. Only with
            `rotary_max_wavelength`. Defaults to `1.0`.
        rotary_dim: even int `<= head_dim`, how many of each head's
            features RoPE rotates (partial rotary, as GPT-NeoX). Only with
            `rotary_max_wavelength`. Defaults to `None`, meaning all of
            them.
        sliding_window: positive int, local self-attention: query `i`
            attends only keys `j` with `|i - j| < sliding_window`, so with
            the causal mask the last `sliding_window` positions up to itself
            (`i - sliding_window < j <= i`, as Mistral and Gemma 2); without
            it (an encoder) a band of `2 * sliding_window - 1` keys centred
            on `i`. Positions are absolute: a cached step's queries sit at
            the cache index. Self-attention only: the cross-attention
            attends every encoder position (`for_cross_attention()`). Any
            `flash_attention`: the window reaches the fused kernel as part
            of the boolean mask. Defaults to `None`, meaning no window.
        logit_soft_cap: float `> 0` (at least `2**-126`), Gemma 2's soft
            cap of the attention logits: the scaled scores `s = Q K^T *
            scale` become `logit_soft_cap * tanh(s / logit_soft_cap)`,
            before any bias, the mask and the softmax. Capped attention
            runs the explicit path (`flash_attention=None` falls back to
            it; `True` is refused). Defaults to `None`, meaning no cap.
        scale: float `> 0`, the factor of the scores `Q K^T` (`1.0` for
            T5). Defaults to `None`, meaning `1 / sqrt(head_dim)`.
        head_dim: positive int, the features of each query, key and value
            head (`MultiHeadAttention`'s `key_dim`) when they are not
            `hidden_dim / num_heads`: the query projection is then
            `hidden_dim -> num_heads * head_dim` (the key and value ones
            `num_key_value_heads * head_dim`) and the output projection
            `num_heads * head_dim -> hidden_dim`, so `num_heads` need not
            divide `hidden_dim` (T5's `d_kv`, a Llama-family config's
            `head_dim`); even when a rotation turns all its features.
            Written by `get_config()` only when set. Defaults to `None`,
            meaning `hidden_dim // num_heads` (`num_heads` must divide
            `hidden_dim`).

    Example:

    >>> settings = keras_attn.layers.AttentionSettings(
    ...     num_key_value_heads=2, qk_norm=True, rotary_max_wavelength=10000.0)
    >>> block = keras_attn.layers.TransformerDecoderBlock(
    ...     num_heads=4, intermediate_dim=32, attention=settings)
    >>> _ = block(keras.random.normal((1, 3, 16)))
    >>> block.self_attention.get_config()["num_key_value_heads"]
    2
    >>> settings.for_cross_attention().rotary_max_wavelength is None
    True
    >>> keras_attn.layers.AttentionSettings.from_config(settings.get_config()) == settings
    True
    """

    dropout: float = _setting(0.0, lambda value: check_rate(value, "attention_dropout"))
    flash_attention: bool | None = _setting(
        None, lambda value: check_bool(value, "flash_attention", allow_none=True)
    )
    num_key_value_heads: int | None = _setting(
        None,
        lambda value: check_head_dim(value, "num_key_value_heads", allow_none=True),
    )
    qk_norm: bool = _setting(False, lambda value: check_bool(value, "qk_norm"))
    # The rotation's three fields are checked together (`__post_init__`).
    rotary_max_wavelength: float | None = _setting(None)
    rotary_scaling_factor: float = _setting(1.0)
    rotary_dim: int | None = _setting(None)
    sliding_window: int | None = _setting(None, check_sliding_window)
    # Checked with `flash_attention` (`__post_init__`).
    logit_soft_cap: float | None = _setting(None)
    scale: float | None = _setting(None, check_scale)
    head_dim: int | None = _setting(
        None,
        lambda value: check_head_dim(value, "head_dim", allow_none=True),
        written_at_default=False,
    )

    _ROTATION = ("rotary_max_wavelength", "rotary_scaling_factor", "rotary_dim")

    def __post_init__(self):
        for field in dataclasses.fields(self):
            check = field.metadata["check"]
            if check is not None:
                self._set(field.name, check(getattr(self, field.name)))
        # Named `head_dim` here (the rotation's check says `key_dim`).
        check_rotated_head_dim(
            self.head_dim, self.rotary_max_wavelength, self.rotary_dim
        )
        rotation = check_rotary_arguments(
            self.rotary_max_wavelength,
            self.rotary_scaling_factor,
            self.rotary_dim,
            key_dim=self.head_dim,
        )
        for name, value in zip(self._ROTATION, rotation):
            self._set(name, value)
        if self.flash_attention and self.dropout > 0.0:
            raise ValueError(
                "`flash_attention=True` needs `attention_dropout=0.0`: the fused "
                "kernel has no dropout. Received: flash_attention=True, "
                f"attention_dropout={self.dropout}"
            )
        self._set(
            "logit_soft_cap",
            check_logit_soft_cap(self.logit_soft_cap, self.flash_attention),
        )

    def _set(self, name, value):
        # The canonical value of a checked field (frozen: no `setattr`).
        object.__setattr__(self, name, value)

    def key_value_heads(self, num_heads):
        """The number of key/value heads for `num_heads` query heads.

        `num_heads` for `num_key_value_heads=None`; else the setting, which
        must divide `num_heads` (the rule `MultiHeadAttention` applies).

        Raises:
            ValueError: if `num_key_value_heads` does not divide `num_heads`.
        """
        return check_num_key_value_heads(self.num_key_value_heads, num_heads)

    def key_dim(self, hidden_dim, num_heads):
        """The features of each head for a `hidden_dim` attention of
        `num_heads` heads: `head_dim` when set, else `hidden_dim //
        num_heads` (section 3.2.2), the `key_dim` of the blocks'
        `MultiHeadAttention` layers.

        Raises:
            ValueError: `head_dim` is `None` and `num_heads` does not divide
                `hidden_dim`.
        """
        if self.head_dim is not None:
            return self.head_dim
        check_divisible(hidden_dim, num_heads, "hidden_dim", "num_heads")
        return hidden_dim // num_heads

    def for_cross_attention(self):
        """These settings for a cross-attention: no rotary positions and no
        sliding window (a query and the encoder's keys have no common
        positions to rotate by or to measure a window in)."""
        return dataclasses.replace(
            self,
            rotary_max_wavelength=None,
            rotary_scaling_factor=1.0,
            rotary_dim=None,
            sliding_window=None,
        )

    def replace(self, **changes):
        """A copy with `changes` (checked as a new object)."""
        return dataclasses.replace(self, **changes)

    def layer_arguments(self):
        """The keyword arguments of `keras_attn.layers.MultiHeadAttention`,
        but for `key_dim` (`key_dim(hidden_dim, num_heads)`)."""
        arguments = dataclasses.asdict(self)
        del arguments["head_dim"]
        return arguments

    def get_config(self):
        """The settings, as plain JSON data: every one, but for those
        written only when set (`head_dim`) left at their default."""
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.metadata["written_at_default"]
            or getattr(self, field.name) != field.default
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @classmethod
    def get(cls, identifier, default=None):
        """`identifier` as settings: itself, from its config, or `default`.

        Args:
            identifier: an `AttentionSettings`, its config (a dict), or
                `None`.
            default: the settings `None` stands for. Defaults to `None`,
                meaning `AttentionSettings()`.

        Raises:
            TypeError: for anything else, or a dict with an unknown key.
        """
        if identifier is None:
            return cls() if default is None else default
        if isinstance(identifier, cls):
            return identifier
        if isinstance(identifier, dict):
            unknown = sorted(
                set(identifier) - {f.name for f in dataclasses.fields(cls)}
            )
            if unknown:
                raise TypeError(
                    f"`attention` got unknown setting(s) {unknown}. Valid "
                    f"settings: {[f.name for f in dataclasses.fields(cls)]}"
                )
            return cls.from_config(identifier)
        raise TypeError(
            "`attention` must be an `AttentionSettings`, its config (a dict) "
            f"or `None`. Received: attention={identifier!r} of type "
            f"{type(identifier).__name__}"
        )
