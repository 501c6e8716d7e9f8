"""Configs saved by earlier keras-attn versions, read under today's names.

Files written before `flash_attention` hold `use_fused_attention`, an
attention layer may have been saved with `output_dim`, and a Transformer
block saved before `AttentionSettings` holds its attention arguments flat.
Those are no longer arguments; `migrate_attention_config` renames them
(`MultiHeadAttention`, the models) and `migrate_block_config` also nests a
block's flat attention arguments, so an old `.keras` file or preset loads
unchanged and without a warning (the file is not the user's code to fix).
"""

from keras_attn.validation import check_bool


def migrate_attention_config(config):
    """A copy of `config` with the attention arguments of older files renamed.

    - `use_fused_attention` becomes `flash_attention`: `True` is `None`
      (the fused kernel whenever it can run), `False` is `False`;
    - `output_dim` (an int) becomes `output_shape`.

    A config holding both an old name and its replacement keeps the
    replacement (the newer name wins) and drops the old one.

    Args:
        config: dict, a layer's or model's config.

    Returns:
        A new dict; `config` is not changed.

    Example:

    >>> from keras_attn.layers.legacy_config import migrate_attention_config
    >>> migrate_attention_config({"num_heads": 2, "use_fused_attention": False})
    {'num_heads': 2, 'flash_attention': False}
    """
    config = dict(config)
    if "use_fused_attention" in config:
        use_fused_attention = check_bool(
            config.pop("use_fused_attention"), "use_fused_attention", allow_none=True
        )
        if "flash_attention" not in config and use_fused_attention is not None:
            config["flash_attention"] = None if use_fused_attention else False
    if "output_dim" in config:
        output_dim = config.pop("output_dim")
        if config.get("output_shape") is None and output_dim is not None:
            config["output_shape"] = output_dim
    return config


_FLAT_ATTENTION_ARGUMENTS = {
    "attention_dropout": "dropout",
    "flash_attention": "flash_attention",
    "num_key_value_heads": "num_key_value_heads",
    "qk_norm": "qk_norm",
    "rotary_max_wavelength": "rotary_max_wavelength",
    "rotary_scaling_factor": "rotary_scaling_factor",
    "rotary_dim": "rotary_dim",
}


def migrate_block_config(config):
    """`migrate_attention_config` of a Transformer block's config, with its
    flat attention arguments nested as `attention`.

    Blocks saved before `AttentionSettings` hold `attention_dropout`,
    `flash_attention`, `num_key_value_heads`, `qk_norm` and `rotary_*`
    beside the block's own arguments; they become the `attention` dict.
    """
    config = migrate_attention_config(config)
    flat = {
        setting: config.pop(argument)
        for argument, setting in _FLAT_ATTENTION_ARGUMENTS.items()
        if argument in config
    }
    if flat and "attention" not in config:
        # `attention_dropout` was always written; `dropout` is its default.
        flat.setdefault("dropout", config.get("dropout", 0.0))
        config["attention"] = flat
    return config
