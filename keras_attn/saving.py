"""Loading `.keras` files with errors that name the file."""

import os
import zipfile
from pathlib import Path

import keras

# Importing the sub-packages registers every keras_attn class for loading.
import keras_attn.layers  # noqa: F401
import keras_attn.models  # noqa: F401
import keras_attn.training  # noqa: F401
from keras_attn.file_safety import read_error_reason
from keras_attn.validation import check_bool


def load_model(filepath, compile=True, safe_mode=True):
    """Loads a `.keras` file; a missing, truncated or corrupt file is named.

    `keras.saving.load_model` with two differences: the file is checked
    before Keras opens it, and a failure to read it is raised again with a
    message that starts with the file's path (Keras's own error, raised
    deep inside `zipfile` or `h5py`, often does not name it). The error
    keeps its type (an `OSError` from `h5py` stays an `OSError`) and
    chains the original as its `__cause__`. `safe_mode` stays on by
    default: keras-attn's configs hold no lambdas or code.

    Args:
        filepath: `str` or `os.PathLike`, path of a `.keras` file.
        compile: whether to compile the model with its saved loss and
            optimizer. Defaults to `True`.
        safe_mode: whether to refuse deserializing Python code (lambdas).
            Defaults to `True`.

    Returns:
        The `keras.Model`.

    Raises:
        TypeError: `filepath` is not a path.
        FileNotFoundError: the file does not exist.
        ValueError: the file is not a `.keras` zip archive, or it holds
            code that `safe_mode` refuses.
        Exception: any other failure to read it, with its original type
            (e.g. `OSError` for corrupt weights), the path in its message.

    Example:

    >>> import os, tempfile
    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=50)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.keras")
    >>> model.save(path)
    >>> keras_attn.saving.load_model(path).count_params() == model.count_params()
    True
    """
    if not isinstance(filepath, (str, os.PathLike)):
        raise TypeError(
            "`filepath` must be a `str` or `os.PathLike` path of a `.keras` "
            f"file. Received: filepath={filepath!r} of type "
            f"{type(filepath).__name__}"
        )
    compile = check_bool(compile, "compile")
    safe_mode = check_bool(safe_mode, "safe_mode")
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
        renamed = _naming_file(error, path)
        if renamed is error:
            raise
        raise renamed from error


def _naming_file(error, path):
    """`error` again, of the same type, its message starting with `path`.

    An exception type whose constructor does not take one message (rare)
    is returned as it is: its type matters more than the file's name.
    """
    message = f"{path} cannot be loaded: {error}"
    reason = read_error_reason(error)
    if reason.startswith("the file "):  # h5py's words, said plainly.
        message += f". The weights file inside it {reason[len('the file ') :]}."
    try:
        return type(error)(message)
    except Exception:
        return error
