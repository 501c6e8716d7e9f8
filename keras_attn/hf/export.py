"""`export_to_transformers`: our models as Hugging Face checkpoints.

One public function dispatches to the family module that writes the
checkpoint (`keras_attn.hf.files.family`): a `Transformer` is written as a
Marian (`MarianMTModel`) checkpoint by `keras_attn.hf.marian`, a
`TransformerLM` as a Llama-family one by `keras_attn.hf.llama`, a
`TransformerEncoderClassifier` as a BERT one (`BertForSequenceClassification`)
by `keras_attn.hf.bert`; `model_type="t5"` writes a `Transformer` with T5's
options as T5 (`keras_attn.hf.t5`). Each family
refuses, naming the option, a model it cannot express exactly.
"""

from pathlib import Path

from keras_attn.hf.files import family

# A model class's family when `model_type` is not given.
_MODEL_TYPE_OF_CLASS = {
    "Transformer": "marian",
    "TransformerLM": "llama",
    "TransformerEncoderClassifier": "bert",
}


def export_to_transformers(model, tokenizer, directory, model_type=None):
    """Writes `model` (and its tokenizer) as a Hugging Face checkpoint.

    The directory then holds `config.json`, `model.safetensors` and the
    tokenizer's files, which `transformers`' `from_pretrained` loads into a
    model that gives the same logits (for a Marian checkpoint of a model
    loaded from one, `logits[..., 1:]`: see `keras_attn.hf.marian`).

    Args:
        model: a `keras_attn.models.Transformer` (written as Marian), a
            `keras_attn.models.TransformerLM` (written as Llama, or as
            `model_type`) or a `keras_attn.models.TransformerEncoderClassifier`
            (written as BERT).
        tokenizer: the model's tokenizer (a
            `keras_attn.text.SubwordTokenizer`, or the tokenizer loaded
            with the checkpoint), or `None` to write the model alone.
        directory: a `str` or `pathlib.Path`; created if missing.
        model_type: the `model_type` to write (`"marian"`, `"t5"`,
            `"llama"`, `"mistral"`, `"qwen2"`, `"bert"`). Defaults to `None`, meaning
            the model class's family (`"marian"` for a `Transformer`,
            `"llama"` for a `TransformerLM`, `"bert"` for a
            `TransformerEncoderClassifier`).

    Returns:
        The directory, a `pathlib.Path`.

    Raises:
        ValueError: the model has an option the family cannot express (the
            error names it), or `model_type` is not a registered family.

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=100, layer_norm_epsilon=1e-5)
    >>> keras_attn.hf.export_to_transformers(model, None, "/tmp/marian_tiny")
    PosixPath('/tmp/marian_tiny')
    """
    if model_type is None:
        class_name = type(model).__name__
        if class_name not in _MODEL_TYPE_OF_CLASS:
            raise TypeError(
                "`model` must be a keras_attn.models.Transformer, "
                "TransformerLM or TransformerEncoderClassifier. Received: "
                f"model of type {class_name}"
            )
        model_type = _MODEL_TYPE_OF_CLASS[class_name]
    module = family(model_type)
    if not hasattr(module, "export"):
        raise ValueError(
            f"keras-attn cannot export model_type={model_type!r} (its mapping "
            "loads checkpoints only)."
        )
    directory = Path(directory)
    if getattr(module, "EXPORT_WITH_TOKENIZER", False):
        # The family's ids depend on the tokenizer (Marian's).
        module.export(model, directory, tokenizer=tokenizer)
        return directory
    if len(getattr(module, "MODEL_TYPES", ())) > 1:
        module.export(model, directory, model_type=model_type)
    else:
        module.export(model, directory)
    if tokenizer is not None:
        if not hasattr(module, "export_tokenizer"):
            raise ValueError(
                f"keras-attn cannot write a tokenizer of model_type={model_type!r} "
                "yet: pass tokenizer=None to write the model alone. Received: "
                f"tokenizer={tokenizer!r:.100}"
            )
        module.export_tokenizer(tokenizer, directory)
    return directory
