"""`ZooModel`, the base class of the four functional models.

What `Transformer`, `TransformerLM`, `TransformerEncoderClassifier` and
`VisionTransformer` share is written here once, in the way keras-hub's
`Backbone` does it:

- the constructor arguments, each checked by `keras_attn.validation`
  through one table (`ARGUMENT_CHECKS`: an argument's name says its kind,
  the same in every model), stored as attributes of the same name and
  returned by `get_config`;
- the dtype policy of the layers (a functional model's own `dtype_policy`
  is always the global one), serialized by `get_config` with any quantized
  layers (`ModelFeaturesMixin`) and restored by `from_config`;
- presets (`PresetMixin`), LoRA and quantization (`ModelFeaturesMixin`);
- the checks of a call's inputs (names, ranks, token ids) and empty
  batches, which give an empty result on every backend;
- the sub-layers every model builds the same way (`transformer_blocks`,
  `token_embedding`, ...), so their names, and so the weights' names and
  order, are those of the saved presets.
"""

import types

import keras

from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.padding_mask import PaddingMask
from keras_attn.layers.sequence_pooling import POOLINGS
from keras_attn.layers.tied_vocabulary_projection import TiedVocabularyProjection
from keras_attn.layers.token_and_position_embedding import (
    POSITION_KINDS,
    TokenAndPositionEmbedding,
)
from keras_attn.layers.vocabulary_projection import VocabularyProjection
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
    check_divisible,
    check_float_dtype,
    check_positive_float,
    check_positive_int,
    check_rate,
    check_token_id,
)


def check_activation(value, name):
    """A Keras activation name, serialized activation or callable."""
    try:
        keras.activations.get(value)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"`{name}` must name a Keras activation (e.g. 'relu', 'gelu') or "
            f"be a callable. Received: {name}={value!r:.100} ({error})"
        ) from error
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


def _optional_positive_int(value, name):
    return check_positive_int(value, name, allow_none=True)


def _choice(choices):
    return lambda value, name: check_choice(value, name, choices)


# The check of each constructor argument, by name: a name means the same
# kind of value in every model of the zoo.
ARGUMENT_CHECKS = {
    "vocabulary_size": check_positive_int,
    "num_classes": check_positive_int,
    "num_layers": check_positive_int,
    "num_encoder_layers": _optional_positive_int,
    "num_decoder_layers": _optional_positive_int,
    "hidden_dim": check_positive_int,
    "num_heads": check_positive_int,
    "intermediate_dim": check_positive_int,
    "max_sequence_length": check_positive_int,
    "image_size": check_image_size,
    "patch_size": check_positive_int,
    "num_channels": check_positive_int,
    "dropout": check_rate,
    "attention_dropout": check_rate,
    "layer_norm_epsilon": check_positive_float,
    "normalize_first": check_bool,
    "tie_embeddings": check_bool,
    "use_fused_attention": check_bool,
    "position": _choice(POSITION_KINDS),
    "pooling": _choice(POOLINGS),
    "activation": check_activation,
}
# Read from the caller's `locals()`, not constructor arguments.
_NOT_ARGUMENTS = ("self", "dtype", "kwargs")


def checked_arguments(local_variables):
    """A model's constructor arguments, checked and in canonical types.

    Call it first thing in `__init__` with `locals()`: every parameter but
    `dtype` and `**kwargs` is checked through `ARGUMENT_CHECKS`, then the
    checks that relate two arguments (`pad_id` in the vocabulary,
    `hidden_dim` divisible by `num_heads`).

    Args:
        local_variables: dict, the constructor's `locals()`.

    Returns:
        A `types.SimpleNamespace` of the checked arguments, in the order of
        the constructor's signature.
    """
    check_float_dtype(local_variables.get("dtype"), "dtype")
    arguments = {
        name: value
        for name, value in local_variables.items()
        if name not in _NOT_ARGUMENTS and not name.startswith("__")
    }
    checked = {
        name: value if name == "pad_id" else ARGUMENT_CHECKS[name](value, name)
        for name, value in arguments.items()
    }
    if "pad_id" in checked:
        checked["pad_id"] = check_token_id(
            checked["pad_id"], "pad_id", checked["vocabulary_size"]
        )
    check_divisible(
        checked["hidden_dim"], checked["num_heads"], "hidden_dim", "num_heads"
    )
    if checked.get("position") == "sinusoidal" and checked["hidden_dim"] % 2:
        raise ValueError(
            "`hidden_dim` must be even with sinusoidal positions (sine and "
            f"cosine pairs). Received: hidden_dim={checked['hidden_dim']}, "
            "position='sinusoidal'"
        )
    return types.SimpleNamespace(**checked)


# === Sub-layers that every model builds the same way ===


def transformer_blocks(block_class, count, prefix, arguments, dtype, **overrides):
    """`count` blocks named `f"{prefix}_{i}"`, configured from `arguments`."""
    block_arguments = dict(
        num_heads=arguments.num_heads,
        intermediate_dim=arguments.intermediate_dim,
        dropout=arguments.dropout,
        attention_dropout=arguments.attention_dropout,
        activation=arguments.activation,
        layer_norm_epsilon=arguments.layer_norm_epsilon,
        use_fused_attention=arguments.use_fused_attention,
        dtype=dtype,
    )
    block_arguments["normalize_first"] = overrides.pop(
        "normalize_first", getattr(arguments, "normalize_first", None)
    )
    return [
        block_class(**block_arguments, **overrides, name=f"{prefix}_{i}")
        for i in range(count)
    ]


def layer_norm(arguments, dtype, name):
    # Keras's own class, not `LayerNorm`: a functional model's weights file
    # names each layer's weights after its class (`layer_normalization`), so
    # the shipped presets' model-level norms load only into this class.
    return keras.layers.LayerNormalization(
        epsilon=arguments.layer_norm_epsilon, dtype=dtype, name=name
    )


def token_embedding(arguments, dtype, name):
    """The `TokenAndPositionEmbedding` of a token model."""
    return TokenAndPositionEmbedding(
        arguments.vocabulary_size,
        arguments.max_sequence_length,
        arguments.hidden_dim,
        position=arguments.position,
        dtype=dtype,
        name=name,
    )


def dropout_layer(arguments, dtype, name="embedding_dropout"):
    return FastDropout(arguments.dropout, dtype=dtype, name=name)


def padding_mask(arguments, name="padding_mask"):
    return PaddingMask(arguments.pad_id, name=name)


def vocabulary_logits(arguments, embedding, dtype):
    """The pre-softmax projection: the embedding's table transposed (tied,
    section 3.4 of the paper) or a `Dense` of its own."""
    if arguments.tie_embeddings:
        return TiedVocabularyProjection(embedding, dtype=dtype, name="logits")
    return VocabularyProjection(arguments.vocabulary_size, dtype=dtype, name="logits")


@keras.saving.register_keras_serializable(package="keras_attn")
class ZooModel(PresetMixin, ModelFeaturesMixin, keras.Model):
    """The base class of the functional models of `keras_attn.models`.

    A subclass checks its arguments with `checked_arguments(locals())`,
    builds its layers and its functional graph, then calls
    `super().__init__(inputs, outputs, arguments, dtype=dtype, **kwargs)`.
    `ZooModel` stores each argument as an attribute of the same name;
    `get_config` returns them with the layers' dtype policy, and
    `from_config` calls the subclass's constructor with them.

    Class attributes a subclass sets:

    - `presets`, `preset_arguments`: see `PresetMixin`.
    - `token_inputs`: names of the inputs that hold token ids, checked on
      every call (rank, dtype, values in the vocabulary when eager).
    - `nonempty_inputs`: inputs that must hold at least one position (an
      encoder whose output is pooled or attended to); an empty one raises
      `ValueError`. Other zero-size inputs give an empty result.

    Args:
        inputs: the functional model's inputs (a `keras.Input` or a dict).
        outputs: its outputs.
        arguments: the `types.SimpleNamespace` of `checked_arguments`.
        dtype: dtype or `keras.DTypePolicy` the layers were built with.
            Defaults to `None`, meaning the global policy.
        **kwargs: base `keras.Model` arguments (`name`, `trainable`).
    """

    token_inputs = ()
    nonempty_inputs = ()

    def __init__(self, inputs, outputs, arguments, dtype=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self._argument_names = tuple(vars(arguments))
        for name, value in vars(arguments).items():
            setattr(self, name, value)
        # The layers' policy (a functional model's own `dtype_policy` is
        # always the global one, so `get_config` cannot use it).
        self._layers_dtype_policy = keras.dtype_policies.get(
            dtype if dtype is not None else keras.config.dtype_policy()
        )

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
            self._check_length(named[name], name)
        check_same_batch_size(named)
        return named if len(named) > 1 else next(iter(named.values()))

    def _check_length(self, tokens, name):
        """Learned positions end at `max_sequence_length`."""
        length = tokens.shape[1]
        # A symbolic length (`None`, or JAX export's shape polymorphism,
        # where `a > 64` is undecidable) is checked by the exported graph.
        if not isinstance(length, int):
            return
        if self.position == "learned" and length > self.max_sequence_length:
            raise ValueError(
                f"`{name}` is longer than max_sequence_length="
                f"{self.max_sequence_length}, the number of learned positions. "
                f"Received: {name}.shape={tuple(tokens.shape)}"
            )

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
        # replaces. Then the constructor's arguments.
        config = super().get_config()
        config["dtype"] = self._dtype_config()
        config.update({name: getattr(self, name) for name in self._argument_names})
        if getattr(self, "_lora", None):
            config["lora"] = dict(self._lora)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        lora = config.pop("lora", None)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        model = cls(**config)
        if lora:
            model.enable_lora(
                lora["rank"],
                target_names=lora["target_names"],
                lora_alpha=lora["lora_alpha"],
            )
        return model
