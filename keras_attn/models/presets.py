"""Named model shapes: plain data, one table per model, one lookup.

The tables are data, in `presets.json` beside this file: for each model's
class name, its presets, each a `"description"` and a `"config"`, the
constructor arguments (the `"config"` of a trained preset's `config.json`).
What comes from the data (`vocabulary_size` from the tokenizer,
`num_classes` from the labels) is left out, except in the published shapes,
which fix their vocabulary (and, for ViT-B/16, the 1,000 ImageNet classes).
`from_preset` takes those as arguments that override the preset.
`ARCHITECTURE_PRESETS` maps each model's class name to its table;
`preset_config` is the one lookup.

Published parameter counts (checked in `tests/zoo/test_zoo_presets.py`):

| preset | paper | published | ours | why they differ |
|---|---|---|---|---|
| `bert_base` | Devlin et al., 2019 | 109,482,240 | 108,890,112 + head | no token-type embeddings (1,536) and no tanh pooler (590,592) |
| `gpt2_small` | Radford et al., 2019 | 124,439,808 | 124,439,808 | the same shapes |
| `vit_base_patch16_224` | Dosovitskiy et al., 2021 | 86,567,656 | 86,567,656 | the same shapes |
"""

import json
from pathlib import Path

PRESETS_FILE = Path(__file__).with_name("presets.json")


def _read_tables(path):
    """`presets.json` -> {class name: {preset name: constructor arguments}}."""
    tables = json.loads(path.read_text(encoding="utf-8"))
    return {
        model: {name: preset["config"] for name, preset in presets.items()}
        for model, presets in tables.items()
    }


# The one registry: model class name -> its table of shapes.
ARCHITECTURE_PRESETS = _read_tables(PRESETS_FILE)

TRANSFORMER_PRESETS = ARCHITECTURE_PRESETS["Transformer"]
"""`Transformer`'s shapes: the paper's Table 3 (`transformer_base`,
`transformer_big`) and small shapes for CPU work (`transformer_tiny`,
`transformer_small`). Pass `vocabulary_size` to `from_preset`."""

ENCODER_CLASSIFIER_PRESETS = ARCHITECTURE_PRESETS["TransformerEncoderClassifier"]
"""`TransformerEncoderClassifier`'s shapes: BERT-base (`bert_base`) and
small shapes for CPU work (`encoder_classifier_tiny`,
`encoder_classifier_small`). Pass `vocabulary_size` (`bert_base` fixes
its own) and `num_classes` to `from_preset`."""

LM_PRESETS = ARCHITECTURE_PRESETS["TransformerLM"]
"""`TransformerLM`'s shapes: the 124M GPT-2 (`gpt2_small`) and small
shapes for CPU work (`lm_tiny`, `lm_small`, and `lm_modern_small`: rotary
positions, grouped-query attention, RMSNorm, SwiGLU). Pass
`vocabulary_size` (`gpt2_small` fixes its own) to `from_preset`."""

VIT_PRESETS = ARCHITECTURE_PRESETS["VisionTransformer"]
"""`VisionTransformer`'s shapes: ViT-B/16 (`vit_base_patch16_224`) and
small shapes on 8x8 images (`vit_tiny`, `vit_digits`). Pass `num_classes`
to `from_preset` (ViT-B/16 has ImageNet's 1,000 unless overridden)."""


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
