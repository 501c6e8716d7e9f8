"""`BackupAndRestore` whose backups survive a kill at any instant."""

import json
import os
from pathlib import Path

import keras
import numpy as np

from keras_attn.training.keras_compat import set_initial_epoch
from keras_attn.validation import check_bool

_METADATA = "training_metadata.json"


def _write_atomically(path, write):
    """Writes `path` through a temporary file that `os.replace` moves in place.

    A process killed mid-write leaves the temporary file behind, never a
    half-written `path`: readers see the old file or the new one.
    """
    path = Path(path)
    # Same suffix (`save_weights` insists on `.weights.h5`), hidden name.
    temporary = path.with_name(f".partial.{path.name}")
    write(temporary)
    os.replace(temporary, path)


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
    - The random-number state of dropout (not part of `save_weights`) is saved
      and restored, so with a seeded input order a resumed run computes the
      same weights as an uninterrupted one.
    - A backup that cannot be read raises an error naming the file.
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
        if not self.metadata_path.exists():
            return None
        try:
            metadata = json.loads(self.metadata_path.read_text())
            epoch, weights = metadata["epoch"], metadata["weights"]
            if not isinstance(epoch, int) or not isinstance(weights, str):
                raise ValueError(f"epoch={epoch!r}, weights={weights!r}")
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"The training backup {self.metadata_path} is not valid backup "
                f"metadata ({error}). Delete {self._directory} to start over."
            ) from error
        return metadata

    def on_train_begin(self, logs=None):
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
                f"({type(error).__name__}: {error}). Delete {self._directory} "
                "to start over."
            ) from error
        states = _random_states(self.model)
        saved_states = metadata.get("random_states", [])
        if len(saved_states) == len(states):
            for variable, value in zip(states, saved_states):
                variable.assign(np.asarray(value, variable.dtype))
        set_initial_epoch(self.model, metadata["epoch"])

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            return
        self._save_backup(epoch + 1)

    def _save_backup(self, completed_epochs):
        self._directory.mkdir(parents=True, exist_ok=True)
        previous = self._read_metadata()
        weights_name = f"epoch_{completed_epochs:05d}.weights.h5"
        _write_atomically(
            self._directory / weights_name,
            lambda path: self.model.save_weights(path, overwrite=True),
        )
        optimizer = self.model.optimizer
        metadata = {
            "epoch": completed_epochs,
            "updates": None if optimizer is None else int(optimizer.iterations),
            "weights": weights_name,
            "random_states": [
                keras.ops.convert_to_numpy(v.value).tolist()
                for v in _random_states(self.model)
            ],
        }
        _write_atomically(
            self.metadata_path, lambda path: path.write_text(json.dumps(metadata))
        )
        if previous is not None and previous["weights"] != weights_name:
            (self._directory / previous["weights"]).unlink(missing_ok=True)

    def on_train_batch_end(self, batch, logs=None):
        pass  # Saves once per epoch only.
