"""The Vision Transformer (ViT): image patches as tokens of an encoder."""

import numbers

import keras
from keras import ops

from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.position_embedding import PositionEmbedding
from keras_attn.layers.sequence_pooling import SequencePooling
from keras_attn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.models.model_features import ModelFeaturesMixin
from keras_attn.models.preset_io import PresetMixin
from keras_attn.models.zoo_presets import VIT_PRESETS
from keras_attn.validation import (
    check_divisible,
    check_dropout_rate,
    check_positive_int,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class ClassToken(keras.layers.Layer):
    """Prepends one learned vector (ViT's `[class]` token) to a sequence.

    Args:
        initializer: initializer of the token. Defaults to `"zeros"` (as in
            the ViT reference code).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, length, dim)`.

    Returns:
        `(batch, length + 1, dim)`, the class token at position 0.
    """

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape):
        dim = check_positive_int(inputs_shape[-1], "inputs.shape[-1]")
        self.token = self.add_weight(
            name="token", shape=(1, 1, dim), initializer=self.initializer
        )
        self.built = True

    def call(self, inputs):
        batch_size, dim = ops.shape(inputs)[0], ops.shape(inputs)[-1]
        # (1, 1, dim) -> (batch, 1, dim)
        token = ops.broadcast_to(
            ops.cast(self.token, inputs.dtype), (batch_size, 1, dim)
        )
        return ops.concatenate([token, inputs], axis=1)  # (batch, length + 1, dim)

    def compute_output_shape(self, inputs_shape):
        length = None if inputs_shape[1] is None else inputs_shape[1] + 1
        return (inputs_shape[0], length, inputs_shape[2])

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config


def _image_size(image_size):
    """An int or a pair of ints -> `(height, width)`."""
    sizes = (
        (image_size, image_size)
        if isinstance(image_size, numbers.Integral)
        else tuple(image_size)
    )
    if len(sizes) != 2:
        raise ValueError(
            "`image_size` must be an int or a (height, width) pair. "
            f"Received: image_size={image_size!r}"
        )
    for size in sizes:
        check_positive_int(size, "image_size")
    return tuple(int(size) for size in sizes)


@keras.saving.register_keras_serializable(package="keras_attn")
class VisionTransformer(PresetMixin, ModelFeaturesMixin, keras.Model):
    """The Vision Transformer: an encoder over image patches.

    The image is cut into non-overlapping `patch_size x patch_size` patches,
    each linearly projected to `hidden_dim` (a `Conv2D` with kernel and
    stride `patch_size`, the same map as flatten-then-`Dense`). A learned
    class token is prepended, learned position embeddings are added, and a
    stack of pre-norm `TransformerEncoderBlock`s with GELU feed-forward
    networks follows. The class token's final features, layer-normalised,
    go to a `Dense(num_classes)` head (equations 1-4 of the paper).

    Args:
        num_classes: int, number of labels.
        image_size: int or `(height, width)`, divisible by `patch_size`.
            Defaults to `224`.
        patch_size: int. Defaults to `16`.
        num_channels: int. Defaults to `3`.
        num_layers: int. Defaults to `12`.
        hidden_dim: int. Defaults to `768`.
        num_heads: int. Defaults to `12`.
        intermediate_dim: int, the MLP size. Defaults to `3072`.
        dropout: float, after the position embedding and on sub-layer
            outputs. Defaults to `0.0`.
        attention_dropout: float. Defaults to `0.0`.
        activation: MLP activation. Defaults to `"gelu"`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        use_fused_attention: bool. Defaults to `True`.
        dtype: dtype or `keras.DTypePolicy`. Defaults to `None`, meaning
            the global policy.
        **kwargs: base `keras.Model` arguments (`name`, ...).

    Call arguments:
        images: float tensor `(batch, height, width, num_channels)`,
            already scaled (the model does no rescaling).

    Returns:
        Logits `(batch, num_classes)`.

    Example:

    >>> model = keras_attn.models.VisionTransformer.from_preset(
    ...     "vit_tiny", num_classes=10)
    >>> tuple(model(keras.ops.zeros((2, 8, 8, 1))).shape)
    (2, 10)

    References:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", ICLR 2021.
    """

    presets = VIT_PRESETS
    preset_arguments = ("num_classes",)

    def __init__(
        self,
        num_classes,
        image_size=224,
        patch_size=16,
        num_channels=3,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.0,
        attention_dropout=0.0,
        activation="gelu",
        layer_norm_epsilon=1e-6,
        use_fused_attention=True,
        dtype=None,
        **kwargs,
    ):
        check_positive_int(num_classes, "num_classes")
        height, width = _image_size(image_size)
        check_positive_int(patch_size, "patch_size")
        if height % patch_size or width % patch_size:
            raise ValueError(
                "`image_size` must be divisible by `patch_size`. Received: "
                f"image_size={image_size!r}, patch_size={patch_size}"
            )
        check_positive_int(num_channels, "num_channels")
        check_positive_int(num_layers, "num_layers")
        check_positive_int(hidden_dim, "hidden_dim")
        check_positive_int(num_heads, "num_heads")
        check_divisible(hidden_dim, num_heads, "hidden_dim", "num_heads")
        check_dropout_rate(dropout, "dropout")
        num_patches = (height // patch_size) * (width // patch_size)

        # === Layers ===
        patch_embedding = keras.layers.Conv2D(
            hidden_dim,
            kernel_size=patch_size,
            strides=patch_size,
            padding="valid",
            data_format="channels_last",
            dtype=dtype,
            name="patch_embedding",
        )
        # (batch, height / patch_size, width / patch_size, hidden_dim)
        # -> (batch, num_patches, hidden_dim)
        patch_sequence = keras.layers.Reshape(
            (num_patches, hidden_dim), dtype=dtype, name="patch_sequence"
        )
        class_token = ClassToken(dtype=dtype, name="class_token")
        position_embedding = PositionEmbedding(
            num_patches + 1,
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=dtype,
            name="position_embedding",
        )
        add_position_embedding = keras.layers.Add(
            dtype=dtype, name="add_position_embedding"
        )
        embedding_dropout = FastDropout(dropout, dtype=dtype, name="embedding_dropout")
        blocks = [
            TransformerEncoderBlock(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                attention_dropout=attention_dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                normalize_first=True,
                use_fused_attention=use_fused_attention,
                dtype=dtype,
                name=f"encoder_block_{i}",
            )
            for i in range(num_layers)
        ]
        output_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="output_norm"
        )
        # The class token's final features: the image representation `y`.
        class_token_output = SequencePooling(
            "cls", dtype=dtype, name="class_token_output"
        )
        head = keras.layers.Dense(num_classes, dtype=dtype, name="logits")

        # === Functional Model ===
        images = keras.Input(shape=(height, width, num_channels), name="images")
        # (batch, height / patch_size, width / patch_size, hidden_dim)
        patches = patch_embedding(images)
        # (batch, num_patches, hidden_dim)
        x = patch_sequence(patches)
        x = class_token(x)  # (batch, num_patches + 1, hidden_dim)
        x = embedding_dropout(add_position_embedding([x, position_embedding(x)]))
        for block in blocks:
            x = block(x)
        x = output_norm(x)
        logits = head(class_token_output(x))  # (batch, num_classes)
        super().__init__(inputs=images, outputs=logits, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.image_size = (height, width)
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_fused_attention = use_fused_attention
        self.num_patches = num_patches
        # The layers' policy (a functional model's own `dtype_policy` is
        # always the global one, so `get_config` cannot use it).
        self._layers_dtype_policy = keras.dtype_policies.get(
            dtype if dtype is not None else keras.config.dtype_policy()
        )

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "num_classes": self.num_classes,
            "image_size": list(self.image_size),
            "patch_size": self.patch_size,
            "num_channels": self.num_channels,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_fused_attention": self.use_fused_attention,
        }
        return self._features_config(config)

    @classmethod
    def from_config(cls, config):
        return cls._from_features_config(config)
