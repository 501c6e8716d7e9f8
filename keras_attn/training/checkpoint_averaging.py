"""Checkpoint averaging (section 6.1 of "Attention Is All You Need")."""

import os
import re
from pathlib import Path

import keras
import numpy as np

from keras_attn.file_safety import read_error_reason
from keras_attn.validation import check_non_negative_int, check_positive_int

_WEIGHT_FILE_SUFFIXES = (".keras", ".weights.h5")
# An epoch's checkpoint, as `ModelCheckpoint("epoch_{epoch:03d}.keras")`
# names it: the number of epochs done, zero-padded or not.
_EPOCH_CHECKPOINT = re.compile(r"epoch_(\d+)(\.keras|\.weights\.h5)")


def _epoch_of(path):
    """The epoch number of an `epoch_N.keras` / `epoch_N.weights.h5` name."""
    match = _EPOCH_CHECKPOINT.fullmatch(Path(path).name)
    return None if match is None else int(match.group(1))


def _check_consecutive_epochs(paths):
    """Epoch checkpoints must be consecutive epochs, oldest first, each once.

    Averaging "the last N" over a gap would silently mix in an older epoch
    in place of the missing one. Files not named `epoch_N...` carry no
    epoch number and are not checked.
    """
    epochs = [_epoch_of(path) for path in paths]
    if None in epochs:
        return
    for (before, after), (first, second) in zip(
        zip(epochs, epochs[1:]), zip(paths, paths[1:])
    ):
        if after == before + 1:
            continue
        names = [path.name for path in paths]
        if after > before + 1:
            missing = ", ".join(str(e) for e in range(before + 1, after))
            problem = (
                f"epoch {missing} is missing between {first.name!r} and "
                f"{second.name!r}; averaging across the gap would mix in "
                "other epochs"
            )
        else:
            problem = f"{second.name!r} (epoch {after}) follows {first.name!r}"
        raise ValueError(
            "`checkpoint_paths` must be the checkpoints of consecutive epochs, "
            f"oldest first: {problem}. Received: checkpoint_paths={names}"
        )


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
    _check_consecutive_epochs(paths)
    return paths


def last_epoch_checkpoints(directory, count, last_epoch=None):
    """The checkpoints of the last `count` epochs in `directory`, oldest first.

    Reads the files named `epoch_N.keras` or `epoch_N.weights.h5`, `N` the
    number of epochs done (zero-padded or not), as
    `keras.callbacks.ModelCheckpoint("epoch_{epoch:03d}.keras")` writes
    them. Every epoch from `last_epoch - count + 1` to `last_epoch` must
    have its file: a missing one is an error naming the epoch, never
    replaced by an older epoch's file, which "the last `count` files"
    would silently do.

    Args:
        directory: the folder of the checkpoints.
        count: int, how many of the last epochs to return.
        last_epoch: int, the last epoch of training (1 for the first), when
            known, e.g. from the training backup; then its own checkpoint
            must be there too. Defaults to `None`, meaning the highest
            epoch number in `directory`.

    Returns:
        A list of `count` `pathlib.Path`s, for `average_checkpoints`.

    Raises:
        ValueError: an epoch's checkpoint is missing (naming the epoch and
            the file), or training has fewer than `count` epochs.

    Example:

    ```python
    paths = keras_attn.training.last_epoch_checkpoints("runs/full/checkpoints", 5)
    keras_attn.training.average_checkpoints(model, paths)
    ```
    """
    count = check_positive_int(count, "count")
    last_epoch = check_non_negative_int(last_epoch, "last_epoch", allow_none=True)
    directory = Path(directory)
    found = {}
    if directory.is_dir():
        for path in directory.iterdir():
            epoch = _epoch_of(path)
            if epoch is not None and path.is_file():
                found.setdefault(epoch, []).append(path)
    if last_epoch is None:
        last_epoch = max(found, default=0)
    if count > last_epoch:
        raise ValueError(
            f"`count` asks for the checkpoints of the last {count} epochs, but "
            f"training has {last_epoch} (the last epoch checkpoint in "
            f"{str(directory)!r}). Received: count={count}"
        )
    paths = []
    for epoch in range(last_epoch - count + 1, last_epoch + 1):
        files = sorted(found.get(epoch, []))
        if not files:
            raise ValueError(
                f"The checkpoint of epoch {epoch} is missing from "
                f"{str(directory)!r} (no `epoch_{epoch:03d}.keras`): the last "
                f"{count} epochs, {last_epoch - count + 1} to {last_epoch}, "
                "cannot be averaged without it. Received: "
                f"count={count}, last_epoch={last_epoch}"
            )
        if len(files) > 1:
            raise ValueError(
                f"Epoch {epoch} has more than one checkpoint in "
                f"{str(directory)!r}: {[path.name for path in files]}. Keep one."
            )
        paths.append(files[0])
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
            first, all of `model`'s architecture. Files named by epoch
            (`epoch_N.keras`, `epoch_N.weights.h5`) must be consecutive
            epochs, oldest first; `last_epoch_checkpoints` finds them.

    Returns:
        `model`, for chaining.

    Raises:
        ValueError: a checkpoint cannot be read or does not fit `model`,
            naming the file, or epoch checkpoints leave out an epoch,
            naming it. All or nothing: the model (and its optimizer) then
            holds exactly the values it held before the call.

    Example:

    ```python
    paths = keras_attn.training.last_epoch_checkpoints("runs/full/checkpoints", 5)
    keras_attn.training.average_checkpoints(model, paths)
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
