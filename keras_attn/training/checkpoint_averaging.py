"""Checkpoint averaging (section 6.1 of "Attention Is All You Need")."""

import os
from pathlib import Path

import numpy as np

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
    sums, last = None, None
    for path in paths:
        try:
            model.load_weights(path)
        except Exception as error:
            raise ValueError(
                f"The checkpoint {str(path)!r} does not fit model "
                f"{model.name!r} ({type(error).__name__}: {error})"
            ) from error
        last = model.get_weights()
        if sums is None:
            sums = [np.zeros(np.shape(w), np.float64) for w in last]
        for total, weight in zip(sums, last):
            total += np.asarray(weight, np.float64)
    averaged = [
        (total / len(paths)).astype(weight.dtype)
        if np.issubdtype(weight.dtype, np.floating)
        else weight
        for total, weight in zip(sums, last)
    ]
    model.set_weights(averaged)
    return model
