"""Loading `.keras` files with errors that name the file."""

import zipfile
from pathlib import Path

import keras

# Importing the sub-packages registers every keras_attn class for loading.
import keras_attn.layers  # noqa: F401
import keras_attn.models  # noqa: F401
import keras_attn.training  # noqa: F401


def load_model(filepath, compile=True, safe_mode=True):
    """Loads a `.keras` file; a missing, truncated or corrupt file is named.

    `keras.saving.load_model` with two differences: the file is checked
    before Keras opens it, and any failure to read it becomes a `ValueError`
    whose message starts with the file's path (Keras's own error, raised
    deep inside `zipfile` or `h5py`, often does not name it). `safe_mode`
    stays on by default: keras-attn's configs hold no lambdas or code.

    Args:
        filepath: path of a `.keras` file.
        compile: whether to compile the model with its saved loss and
            optimizer. Defaults to `True`.
        safe_mode: whether to refuse deserializing Python code (lambdas).
            Defaults to `True`.

    Returns:
        The `keras.Model`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not a readable `.keras` archive, or it holds
            code that `safe_mode` refuses.

    Example:

    >>> import os, tempfile
    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=50)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.keras")
    >>> model.save(path)
    >>> keras_attn.saving.load_model(path).count_params() == model.count_params()
    True
    """
    path = Path(filepath)
    if not path.exists():
        raise FileNotFoundError(f"No model file at {path}.")
    if path.suffix != ".keras":
        raise ValueError(
            f"Expected a `.keras` file. Received: filepath={str(filepath)!r}"
        )
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path} is not a complete `.keras` file (not a readable zip "
            "archive): it may be truncated, e.g. by a process killed while "
            "writing it."
        )
    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=safe_mode)
    except Exception as error:
        raise ValueError(
            f"{path} cannot be loaded: {type(error).__name__}: {error}"
        ) from error
