"""`BackupAndRestore` whose backups survive a kill at any instant."""

import json
import os
import re
from pathlib import Path

import keras
import numpy as np

from keras_attn.file_safety import (
    confined_path,
    read_error_reason,
    read_json,
    write_atomically,
)
from keras_attn.training.keras_compat import set_initial_epoch
from keras_attn.training.torch_random_state import (
    check_torch_random_state,
    get_torch_random_state,
    set_torch_random_state,
)
from keras_attn.validation import check_bool

_METADATA = "training_metadata.json"
# The only names this callback writes: the weights of an epoch, and the
# hidden temporary files of `write_atomically` (a kill can leave one).
# Nothing else in the folder is ever read as a backup or deleted.
_WEIGHTS_NAME = re.compile(r"epoch_\d{5,}\.weights\.h5")
_OWN_FILE = re.compile(
    r"(\.partial(-[0-9a-f]{8})?\.)?"
    r"(epoch_\d{5,}\.weights\.h5|training_metadata\.json)"
)


def _random_states(model):
    """The model's random-number state: its variables that are not weights.

    These are the `SeedGenerator` states of dropout layers; `save_weights`
    leaves them out, and without them a resumed run draws other dropout masks.
    """
    weight_ids = {id(weight) for weight in model.weights}
    return [v for v in model.variables if id(v) not in weight_ids]


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """Backs up the training state each epoch; restores it when `fit` restarts.

    Same contract as `keras.callbacks.BackupAndRestore` with `save_freq="epoch"`
    (a killed `fit` restarted with the same callback continues after the last
    completed epoch), plus:

    - Every epoch's weights and optimizer state go to a new file, written
      under a temporary name and renamed; then the metadata that points at it
      is replaced the same way. A kill at any moment leaves the previous
      complete backup or the new one, never a half-written file.
    - An epoch is marked done only after every callback's `on_epoch_end`
      for it has returned, wherever this callback stands in the list: the
      weights and random state are saved at the epoch's end, and the
      metadata that says "epoch N is done" is written when the next epoch
      begins or training ends. So whatever the other callbacks write at an
      epoch's end (a checkpoint, a row of `CSVLogger`'s history) is on
      disk before the backup counts that epoch; a kill or an error before
      then resumes at that epoch and does it again. A callback that raises
      in `on_epoch_end` leaves the epoch undone.
    - The random-number state of dropout (not part of `save_weights`) is saved
      and restored, so with a seeded input order a resumed run computes the
      same weights as an uninterrupted one: the `SeedGenerator` states, and
      on torch the global generators that unseeded dropout draws from
      (`keras_attn.training.torch_random_state`).
    - A backup that cannot be read raises an error naming the file.
    - The metadata file is not trusted: before anything is loaded, its
      `epoch` must be a non-negative integer and its `weights` the name of
      a file this callback writes (`epoch_NNNNN.weights.h5`) that resolves
      inside `backup_dir`; anything else (`../`, an absolute path, a
      symbolic link out of the folder) is refused, naming the field.
    - Deleting (the previous epoch's weights, and the backup at the end of
      `fit`) touches only the callback's own files in `backup_dir`, never
      a symbolic link and never anything else in the folder.
    - Nothing is saved after an epoch whose loss is NaN or infinite, so
      the last good backup stays the one restored.

    Args:
        backup_dir: local directory for the backup files.
        delete_checkpoint: whether to delete the backup when `fit` ends
            normally. Defaults to `True`.

    Example:

    ```python
    callback = keras_attn.training.AtomicBackupAndRestore("runs/backup")
    model.fit(dataset, epochs=10, callbacks=[callback])  # Killed at epoch 4.
    model.fit(dataset, epochs=10, callbacks=[callback])  # Starts at epoch 4.
    ```
    """

    def __init__(self, backup_dir, delete_checkpoint=True):
        if not isinstance(backup_dir, (str, os.PathLike)) or not str(backup_dir):
            raise ValueError(
                "`backup_dir` must be a non-empty directory path. "
                f"Received: backup_dir={backup_dir!r}"
            )
        delete_checkpoint = check_bool(delete_checkpoint, "delete_checkpoint")
        super().__init__(str(backup_dir), delete_checkpoint=delete_checkpoint)
        self._directory = Path(backup_dir)
        # The metadata of an epoch whose weights are saved and whose other
        # end-of-epoch callbacks may still be running; written by `_commit`.
        self._pending = None

    @property
    def metadata_path(self):
        return self._directory / _METADATA

    def completed_epochs(self):
        """How many epochs the backup holds (0 when there is none)."""
        metadata = self._read_metadata()
        return 0 if metadata is None else metadata["epoch"]

    def completed_updates(self):
        """How many optimizer updates the backup holds (0 when there is none).

        Backups written before this count was recorded report `None`.
        """
        metadata = self._read_metadata()
        return 0 if metadata is None else metadata.get("updates")

    def _read_metadata(self):
        """The checked metadata, or `None` when there is no backup.

        The metadata is read back from disk, so it is treated as untrusted:
        every field is checked, and the weights file it names must be one
        this callback writes (`epoch_NNNNN.weights.h5`), inside the folder.
        """
        path = self.metadata_path
        if not (path.exists() or path.is_symlink()):
            return None
        try:
            confined_path(self._directory, _METADATA, path, "metadata file")
            metadata = read_json(path)
        except ValueError as error:
            raise ValueError(
                f"The training backup cannot be read: {str(error).rstrip('.')}. "
                f"Delete {self._directory} to start over."
            ) from error
        if not isinstance(metadata, dict):
            self._invalid(
                "the file", metadata, "a JSON object with `epoch` and `weights`"
            )
        for field in ("epoch", "weights"):
            if field not in metadata:
                self._invalid(field, None, "present (the file has no such field)")
        epoch = metadata["epoch"]
        if not _is_int(epoch) or epoch < 0:
            self._invalid("epoch", epoch, "a non-negative integer")
        updates = metadata.get("updates")
        if updates is not None and (not _is_int(updates) or updates < 0):
            self._invalid("updates", updates, "a non-negative integer or null")
        weights = metadata["weights"]
        if not isinstance(weights, str) or not _WEIGHTS_NAME.fullmatch(weights):
            self._invalid(
                "weights",
                weights,
                "the name of a weights file this callback writes, "
                "`epoch_NNNNN.weights.h5`, inside the backup folder",
            )
        try:
            confined_path(self._directory, weights, path, "weights file")
        except ValueError as error:
            self._invalid("weights", weights, f"a file inside the folder ({error})")
        states = metadata.get("random_states", [])
        if not isinstance(states, list):
            self._invalid("random_states", states, "a list of arrays")
        torch_state = metadata.get("torch_random_state")
        try:
            check_torch_random_state(torch_state)
        except ValueError as error:
            self._invalid(
                "torch_random_state",
                torch_state,
                f"the state of torch's generators or null ({error})",
            )
        return metadata

    def _invalid(self, field, value, expected):
        raise ValueError(
            f"The training backup {self.metadata_path} is not valid backup "
            f"metadata: `{field}` must be {expected}. Received: "
            f"{field}={value!r:.200}. Delete {self._directory} to start over."
        )

    def on_train_begin(self, logs=None):
        self._pending = None
        metadata = self._read_metadata()
        if metadata is None:
            return
        if not self.model.built:
            raise ValueError(
                "`AtomicBackupAndRestore` restores into a built model; build "
                f"{self.model.name} (call it on a batch) before `fit`."
            )
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        weights_path = self._directory / metadata["weights"]
        try:
            self.model.load_weights(weights_path)
        except Exception as error:
            raise ValueError(
                f"The training backup {weights_path} cannot be loaded "
                f"({read_error_reason(error)}). Delete {self._directory} "
                "to start over."
            ) from error
        states = _random_states(self.model)
        saved_states = metadata.get("random_states", [])
        if len(saved_states) == len(states):
            for variable, value in zip(states, saved_states):
                try:
                    value = np.asarray(value, variable.dtype)
                    if value.shape != tuple(variable.shape):
                        raise ValueError(f"shape {value.shape}")
                except (ValueError, TypeError) as error:
                    self._invalid(
                        "random_states",
                        value,
                        f"arrays of the shapes {[tuple(v.shape) for v in states]} "
                        f"({error})",
                    )
                variable.assign(value)
        set_torch_random_state(metadata.get("torch_random_state"))
        set_initial_epoch(self.model, metadata["epoch"])

    def on_epoch_end(self, epoch, logs=None):
        # Checked first: a hostile metadata file is refused before anything
        # is written (and before `_commit` would delete what it names).
        self._read_metadata()
        self._pending = None
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            return
        self._pending = self._save_epoch_state(epoch + 1)

    def on_epoch_begin(self, epoch, logs=None):
        # Every callback's `on_epoch_end` of the previous epoch has returned.
        self._commit()

    def _save_epoch_state(self, completed_epochs):
        """Writes the weights file of the epoch's end; returns its metadata.

        The weights go to a file of their own (`epoch_NNNNN.weights.h5` of
        the completed epoch count), which the committed metadata does not
        name, so the backup in force is untouched until `_commit`.
        """
        self._directory.mkdir(parents=True, exist_ok=True)
        weights_name = f"epoch_{completed_epochs:05d}.weights.h5"
        write_atomically(
            self._directory / weights_name,
            lambda path: self.model.save_weights(path, overwrite=True),
        )
        optimizer = self.model.optimizer
        return {
            "epoch": completed_epochs,
            "updates": None if optimizer is None else int(optimizer.iterations),
            "weights": weights_name,
            "random_states": [
                keras.ops.convert_to_numpy(v.value).tolist()
                for v in _random_states(self.model)
            ],
            "torch_random_state": get_torch_random_state(),
        }

    def _commit(self):
        """Marks the pending epoch done: replaces the metadata, atomically.

        Then deletes the weights file of the epoch it replaces.
        """
        metadata, self._pending = self._pending, None
        if metadata is None:
            return
        previous = self._read_metadata()
        write_atomically(
            self.metadata_path,
            lambda path: Path(path).write_text(json.dumps(metadata)),
        )
        if previous is not None and previous["weights"] != metadata["weights"]:
            self._delete_own_file(previous["weights"])

    def _delete_own_file(self, name):
        """Deletes `name` from the folder if this callback wrote it.

        Only names of the callback's own files qualify, only as plain files
        directly in the folder: a symbolic link is never followed (nor
        removed), so a hostile metadata file cannot delete anything else.
        """
        if not _OWN_FILE.fullmatch(name):
            return
        path = self._directory / name
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)

    def on_train_end(self, logs=None):
        # Every callback's `on_epoch_end` of the last epoch has returned.
        # `BackupAndRestore` removes the whole `backup_dir` tree; this
        # removes only the files the callback writes, then the folder if it
        # is left empty, so a `backup_dir` that holds anything else keeps it.
        if not self.delete_checkpoint:
            self._commit()
            return
        self._pending = None
        if not self._directory.is_dir():
            return
        for entry in self._directory.iterdir():
            self._delete_own_file(entry.name)
        try:
            self._directory.rmdir()
        except OSError:
            pass  # Something else is in the folder: it stays.

    def on_train_batch_end(self, batch, logs=None):
        pass  # Saves once per epoch only.


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)
