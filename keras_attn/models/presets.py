"""Named model shapes: plain data, one table per model family."""

# The paper's Table 3 ("base" and "big") plus small shapes for CPU work.
# `vocabulary_size` is not part of a preset: it comes from the tokenizer.
TRANSFORMER_PRESETS = {
    "transformer_tiny": dict(
        num_layers=2,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
        max_sequence_length=64,
    ),
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


def get_preset(presets, name):
    """Returns a copy of `presets[name]`; the error lists the known names."""
    if name not in presets:
        raise ValueError(
            f"Unknown preset. Received: preset={name!r}. Known presets: "
            f"{', '.join(sorted(presets))}"
        )
    return dict(presets[name])
