"""Loading a Hugging Face checkpoint: find it, read it, hand it to its family.

`load_model` is what `from_preset("hf://owner/name")` (or a local
checkpoint directory) runs on the model classes: the checkpoint's
`model_type` picks the family module (`keras_attn.hf.files.family`), which
maps the config onto our model's options and the tensors onto its weights.
"""

from keras_attn.hf.files import (
    family,
    read_config,
    read_weights,
    resolve_checkpoint,
)


def load_model(source, model_class=None, load_weights=True, **overrides):
    """The model a Hugging Face checkpoint describes, with its weights.

    Args:
        source: `"hf://owner/name[@revision]"` or a checkpoint directory
            (`keras_attn.hf.files.resolve_checkpoint`).
        model_class: the class the caller expects (the class whose
            `from_preset` was called); a checkpoint of another kind is
            refused. Defaults to `None` (any).
        load_weights: bool, whether to load the weights; `False` gives the
            architecture with random weights. Defaults to `True`.
        **overrides: model arguments that replace the mapped ones (`dtype`,
            `pad_id`, `flash_attention`, ...).

    Returns:
        A model of `keras_attn.models`.

    Raises:
        ValueError: an unknown `model_type`, a config field we cannot map,
            a missing or misshapen tensor (each named), or a checkpoint that
            maps to another class than `model_class`.
    """
    directory = resolve_checkpoint(source)
    config = read_config(directory)
    mapping = family(config["model_type"])
    expected = getattr(mapping, "MODEL_CLASS", None)
    if model_class is not None and expected is not None:
        if not issubclass(expected, model_class):
            raise ValueError(
                f"The checkpoint {str(source)!r} (model_type="
                f"{config['model_type']!r}) loads as a {expected.__name__}, not "
                f"a {model_class.__name__}: call {expected.__name__}.from_preset."
            )
    weights = read_weights(directory) if load_weights else None
    return mapping.load_model(directory, config, weights, **overrides)
