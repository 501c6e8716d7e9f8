"""The Vision Transformer (ViT): image patches as tokens of an encoder."""

import keras

from keras_attn.layers.class_token import ClassToken
from keras_attn.layers.position_embedding import PositionEmbedding
from keras_attn.layers.sequence_pooling import SequencePooling
from keras_attn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.models.presets import VIT_PRESETS
from keras_attn.models.zoo_model import (
    ZooModel,
    checked_arguments,
    dropout_layer,
    layer_norm,
    transformer_blocks,
)

# `ClassToken` lived here until it moved to `keras_attn.layers`.
__all__ = ["ClassToken", "VisionTransformer"]


def _layers(arguments, num_patches, dtype):
    """The named sub-layers of a `VisionTransformer`, in a dict."""
    return {
        "patch_embedding": keras.layers.Conv2D(
            arguments.hidden_dim,
            kernel_size=arguments.patch_size,
            strides=arguments.patch_size,
            padding="valid",
            data_format="channels_last",
            dtype=dtype,
            name="patch_embedding",
        ),
        # (batch, height / patch_size, width / patch_size, hidden_dim)
        # -> (batch, num_patches, hidden_dim)
        "patch_sequence": keras.layers.Reshape(
            (num_patches, arguments.hidden_dim), dtype=dtype, name="patch_sequence"
        ),
        "class_token": ClassToken(dtype=dtype, name="class_token"),
        "position_embedding": PositionEmbedding(
            num_patches + 1,
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=dtype,
            name="position_embedding",
        ),
        "add_position_embedding": keras.layers.Add(
            dtype=dtype, name="add_position_embedding"
        ),
        "embedding_dropout": dropout_layer(arguments, dtype),
        # ViT's blocks are pre-norm.
        "blocks": transformer_blocks(
            TransformerEncoderBlock,
            arguments.num_layers,
            "encoder_block",
            arguments,
            dtype,
            normalize_first=True,
        ),
        "output_norm": layer_norm(arguments, dtype, "output_norm"),
        # The class token's final features: the image representation `y`.
        "class_token_output": SequencePooling(
            "cls", dtype=dtype, name="class_token_output"
        ),
        "head": keras.layers.Dense(arguments.num_classes, dtype=dtype, name="logits"),
    }


def _classify(parts, images):
    """Images `(batch, height, width, channels)` -> logits, equations 1-4."""
    # (batch, height / patch_size, width / patch_size, hidden_dim)
    patches = parts["patch_embedding"](images)
    x = parts["patch_sequence"](patches)  # (batch, num_patches, hidden_dim)
    x = parts["class_token"](x)  # (batch, num_patches + 1, hidden_dim)
    x = parts["add_position_embedding"]([x, parts["position_embedding"](x)])
    x = parts["embedding_dropout"](x)
    for block in parts["blocks"]:
        x = block(x)
    x = parts["output_norm"](x)
    # (batch, num_classes)
    return parts["head"](parts["class_token_output"](x))


@keras.saving.register_keras_serializable(package="keras_attn")
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
            `keras_attn.layers.FastDropout` at a resolution of 1/2048 (0.1 runs
            at 0.10010).
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
        arguments = checked_arguments(locals())
        height, width = arguments.image_size
        if height % arguments.patch_size or width % arguments.patch_size:
            raise ValueError(
                "`image_size` must be divisible by `patch_size`. Received: "
                f"image_size={image_size!r}, patch_size={patch_size}"
            )
        num_patches = (height // arguments.patch_size) * (width // arguments.patch_size)

        # === Layers ===
        parts = _layers(arguments, num_patches, dtype)

        # === Functional Model ===
        images = keras.Input(
            shape=(height, width, arguments.num_channels), name="images"
        )
        logits = _classify(parts, images)
        super().__init__(images, logits, arguments, dtype=dtype, **kwargs)
        self.num_patches = num_patches

    def get_config(self):
        config = super().get_config()
        config["image_size"] = list(self.image_size)
        return config
