"""What the text tasks (`Translator`, `TextGenerator`, `TextClassifier`) share."""

from keras_attn.text.tokenizer import SubwordTokenizer


def check_tokenizer_matches(tokenizer, model):
    """Raises unless `tokenizer` is a tokenizer of the model's vocabulary."""
    if not isinstance(tokenizer, SubwordTokenizer):
        raise TypeError(
            "`tokenizer` must be a `keras_attn.text.SubwordTokenizer`. "
            f"Received: tokenizer={tokenizer!r:.100}"
        )
    if tokenizer.vocabulary_size != model.vocabulary_size:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: tokenizer.vocabulary_size={tokenizer.vocabulary_size}, "
            f"model.vocabulary_size={model.vocabulary_size}"
        )


def load_preset(preset, model_class, dtype):
    """`(directory, model, tokenizer)` of a trained preset of `model_class`."""
    from keras_attn.models.preset_io import preset_directory

    directory = preset_directory(preset, model_class.presets)
    overrides = {} if dtype is None else {"dtype": dtype}
    model = model_class.from_preset(directory, **overrides)
    return directory, model, SubwordTokenizer.from_preset(directory)
