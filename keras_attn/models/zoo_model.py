"""`ZooModel`, the base class of the four functional models.

What `Transformer`, `TransformerLM`, `TransformerEncoderClassifier` and
`VisionTransformer` share is written here once, in the way keras-hub's
`Backbone` does it:

- the checks a model needs beyond `keras_attn.validation` (activations,
  image sizes, unknown keyword arguments) and, in one place
  (`_check_model_arguments`), the checks of the arguments that models
  share: those of the blocks every model takes
  (`_check_transformer_arguments`: sizes, rates, norms, and `attention`,
  one `AttentionSettings` that every block gets) and the others of
  `MODEL_ARGUMENTS` (`vocabulary_size`, `position`, ...); each model
  checks and stores its own other arguments in its constructor and
  returns all of them from its own `get_config`;
- the dtype policy of the layers (a functional model's own `dtype_policy`
  is always the global one), serialized by `get_config` with any quantized
  layers (`ModelFeaturesMixin`) and restored by `from_config`;
- presets (`PresetMixin`), LoRA and quantization (`ModelFeaturesMixin`);
- the checks of a call's inputs (names, ranks, token ids, lengths against
  the position scheme) and empty batches, which give an empty result on
  every backend;
- the sub-layers every model builds the same way (`_transformer_blocks`,
  `_token_embedding`, ...), so their names, and so the weights' names and
  order, are those of the saved presets;
- the decoding cache of the models that decode (`_self_attention_cache`,
  and `_embed_new_positions`, the start of their `decode_step`) and the position scheme's attention bias for the blocks
  (`position_bias_argument`) and the rotation it adds to the attention
  settings of the blocks (`_transformer_blocks`).
"""

import difflib
import inspect

import keras
from keras import ops

from keras_attn.layers.attention.attention_settings import AttentionSettings
from keras_attn.layers.attention.cache_index import resolve_cache_index
from keras_attn.layers.attention.padding_mask import PaddingMask
from keras_attn.layers.blocks.feed_forward import get_activation
from keras_attn.layers.blocks.transformer_block_base import NORMALIZATIONS
from keras_attn.layers.embeddings.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.heads.tied_vocabulary_projection import TiedVocabularyProjection
from keras_attn.layers.heads.vocabulary_projection import VocabularyProjection
from keras_attn.layers.legacy_config import (
    flat_attention_setting,
    migrate_model_config,
)
from keras_attn.layers.normalization.rms_normalization import RMSNormalization
from keras_attn.layers.positions import position_schemes
from keras_attn.models.model_features import ModelFeaturesMixin
from keras_attn.models.preset_io import PresetMixin
from keras_attn.models.token_inputs import (
    as_array,
    check_input_names,
    check_same_batch_size,
    check_token_batch,
)
from keras_attn.validation import (
    check_bool,
    check_choice,
    check_epsilon,
    check_float_dtype,
    check_positive_int,
    check_rate,
    check_token_id,
)

# The keyword arguments of `keras.Model` that a zoo model passes on.
BASE_MODEL_ARGUMENTS = ("name", "trainable")

# The arguments that more than one model takes, beyond the blocks' ones
# (`ZooModel._check_transformer_arguments`) and `pad_id` (checked against
# `vocabulary_size`), each with its check. `ZooModel._check_model_arguments`
# checks those that a model's constructor takes, in this order, and stores
# each as the attribute of its name (`self.max_sequence_length`, ...).
MODEL_ARGUMENTS = {
    "vocabulary_size": check_positive_int,
    "max_sequence_length": check_positive_int,
    "position": position_schemes.check_position,
    "normalize_first": check_bool,
    "tie_embeddings": check_bool,
    "scale_embeddings": check_bool,
}


def check_activation(value, name):
    """A Keras activation (name, serialized or callable) or a gated one's
    name (`keras_attn.layers.blocks.feed_forward.GATED_ACTIVATIONS`), returned as
    given: the feed-forward network's check (`get_activation`), under the
    model's argument name."""
    get_activation(value, name)
    return value


def check_image_size(value, name):
    """An int or a `(height, width)` pair of positive ints -> a pair."""
    sizes = value if isinstance(value, (tuple, list)) else (value, value)
    if len(sizes) != 2:
        raise ValueError(
            f"`{name}` must be an int or a (height, width) pair. "
            f"Received: {name}={value!r}"
        )
    return tuple(check_positive_int(size, name) for size in sizes)


def check_model_attention(attention, num_heads):
    """A model's `attention` argument -> `AttentionSettings`.

    `attention` is an `AttentionSettings`, a dict of its fields, or `None`
    (`AttentionSettings()`: a model's attention dropout defaults to `0.0`,
    not to its `dropout`). Its key/value heads must divide `num_heads`. A
    model's rotation is its position scheme's (`position="rotary"`), so the
    settings may hold none.

    Raises:
        TypeError: `attention` is of another type, or a dict with an unknown
            key.
        ValueError: a setting's value is invalid, or a rotation is set.
    """
    settings = AttentionSettings.get(attention)
    settings.key_value_heads(num_heads)
    if settings.rotary_max_wavelength is not None:
        raise ValueError(
            "A model's `attention` must not set `rotary_max_wavelength`: the "
            "model's rotation is its position scheme's (`position=\"rotary\"`). "
            f"Received: attention.rotary_max_wavelength={settings.rotary_max_wavelength}"
        )
    return settings


def _unknown_argument_hint(name, valid):
    """How an unknown keyword argument is named in the `TypeError`."""
    setting = flat_attention_setting(name)
    if setting is not None:
        return f"{name!r} (an attention setting: pass attention={{{setting!r}: ...}})"
    close = difflib.get_close_matches(name, valid, n=1)
    return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)


def position_bias_argument(
    bias_layer, keyword, query_sequence, key_sequence=None, query_offset=0
):
    """`{keyword: bias}` for a block's call, or `{}` without a bias layer.

    `bias_layer` is the model's `attention_bias_layer` of its position
    scheme (see `keras_attn.layers.positions.position_schemes`), `None` for the
    schemes that add to the embeddings: the blocks then get no argument
    at all.

    Args:
        bias_layer: a `PositionBias` layer (or a scheme's own), or `None`.
        keyword: str, the block's argument (`"attention_bias"` for an
            encoder block, `"self_attention_bias"` for a decoder block).
        query_sequence: tensor `(batch, query_length, ...)`.
        key_sequence: tensor `(batch, key_length, ...)` (a decoding
            cache). Defaults to `None`, meaning `query_sequence`.
        query_offset: int or scalar tensor, the cache index when decoding.
            Defaults to `0`.
    """
    if bias_layer is None:
        return {}
    bias = bias_layer(query_sequence, key_sequence, query_offset=query_offset)
    return {keyword: bias}


@keras.saving.register_keras_serializable(package="keras_attn")
class ZooModel(PresetMixin, ModelFeaturesMixin, keras.Model):
    """The base class of the functional models of `keras_attn.models`.

    A subclass's constructor reads in four steps, as a keras-hub backbone's:

    1. `self._check_model_arguments(locals())`, which checks the arguments
       that models share and stores each as the attribute of its name,
       then the model's own arguments checked (`keras_attn.validation`)
       and stored the same way, before any layer is built;
    2. the layers (the helpers below build the ones every model shares);
    3. the functional graph, and
       `super().__init__(inputs, outputs, dtype=dtype, **kwargs)`;
    4. the layers stored as attributes. They are assigned after the graph
       is built so that the model's weights keep the graph's order (the
       order of `get_weights` and of a saved optimizer's variables).

    Each subclass writes its own `get_config`, chained to this one (`name`,
    `trainable`, the layers' dtype policy, LoRA); `from_config` calls the
    subclass's constructor with it.

    Class attributes a subclass sets:

    - `presets`, `preset_arguments`: see `PresetMixin`.
    - `token_inputs`: names of the inputs that hold token ids, checked on
      every call (rank, dtype, values in the vocabulary, length against
      `position_scheme.max_length`).
    - `nonempty_inputs`: inputs that must hold at least one position (an
      encoder whose output is pooled or attended to); an empty one raises
      `ValueError`. Other zero-size inputs give an empty result.

    Args:
        inputs: the functional model's inputs (a `keras.Input` or a dict).
        outputs: its outputs.
        dtype: dtype or `keras.DTypePolicy` the layers were built with.
            Defaults to `None`, meaning the global policy.
        **kwargs: base `keras.Model` arguments (`name`, `trainable`).
    """

    token_inputs = ()
    nonempty_inputs = ()

    def __init__(self, inputs, outputs, dtype=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # The layers' policy (a functional model's own `dtype_policy` is
        # always the global one, so `get_config` cannot use it).
        self._layers_dtype_policy = keras.dtype_policies.get(
            dtype if dtype is not None else keras.config.dtype_policy()
        )

    def _check_model_arguments(self, arguments):
        """Checks and stores the constructor's arguments that models share.

        The first statement of a subclass's constructor, as
        `self._check_model_arguments(locals())`: `arguments` maps the name
        of each of the constructor's arguments (`dtype` and `kwargs`
        among them) to its value, so each shared argument is checked here
        once, by one check for every model, under its own name. In order:
        `dtype` and unknown keyword arguments (`_check_keyword_arguments`),
        the arguments of `MODEL_ARGUMENTS` that the constructor takes, the
        blocks' (`_check_transformer_arguments`), then `pad_id` if the
        constructor takes it. The constructor then checks and stores its
        own other arguments.

        Args:
            arguments: dict from argument name to the value received.
        """
        self._check_keyword_arguments(arguments["dtype"], arguments["kwargs"])
        for name, check in MODEL_ARGUMENTS.items():
            if name in arguments:
                setattr(self, name, check(arguments[name], name))
        self._check_transformer_arguments(
            num_layers=arguments["num_layers"],
            hidden_dim=arguments["hidden_dim"],
            num_heads=arguments["num_heads"],
            intermediate_dim=arguments["intermediate_dim"],
            dropout=arguments["dropout"],
            activation=arguments["activation"],
            layer_norm_epsilon=arguments["layer_norm_epsilon"],
            normalization=arguments["normalization"],
            use_bias=arguments["use_bias"],
            attention=arguments["attention"],
        )
        if "pad_id" in arguments:
            self.pad_id = check_token_id(
                arguments["pad_id"], "pad_id", self.vocabulary_size
            )

    def _check_keyword_arguments(self, dtype, kwargs):
        """Refuses a `dtype` that does not compute in floats, and unknown
        keyword arguments.

        Called first (by `_check_model_arguments`): a misspelled argument
        (`hidden_dm=64`) raises a `TypeError` that names it and lists the
        valid ones, instead of being passed on to `keras.Model`.
        """
        check_float_dtype(dtype, "dtype")
        unknown = sorted(set(kwargs) - set(BASE_MODEL_ARGUMENTS))
        if not unknown:
            return
        parameters = inspect.signature(type(self).__init__).parameters
        valid = [
            name
            for name, parameter in parameters.items()
            if name != "self" and parameter.kind is not parameter.VAR_KEYWORD
        ] + list(BASE_MODEL_ARGUMENTS)
        hints = [_unknown_argument_hint(name, valid) for name in unknown]
        raise TypeError(
            f"{type(self).__name__} got unexpected keyword argument(s): "
            f"{', '.join(hints)}. Valid arguments: {valid}"
        )

    def _check_transformer_arguments(
        self,
        num_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        dropout,
        activation,
        layer_norm_epsilon,
        normalization,
        use_bias,
        attention,
    ):
        """Checks and stores the arguments of every model's blocks.

        Called by `_check_model_arguments`, before a model's own arguments
        are checked. `attention` becomes `self.attention`, an `AttentionSettings`
        (which checks its fields when made); the position scheme adds its
        rotation to the settings the blocks get (`_transformer_blocks`).
        """
        self.num_layers = check_positive_int(num_layers, "num_layers")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.intermediate_dim = check_positive_int(intermediate_dim, "intermediate_dim")
        self.dropout = check_rate(dropout, "dropout")
        self.activation = check_activation(activation, "activation")
        self.layer_norm_epsilon = check_epsilon(
            layer_norm_epsilon, "layer_norm_epsilon"
        )
        self.normalization = check_choice(
            normalization, "normalization", NORMALIZATIONS
        )
        self.use_bias = check_bool(use_bias, "use_bias")
        self.attention = check_model_attention(attention, self.num_heads)
        # `num_heads` must divide `hidden_dim` unless `head_dim` is set.
        self.attention.key_dim(self.hidden_dim, self.num_heads)

    def _use_position_scheme(self, position_scheme=None):
        """Stores the position scheme, checked against `hidden_dim`.

        `None` (the token models) is the scheme `self.position` names, for
        `self.max_sequence_length` positions and `self.num_heads` heads (of
        `self.attention.head_dim` features, where set).
        Its `block_arguments()` (a rotary scheme's rotation, `{}` for the
        others) join `self.attention` in every block (`_transformer_blocks`).
        """
        if position_scheme is None:
            position_scheme = position_schemes.get(
                self.position,
                sequence_length=self.max_sequence_length,
                num_heads=self.num_heads,
                head_dim=self.attention.head_dim,
            )
        position_scheme.check_embedding_dim(self.hidden_dim, "hidden_dim")
        self.position_scheme = position_scheme

    def _transformer_config(self):
        """The `get_config` entries of `_check_transformer_arguments`."""
        return {
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "normalization": self.normalization,
            "use_bias": self.use_bias,
            "attention": self.attention.get_config(),
        }

    # === Sub-layers that every model builds the same way ===

    def _transformer_blocks(
        self, block_class, count, prefix, dtype, normalize_first=None
    ):
        """`count` blocks named `f"{prefix}_{i}"`, configured from `self`:
        every one gets `self.attention` with the position scheme's rotation."""
        if normalize_first is None:
            normalize_first = self.normalize_first
        attention = self.attention.replace(**self.position_scheme.block_arguments())
        return [
            block_class(
                num_heads=self.num_heads,
                intermediate_dim=self.intermediate_dim,
                dropout=self.dropout,
                activation=self.activation,
                layer_norm_epsilon=self.layer_norm_epsilon,
                normalize_first=normalize_first,
                normalization=self.normalization,
                use_bias=self.use_bias,
                attention=attention,
                dtype=dtype,
                name=f"{prefix}_{i}",
            )
            for i in range(count)
        ]

    def _normalization(self, dtype, name):
        """A model-level norm (`output_norm`, ...) of `self.normalization`."""
        if self.normalization == "rms":
            return RMSNormalization(
                epsilon=self.layer_norm_epsilon, dtype=dtype, name=name
            )
        # Keras's own class, not `LayerNorm`: a functional model's weights file
        # names each layer's weights after its class (`layer_normalization`), so
        # the shipped presets' model-level norms load only into this class.
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon,
            center=self.use_bias,
            dtype=dtype,
            name=name,
        )

    def _token_embedding(self, dtype, name, scale_by_sqrt_dim=True):
        """The `TokenAndPositionEmbedding` of a token model, handed the
        position scheme `_use_position_scheme` built."""
        return TokenAndPositionEmbedding(
            self.vocabulary_size,
            self.max_sequence_length,
            self.hidden_dim,
            position=self.position_scheme,
            scale_by_sqrt_dim=scale_by_sqrt_dim,
            dtype=dtype,
            name=name,
        )

    def _dropout(self, dtype, name="embedding_dropout"):
        return FastDropout(self.dropout, dtype=dtype, name=name)

    def _padding_mask_layer(self, name="padding_mask"):
        return PaddingMask(self.pad_id, name=name)

    def _vocabulary_logits(self, embedding, dtype):
        """The pre-softmax projection: the embedding's table transposed (tied,
        section 3.4 of the paper) or a `Dense` of its own."""
        if self.tie_embeddings:
            return TiedVocabularyProjection(embedding, dtype=dtype, name="logits")
        return VocabularyProjection(self.vocabulary_size, dtype=dtype, name="logits")

    # === Positions and decoding ===

    def _check_positions(self, length, name, received):
        """Refuses `length` positions beyond the position scheme's last one.

        A symbolic length (`None`, or JAX export's shape polymorphism, where
        `a > 64` is undecidable) is left to the exported graph.
        """
        limit = self.position_scheme.max_length
        if limit is not None and isinstance(length, int) and length > limit:
            raise ValueError(
                f"`{name}` is longer than max_sequence_length={limit}, the "
                f"number of {self.position_scheme.name} positions. "
                f"Received: {received}"
            )

    def _self_attention_cache(self, decoder_blocks, batch_size, max_length):
        """Empty self-attention `(keys, values)` slots, one pair per block.

        Args:
            decoder_blocks: the `TransformerDecoderBlock`s that decode.
            batch_size: int or scalar int tensor.
            max_length: int, the most positions to decode (or, traced, a
                scalar int tensor, then not checked here).

        Returns:
            A tuple of `(keys, values)`, each `(batch, max_length,
            num_key_value_heads, head_dim)` zeros in the layers' compute
            dtype: the cache holds the key/value heads only (fewer than
            the query heads with grouped-query attention).
        """
        if not ops.is_tensor(max_length):
            max_length = check_positive_int(max_length, "max_length")
            self._check_positions(max_length, "max_length", f"max_length={max_length}")
        caches = []
        for block in decoder_blocks:
            # (batch, heads, max_length, head_dim) zeros, viewed as
            # (batch, max_length, heads, head_dim): the slots of one head
            # are contiguous, as a fused kernel reads them (torch's, after
            # Keras's transpose, reads such a view in place rather than
            # copying the cache every step); JAX and TensorFlow arrays have
            # no strides: there it is one transpose of zeros per decode.
            slots = ops.transpose(
                ops.zeros(
                    (batch_size, block.num_key_value_heads, max_length, block.head_dim),
                    dtype=self._layers_dtype_policy.compute_dtype,
                ),
                (0, 2, 1, 3),
            )
            caches.append((slots, slots))
        return tuple(caches)

    def _embed_new_positions(
        self, embedding, bias_layer, token_ids, cache, cache_index
    ):
        """The start of a `decode_step`: the new tokens embedded at the
        cache index, and the position bias against the whole cache.

        Args:
            embedding: the decoder's `TokenAndPositionEmbedding`.
            bias_layer: the decoder's `attention_bias_layer` of the
                position scheme, or `None`.
            token_ids: int tensor `(batch, new_length)`.
            cache: a decoding cache; its `"self_attention"` holds the slots
                of `_self_attention_cache`.
            cache_index: int or scalar int tensor, the step's index,
                checked, or clipped, by `resolve_cache_index`.

        Returns:
            `(x, cache_index, bias)`: the embedded positions `(batch,
            new_length, hidden_dim)`, the index the step runs at, and the
            blocks' argument from `position_bias_argument`.
        """
        # The first block's keys: (batch, max_length, key/value heads, head_dim).
        keys = cache["self_attention"][0][0]
        # Checked (or clipped) before the embedding reads it as a position.
        cache_index = resolve_cache_index(cache_index, keys, token_ids)
        x = embedding(token_ids, start_index=cache_index)
        # The new positions against the whole cache (its keys).
        bias = position_bias_argument(
            bias_layer, "self_attention_bias", x, keys, query_offset=cache_index
        )
        return x, cache_index, bias

    # === Calls ===

    def __call__(self, *args, **kwargs):
        # Keras reads the structure of the inputs before `call`: check
        # them first, so that errors name the model's own inputs.
        if args:
            args = (self._check_inputs(args[0]), *args[1:])
        elif "inputs" in kwargs:
            kwargs["inputs"] = self._check_inputs(kwargs["inputs"])
        return super().__call__(*args, **kwargs)

    def predict(self, x, *args, **kwargs):
        # Keras's own "cardinality" message fails on a dict of arrays.
        if isinstance(x, dict):
            check_same_batch_size(self._named_inputs(x))
        return super().predict(x, *args, **kwargs)

    def call(self, inputs, training=None, mask=None):
        # Also here: JAX's `predict`/`fit` call `call`, not `__call__`.
        if isinstance(inputs, dict):
            check_same_batch_size(inputs)
        empty = self._empty_result(inputs)
        if empty is not None:
            return empty
        return super().call(inputs, training=training, mask=mask)

    def _named_inputs(self, inputs):
        """`inputs` as a dict from input name to array; names checked."""
        names = [tensor.name for tensor in self.inputs]
        if len(names) > 1:
            check_input_names(inputs, names)
            return {name: as_array(inputs[name], name) for name in names}
        if isinstance(inputs, dict):
            check_input_names(inputs, names)
            inputs = inputs[names[0]]
        return {names[0]: as_array(inputs, names[0])}

    def _check_inputs(self, inputs):
        """The inputs, checked, as arrays in the structure of `self.inputs`."""
        named = self._named_inputs(inputs)
        for name in self.token_inputs:
            check_token_batch(named[name], name, self.vocabulary_size)
            shape = tuple(named[name].shape)
            self._check_positions(shape[1], name, f"{name}.shape={shape}")
        check_same_batch_size(named)
        return named if len(named) > 1 else next(iter(named.values()))

    def _empty_result(self, inputs):
        """Zeros of the output's shape when an input has no element, else None.

        A batch of no examples, or an empty sequence whose positions are
        kept in the output (a decoder's), gives an empty output, the same
        on every backend without running the layers; an empty sequence that
        the model needs (`nonempty_inputs`) raises.
        """
        named = inputs if isinstance(inputs, dict) else {self.inputs[0].name: inputs}
        shapes = {name: tuple(value.shape) for name, value in named.items()}
        if not any(0 in shape for shape in shapes.values()):
            return None
        if all(shape[0] != 0 for shape in shapes.values()):
            for name in self.nonempty_inputs:
                if 0 in shapes[name][1:]:
                    raise ValueError(
                        f"`{name}` must hold at least one position. "
                        f"Received: {name}.shape={shapes[name]}"
                    )
        symbolic = {
            tensor.name: keras.KerasTensor(shapes[tensor.name], tensor.dtype)
            for tensor in self.inputs
        }
        if len(symbolic) == 1:
            symbolic = next(iter(symbolic.values()))
        spec = self.compute_output_spec(symbolic)
        return keras.tree.map_structure(
            lambda output: keras.ops.zeros(output.shape, output.dtype), spec
        )

    # === Config ===

    def get_config(self):
        # `keras.Model`'s config of a subclass with a constructor of its
        # own: `name`, `trainable` and the model's own `dtype`, the global
        # policy, which the layers' policy (quantized layers included)
        # replaces. A subclass adds its constructor's arguments.
        config = super().get_config()
        config["dtype"] = self._dtype_config()
        if getattr(self, "_lora", None):
            config["lora"] = dict(self._lora)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        lora = config.pop("lora", None)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        # Files saved before `attention=` hold its settings flat (and
        # before `flash_attention`, `use_fused_attention`).
        config = migrate_model_config(config)
        model = cls(**config)
        if lora:
            model.enable_lora(
                lora["rank"],
                target_names=lora["target_names"],
                lora_alpha=lora["lora_alpha"],
            )
        return model
