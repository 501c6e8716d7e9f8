"""Configs saved by earlier keras-attn versions, read under today's names.

Files written before `flash_attention` hold `use_fused_attention`, an
attention layer may have been saved with `output_dim`, and Transformer
blocks and models saved before `AttentionSettings` hold their attention
arguments flat. Those are no longer arguments; `migrate_attention_config`
renames them (`MultiHeadAttention`), and `migrate_block_config` and
`migrate_model_config` also nest a block's or a model's flat attention
arguments as `attention`, so an old `.keras` file or preset loads
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


def flat_attention_setting(argument):
    """The `AttentionSettings` field that a flat attention argument of an
    older block or model config became (`"attention_dropout"` ->
    `"dropout"`), or `None` for any other name."""
    return _FLAT_ATTENTION_ARGUMENTS.get(argument)


def _nest_flat_attention(config, dropout):
    """`config` with its flat attention arguments moved into `attention`.

    `dropout` is the attention dropout a config that holds none meant. A
    config that already holds `attention` is left as it is: a flat argument
    beside it is no older file's, and the constructor refuses it by name.
    """
    flat = [argument for argument in _FLAT_ATTENTION_ARGUMENTS if argument in config]
    if not flat or "attention" in config:
        return config
    attention = {_FLAT_ATTENTION_ARGUMENTS[name]: config.pop(name) for name in flat}
    attention.setdefault("dropout", dropout)
    config["attention"] = attention
    return config


def migrate_block_config(config):
    """`migrate_attention_config` of a Transformer block's config, with its
    flat attention arguments nested as `attention`.

    Blocks saved before `AttentionSettings` hold `attention_dropout`,
    `flash_attention`, `num_key_value_heads`, `qk_norm` and `rotary_*`
    beside the block's own arguments; they become the `attention` dict (a
    block's attention dropout defaults to its `dropout`, as keras-hub's).
    """
    config = migrate_attention_config(config)
    return _nest_flat_attention(config, config.get("dropout", 0.0))


def migrate_model_config(config):
    """`migrate_attention_config` of a zoo model's config, with its flat
    attention arguments nested as `attention`.

    Models (`Transformer`, `TransformerLM`, `TransformerEncoderClassifier`,
    `VisionTransformer`) saved before they took `attention=` hold
    `attention_dropout`, `flash_attention`, `num_key_value_heads` and
    `qk_norm` flat (or `use_fused_attention`); they become the `attention`
    dict, read as `keras_attn.layers.AttentionSettings`. A model's attention
    dropout defaults to `0.0`. Returns a new dict (`config` is not changed):

    >>> from keras_attn.layers.legacy_config import migrate_model_config
    >>> migrate_model_config({"num_layers": 2, "attention_dropout": 0.1,
    ...                       "num_key_value_heads": 2})
    {'num_layers': 2, 'attention': {'dropout': 0.1, 'num_key_value_heads': 2}}
    """
    return _nest_flat_attention(migrate_attention_config(config), 0.0)
