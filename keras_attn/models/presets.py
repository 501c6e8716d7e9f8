"""Named model shapes: plain data, one table per model, one lookup.

A preset holds the constructor arguments of its model; what comes from the
data (`vocabulary_size` from the tokenizer, `num_classes` from the labels)
is left out, except in the published shapes, which fix their vocabulary
(and, for ViT-B/16, the 1,000 ImageNet classes). `from_preset` takes those
as arguments that override the preset. `ARCHITECTURE_PRESETS` maps each
model's class name to its table; `preset_config` is the one lookup.

Published parameter counts (checked in `tests/zoo/test_zoo_presets.py`):

| preset | paper | published | ours | why they differ |
|---|---|---|---|---|
| `bert_base` | Devlin et al., 2019 | 109,482,240 | 108,890,112 + head | no token-type embeddings (1,536) and no tanh pooler (590,592) |
| `gpt2_small` | Radford et al., 2019 | 124,439,808 | 124,439,808 | the same shapes |
| `vit_base_patch16_224` | Dosovitskiy et al., 2021 | 86,567,656 | 86,567,656 | the same shapes |
"""

# Every model's CPU-test shape: seconds per fit.
_TINY_SHAPE = dict(
    num_layers=2,
    hidden_dim=32,
    num_heads=2,
    intermediate_dim=64,
    dropout=0.0,
    max_sequence_length=64,
)

# `Transformer`: the paper's Table 3 ("base" and "big") plus small shapes
# for CPU work. Pass `vocabulary_size` to `from_preset`.
TRANSFORMER_PRESETS = {
    "transformer_tiny": dict(_TINY_SHAPE),
    "transformer_small": dict(
        num_layers=3,
        hidden_dim=256,
        num_heads=8,
        intermediate_dim=1024,
        dropout=0.1,
        max_sequence_length=256,
    ),
    "transformer_base": dict(
        num_layers=6,
        hidden_dim=512,
        num_heads=8,
        intermediate_dim=2048,
        dropout=0.1,
        max_sequence_length=256,
    ),
    "transformer_big": dict(
        num_layers=6,
        hidden_dim=1024,
        num_heads=16,
        intermediate_dim=4096,
        dropout=0.3,
        max_sequence_length=256,
    ),
}

# `TransformerEncoderClassifier` (BERT-style). Pass `vocabulary_size` and
# `num_classes` to `from_preset`.
ENCODER_CLASSIFIER_PRESETS = {
    # Tests: seconds per fit on a CPU.
    "encoder_classifier_tiny": dict(_TINY_SHAPE),
    # The text-classification recipe on 2 CPU cores.
    "encoder_classifier_small": dict(
        num_layers=2,
        hidden_dim=128,
        num_heads=4,
        intermediate_dim=512,
        dropout=0.1,
        max_sequence_length=256,
    ),
    # Devlin et al., 2019, BERT_BASE: L=12, H=768, A=12, 4H feed-forward,
    # WordPiece vocabulary of 30,522, 512 learned positions, post-norm with a
    # layer norm on the embeddings, GELU.
    "bert_base": dict(
        vocabulary_size=30522,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        max_sequence_length=512,
        position="learned",
        normalize_first=False,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        pooling="cls",
    ),
}

# `TransformerLM` (GPT-style). Pass `vocabulary_size` to `from_preset`.
LM_PRESETS = {
    "lm_tiny": dict(_TINY_SHAPE),
    # The Multi30k language-model recipe on 2 CPU cores.
    "lm_small": dict(
        num_layers=2,
        hidden_dim=128,
        num_heads=4,
        intermediate_dim=512,
        dropout=0.1,
        max_sequence_length=64,
    ),
    # `lm_small`'s size class with the choices of today's open LMs (Llama,
    # Mistral): rotary positions, grouped-query attention (4 query heads
    # share 2 key/value heads), RMSNorm, a SwiGLU feed-forward network and
    # no biases. `intermediate_dim` spends what those save on the
    # feed-forward network, for the same parameter count as `lm_small`
    # (vocabulary 2,000, max_sequence_length 32): 256,000 tied embeddings,
    # two layers of 49,152 attention + 392 * 384 = 150,528 feed-forward +
    # 256 RMSNorm = 199,936, and the final RMSNorm's 128: 656,000, 0.14%
    # below `lm_small`'s 656,896 (392 = 8 * 49; 393 would be 0.02% below).
    "lm_modern_small": dict(
        num_layers=2,
        hidden_dim=128,
        num_heads=4,
        intermediate_dim=392,
        dropout=0.1,
        max_sequence_length=64,
        position="rotary",
        attention=dict(num_key_value_heads=2),
        normalization="rms",
        activation="swiglu",
        use_bias=False,
        normalize_first=True,
    ),
    # Radford et al., 2019, the 124M GPT-2: 12 layers, d_model 768, 12 heads,
    # byte-level BPE vocabulary of 50,257, 1,024 learned positions, pre-norm,
    # a final layer norm, output projection tied to the token embedding.
    "gpt2_small": dict(
        vocabulary_size=50257,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        max_sequence_length=1024,
        position="learned",
        normalize_first=True,
        tie_embeddings=True,
        activation="gelu",
        layer_norm_epsilon=1e-5,
    ),
}

# `VisionTransformer`. Pass `num_classes` to `from_preset` (ViT-B/16 has
# ImageNet's 1,000 unless overridden).
VIT_PRESETS = {
    "vit_tiny": dict(
        image_size=8,
        patch_size=2,
        num_channels=1,
        num_layers=2,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
    ),
    # The 8x8 digits recipe on 2 CPU cores: 16 patches of 2x2 pixels.
    "vit_digits": dict(
        image_size=8,
        patch_size=2,
        num_channels=1,
        num_layers=4,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        dropout=0.0,
    ),
    # Dosovitskiy et al., 2021, ViT-B/16 (Table 1): 12 layers, hidden 768,
    # MLP 3072, 12 heads, 224x224 RGB images cut into 16x16 patches.
    "vit_base_patch16_224": dict(
        num_classes=1000,
        image_size=224,
        patch_size=16,
        num_channels=3,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
    ),
}

# The one registry: model class name -> its table of shapes.
ARCHITECTURE_PRESETS = {
    "Transformer": TRANSFORMER_PRESETS,
    "TransformerEncoderClassifier": ENCODER_CLASSIFIER_PRESETS,
    "TransformerLM": LM_PRESETS,
    "VisionTransformer": VIT_PRESETS,
}


def preset_config(presets, preset, required=(), **given):
    """The arguments of `presets[preset]` updated with `given`.

    Args:
        presets: a table of shapes (e.g. `TRANSFORMER_PRESETS`).
        preset: str, a name in `presets`.
        required: names of arguments that either the preset or the caller
            must supply (`vocabulary_size`, `num_classes`). Defaults to
            `()`.
        **given: arguments that replace the preset's (see
            `with_overrides`); `None` values are ignored.

    Returns:
        A new dict of constructor arguments.

    Raises:
        ValueError: `preset` is unknown (the error lists the known names),
            or a `required` argument is missing (the error names it).
    """
    if preset not in presets:
        raise ValueError(
            f"Unknown preset. Received: preset={preset!r}. Known presets: "
            f"{', '.join(sorted(presets))}"
        )
    config = with_overrides(
        presets[preset],
        {name: value for name, value in given.items() if value is not None},
    )
    for name in required:
        if config.get(name) is None:
            raise ValueError(
                f"`{name}` is required: preset {preset!r} does not fix it. "
                f"Received: {name}=None"
            )
    return config


def with_overrides(config, overrides):
    """A copy of `config` (constructor arguments) updated with `overrides`.

    An override replaces the argument, except that a dict given for an
    argument that is a dict updates it: `attention={"flash_attention":
    False}` keeps the preset's other attention settings (its key/value
    heads, which its weights need). An `AttentionSettings` replaces them
    all.

    Args:
        config: dict, a preset's (or a saved model's) constructor arguments.
        overrides: dict, arguments given by the caller.

    Returns:
        A new dict; `config` is not changed.
    """
    config = dict(config)
    for name, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(name), dict):
            value = {**config[name], **value}
        config[name] = value
    return config
