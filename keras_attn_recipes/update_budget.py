"""Training measured in optimizer updates: a stop, a progress line, a log.

A run that stops after a number of updates (not minutes) trains the same
model on every machine, fast or slow; only its duration differs.
"""

import csv
import math
import os
import time

import keras

from keras_attn.file_safety import open_regular_file

LOG_FIELDS = ("update", "epoch", "loss", "learning_rate", "minutes")


def fit_epochs(total_updates, batches_per_epoch, completed_epochs, completed_updates):
    """How many epochs `fit` needs to reach `total_updates` from a backup.

    A backup holds whole epochs; the last epoch of a run may be cut short by
    the update budget, so the remaining updates are counted from the backup,
    not inferred from its epoch count.
    """
    remaining = max(total_updates - completed_updates, 0)
    return completed_epochs + math.ceil(remaining / batches_per_epoch)


class UpdateBudget(keras.callbacks.Callback):
    """Stops `fit` after `total_updates` updates and shows the whole run's ETA.

    Every `log_every` updates it appends the running training loss (Keras's
    mean over the epoch so far) and the learning rate to `log_path`, a CSV
    file; at each epoch end it prints the updates done, the time taken and
    the time left for the whole run, and adds `updates` to the epoch logs
    (so `CSVLogger` records it when it comes after this callback).

    Put it after the callback that restores a backup: it reads the restored
    optimizer's update count when training begins.

    With `steps_per_execution=N` in `compile`, Keras calls the batch
    callbacks once per N updates, with the index of the group's last batch;
    the count is taken from that index, capped at the epoch's length where
    Keras knows it, and from the optimizer at each epoch's end (where a
    last, shorter group of an epoch of unknown length leaves the index
    ahead). A log row is written at the first callback at or past each
    multiple of `log_every`, labelled with the true update count, and
    training stops at the first callback at or past `total_updates`: both
    are exact when N divides `log_every` and the updates left, and otherwise
    up to N - 1 updates late. The translation recipe therefore defaults to
    `steps_per_execution=1`.

    Args:
        total_updates: int, optimizer updates of the whole run.
        log_path: CSV file to append to, or `None`.
        learning_rate: the optimizer's schedule (a callable of the update
            count), or `None`.
        log_every: int, updates between two log rows. Defaults to `25`.
    """

    def __init__(self, total_updates, log_path=None, learning_rate=None, log_every=25):
        super().__init__()
        self.total_updates = total_updates
        self.log_path = log_path
        self.learning_rate = learning_rate
        self.log_every = log_every
        self.updates = 0

    def on_train_begin(self, logs=None):
        self.updates = int(self.model.optimizer.iterations)
        self._start_updates = self.updates
        self._start_time = time.time()
        self._epoch = 0
        self._epoch_start_updates = self.updates
        if self.log_path is not None:
            with _append(self.log_path) as file:
                if file.tell() == 0:
                    csv.writer(file).writerow(LOG_FIELDS)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_start_updates = self.updates

    def on_train_batch_end(self, batch, logs=None):
        # Counted from the batch index rather than read from the optimizer:
        # on JAX its variables are only brought up to date at the end of an
        # epoch. `batch` is the last index of the group of
        # `steps_per_execution` batches that just ran.
        steps = self.params.get("steps") if self.params else None
        if steps:  # Known epoch length: a last, shorter group ends there.
            batch = min(batch, steps - 1)
        previous = self.updates
        self.updates = self._epoch_start_updates + batch + 1
        crossed = self.updates // self.log_every > previous // self.log_every
        if crossed and self.log_path is not None:
            self._log((logs or {}).get("loss"))
        if self.updates >= self.total_updates:
            self.model.stop_training = True

    def _log(self, loss):
        rate = ""
        if self.learning_rate is not None:
            rate = float(keras.ops.convert_to_numpy(self.learning_rate(self.updates)))
        minutes = (time.time() - self._start_time) / 60
        with _append(self.log_path) as file:
            csv.writer(file).writerow(
                [self.updates, self._epoch, loss, rate, round(minutes, 3)]
            )

    def on_epoch_end(self, epoch, logs=None):
        # The state is synchronised here on every backend; a last group
        # shorter than `steps_per_execution` left the batch index ahead.
        self.updates = int(self.model.optimizer.iterations)
        if logs is not None:
            logs["updates"] = self.updates
        done = self.updates - self._start_updates
        minutes = (time.time() - self._start_time) / 60
        left = max(self.total_updates - self.updates, 0)
        eta = f"{minutes / done * left:.1f} min left" if done else "ETA unknown"
        print(
            f"\nUpdate {self.updates:,}/{self.total_updates:,} "
            f"({100 * self.updates / self.total_updates:.0f}%) after "
            f"{minutes:.1f} min; {eta}."
        )


def _append(path):
    """`path` opened to append text, created if missing; a symbolic link or
    a special file there is refused (`keras_attn.file_safety`), never
    written through."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    return os.fdopen(open_regular_file(path, flags), "a", newline="")
