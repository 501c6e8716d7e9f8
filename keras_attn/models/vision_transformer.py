"""The Vision Transformer (ViT): image patches as tokens of an encoder."""

import keras

from keras_attn.layers.blocks.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.layers.embeddings.class_token import ClassToken
from keras_attn.layers.heads.sequence_pooling import SequencePooling
from keras_attn.layers.positions.position_schemes import LearnedPositions
from keras_attn.models.presets import VIT_PRESETS
from keras_attn.models.zoo_model import (
    ZooModel,
    check_image_size,
)
from keras_attn.shared_docstrings import shared_docstrings
from keras_attn.validation import (
    check_positive_int,
)

# `ClassToken` lived here until it moved to `keras_attn.layers`.
__all__ = ["ClassToken", "VisionTransformer"]


@keras.saving.register_keras_serializable(package="keras_attn")
@shared_docstrings
class VisionTransformer(ZooModel):
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
            outputs. Defaults to `0.0`. Run by
            `keras_attn.layers.FastDropout` (whose docstring says how it
            rounds the rate).
        activation: MLP activation, a Keras activation or a
            gated one: `"geglu"`, `"swiglu"` or `"reglu"` (Shazeer, 2020).
            Defaults to `"gelu"`.
        layer_norm_epsilon: float, a normal float32 number (at least
            `2**-126`). Defaults to `1e-6`.
        {{zoo_model_arguments}}
        **kwargs: base `keras.Model` arguments (`name`, `trainable`).

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
        activation="gelu",
        layer_norm_epsilon=1e-6,
        dtype=None,
        normalization="layer",
        use_bias=True,
        attention=None,
        **kwargs,
    ):
        # === Config (checked before any layer is built) ===
        # The arguments that models share, checked and stored under their
        # names (`ZooModel._check_model_arguments`); then this model's own.
        self._check_model_arguments(locals())
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.image_size = check_image_size(image_size, "image_size")
        self.patch_size = check_positive_int(patch_size, "patch_size")
        height, width = self.image_size
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(
                "`image_size` must be divisible by `patch_size`. Received: "
                f"image_size={image_size!r}, patch_size={patch_size}"
            )
        self.num_channels = check_positive_int(num_channels, "num_channels")
        self.num_patches = (height // self.patch_size) * (width // self.patch_size)
        # One learned vector per patch and one for the class token.
        self._use_position_scheme(
            LearnedPositions(
                self.num_patches + 1,
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        )

        # === Layers ===
        patch_embedding = keras.layers.Conv2D(
            self.hidden_dim,
            kernel_size=self.patch_size,
            strides=self.patch_size,
            padding="valid",
            data_format="channels_last",
            dtype=dtype,
            name="patch_embedding",
        )
        # (batch, height / patch_size, width / patch_size, hidden_dim)
        # -> (batch, num_patches, hidden_dim)
        patch_sequence = keras.layers.Reshape(
            (self.num_patches, self.hidden_dim), dtype=dtype, name="patch_sequence"
        )
        class_token = ClassToken(dtype=dtype, name="class_token")
        position_embedding = self.position_scheme.position_layer(dtype=dtype)
        add_position_embedding = keras.layers.Add(
            dtype=dtype, name="add_position_embedding"
        )
        embedding_dropout = self._dropout(dtype)
        # ViT's blocks are pre-norm.
        blocks = self._transformer_blocks(
            TransformerEncoderBlock,
            self.num_layers,
            "encoder_block",
            dtype,
            normalize_first=True,
        )
        output_norm = self._normalization(dtype, "output_norm")
        # The class token's final features: the image representation `y`.
        class_token_output = SequencePooling(
            "cls", dtype=dtype, name="class_token_output"
        )
        classification_head = keras.layers.Dense(
            self.num_classes, dtype=dtype, name="logits"
        )

        # === Functional Model: equations 1-4 of the paper ===
        images = keras.Input(shape=(height, width, self.num_channels), name="images")
        # (batch, height / patch_size, width / patch_size, hidden_dim)
        patches = patch_embedding(images)
        x = patch_sequence(patches)  # (batch, num_patches, hidden_dim)
        x = class_token(x)  # (batch, num_patches + 1, hidden_dim)
        x = add_position_embedding([x, position_embedding(x)])
        x = embedding_dropout(x)
        for block in blocks:
            x = block(x)
        x = output_norm(x)
        # (batch, num_classes)
        logits = classification_head(class_token_output(x))
        super().__init__(images, logits, dtype=dtype, **kwargs)

        # The layers as attributes, assigned after the graph so that the
        # weights keep the graph's order (see `ZooModel`).
        self.patch_embedding = patch_embedding
        self.patch_sequence = patch_sequence
        self.class_token = class_token
        self.position_embedding = position_embedding
        self.add_position_embedding = add_position_embedding
        self.embedding_dropout = embedding_dropout
        self.blocks = blocks
        self.output_norm = output_norm
        self.class_token_output = class_token_output
        self.classification_head = classification_head

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "image_size": list(self.image_size),
                "patch_size": self.patch_size,
                "num_channels": self.num_channels,
                **self._transformer_config(),
            }
        )
        return config
