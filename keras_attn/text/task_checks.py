"""What the text tasks (`Translator`, `TextGenerator`, `TextClassifier`) share."""

import collections.abc

import numpy as np

from keras_attn.text.tokenizer import SubwordTokenizer
from keras_attn.validation import check_string_list


def check_texts(value, name):
    """`value` as a list of `str` that UTF-8 can encode.

    A list, tuple or 1-D NumPy array of strings is accepted. Refused with
    `TypeError`: a single string, a 0-d NumPy string array (one string, as
    `np.array("A dog")`; wrap it in a list), a mapping (iterating a dict
    would read its keys as the texts), anything else `check_string_list`
    refuses. Refused with `ValueError`: a string holding a lone surrogate
    (`"\ud800"`, from a bad decode), which no tokenizer can read; the
    message names its index.
    """
    if isinstance(value, collections.abc.Mapping):
        raise TypeError(
            f"`{name}` must be a list of strings, not a mapping (its keys "
            f"would be read as the texts). Received: {name} of type "
            f"{type(value).__name__}"
        )
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise TypeError(
            f"`{name}` must be a list of strings (a 1-D array). Received: "
            f"{name} with shape {value.shape}"
            + (" (a single string; wrap it in a list)" if value.ndim == 0 else "")
        )
    texts = check_string_list(value, name)
    for index, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"`{name}[{index}]` is not valid Unicode text: it holds a lone "
                f"surrogate {text[error.start]!r} at character {error.start}. "
                f"Received: {name}[{index}]={text!r:.100}"
            ) from None
    return [str(text) for text in texts]


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
    from keras_attn.models.preset_io import preset_directory, shipped_presets

    if isinstance(preset, str) and preset in model_class.presets:
        # A shape with random weights: no tokenizer, nothing to translate.
        raise ValueError(
            f"{preset!r} is an architecture preset of {model_class.__name__} "
            "(a shape with random weights and no tokenizer); a task object "
            "needs a trained preset with its tokenizer: "
            f"{', '.join(shipped_presets())}, or a preset directory's path. "
            f"Received: preset={preset!r}"
        )
    directory = preset_directory(preset)
    overrides = {} if dtype is None else {"dtype": dtype}
    model = model_class.from_preset(directory, **overrides)
    return directory, model, _preset_tokenizer_class(directory).from_preset(directory)


def _preset_tokenizer_class(directory):
    """The tokenizer class a preset's `tokenizer.json` names (a preset
    without one: `SubwordTokenizer`, which says what is missing)."""
    from keras_attn.models.preset_files import preset_file, read_preset_file
    from keras_attn.text.marian_tokenizer import MarianTokenizer
    from keras_attn.text.tokenizer import CONFIG_FILE

    if not preset_file(directory, CONFIG_FILE).is_file():
        return SubwordTokenizer
    class_name = read_preset_file(directory, CONFIG_FILE).get("class_name")
    return (
        MarianTokenizer if class_name == MarianTokenizer.__name__ else SubwordTokenizer
    )


def check_jit_compile(jit_compile):
    """`jit_compile` of a text task: `"auto"`, or a boolean as a Python `bool`.

    NumPy booleans (`np.True_`) are booleans. Any other string is refused
    with `ValueError`; any other type with `TypeError` (`1`, `None`, an
    array, even a 0-d one), before a comparison that an array would answer
    elementwise.
    """
    if isinstance(jit_compile, (bool, np.bool_)):
        return bool(jit_compile)
    if isinstance(jit_compile, str) and jit_compile == "auto":
        return jit_compile
    error = ValueError if isinstance(jit_compile, str) else TypeError
    raise error(
        '`jit_compile` must be "auto", True or False. '
        f"Received: jit_compile={jit_compile!r:.100} of type "
        f"{type(jit_compile).__name__}"
    )


def compiled(generator, jit_compile):
    """`generator` compiled as `jit_compile` asks ("auto": Keras's default)."""
    if jit_compile != "auto":
        generator.compile(jit_compile=jit_compile)
    return generator
