"""Checkpoint averaging (section 6.1 of "Attention Is All You Need")."""

import os
from pathlib import Path

import keras
import numpy as np

from keras_attn.file_safety import read_error_reason

_WEIGHT_FILE_SUFFIXES = (".keras", ".weights.h5")


def _check_checkpoint_paths(checkpoint_paths):
    if isinstance(checkpoint_paths, (str, bytes, os.PathLike)) or not hasattr(
        checkpoint_paths, "__iter__"
    ):
        raise TypeError(
            "`checkpoint_paths` must be a list of `.keras` or `.weights.h5` "
            f"file paths. Received: checkpoint_paths={checkpoint_paths!r}"
        )
    paths = list(checkpoint_paths)
    for path in paths:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                "`checkpoint_paths` must hold file paths (`str` or "
                f"`pathlib.Path`). Received: an element {path!r} of type "
                f"{type(path).__name__}"
            )
    paths = [Path(path) for path in paths]
    if not paths:
        raise ValueError(
            "`checkpoint_paths` must name at least one checkpoint. "
            "Received: checkpoint_paths=[]"
        )
    for path in paths:
        if not path.name.endswith(_WEIGHT_FILE_SUFFIXES):
            raise ValueError(
                "Every checkpoint must be a `.keras` or `.weights.h5` file. "
                f"Received: {str(path)!r}"
            )
        if not path.is_file():
            raise FileNotFoundError(f"No checkpoint file at {str(path)!r}.")
    return paths


def average_checkpoints(model, checkpoint_paths):
    """Sets a model's weights to the mean of several checkpoints' weights.

    The paper's base models are "obtained by averaging the last 5
    checkpoints, which were written at 10-minute intervals" (section 6.1): the
    mean of weights late in training lies nearer the centre of the region
    that the optimizer circles than any single one of them does, and usually
    translates better. Works on any Keras model whose architecture matches
    the checkpoints (`model.save` or `ModelCheckpoint` files, `.keras` or
    `.weights.h5`). Weights are summed in float64 and cast back to each
    variable's dtype; integer variables (e.g. seed-generator states) take the
    last checkpoint's value.

    Args:
        model: a built `keras.Model`; its weights are replaced in place.
        checkpoint_paths: list of `.keras` or `.weights.h5` files, oldest
            first, all of `model`'s architecture.

    Returns:
        `model`, for chaining.

    Raises:
        ValueError: a checkpoint cannot be read or does not fit `model`,
            naming the file. All or nothing: the model (and its optimizer)
            then holds exactly the values it held before the call.

    Example:

    ```python
    paths = sorted(Path("runs/full/checkpoints").glob("epoch_*.keras"))
    keras_attn.training.average_checkpoints(model, paths[-5:])
    ```

    Reference:
        [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 6.1.
    """
    paths = _check_checkpoint_paths(checkpoint_paths)
    if not getattr(model, "built", False):
        raise ValueError(
            "`average_checkpoints` loads into a built model; call the model on "
            f"a batch first. Received: an unbuilt model {model.name!r}"
        )
    # Loading a checkpoint overwrites the model (and optimizer) variables
    # one file at a time; keep their values to put back on any failure.
    variables = _all_variables(model)
    # Copies: on torch, `convert_to_numpy` may share the variable's memory.
    originals = [np.array(keras.ops.convert_to_numpy(v.value)) for v in variables]
    try:
        averaged = _averaged_weights(model, paths)
    except BaseException:
        for variable, value in zip(variables, originals):
            variable.assign(value)
        raise
    model.set_weights(averaged)
    return model


def _all_variables(model):
    """The model's variables and its optimizer's, each once."""
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    unique = {id(variable): variable for variable in variables}
    return list(unique.values())


def _averaged_weights(model, paths):
    """The mean of the weights in `paths`, loaded one by one into `model`."""
    sums, last = None, None
    for path in paths:
        try:
            model.load_weights(path)
        except Exception as error:
            reason = read_error_reason(error)
            problem = (
                "cannot be read"
                if reason.startswith("the file")
                else f"does not fit model {model.name!r}"
            )
            raise ValueError(
                f"The checkpoint {str(path)!r} {problem} ({reason}). "
                f"{model.name!r} keeps the weights it had before "
                "`average_checkpoints`."
            ) from error
        last = model.get_weights()
        if sums is None:
            sums = [np.zeros(np.shape(w), np.float64) for w in last]
        for total, weight in zip(sums, last):
            total += np.asarray(weight, np.float64)
    return [
        (total / len(paths)).astype(weight.dtype)
        if np.issubdtype(weight.dtype, np.floating)
        else weight
        for total, weight in zip(sums, last)
    ]
