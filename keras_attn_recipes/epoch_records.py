"""What a translation run records per epoch, made to agree with its backup.

One rule says when epoch N of `train` is done: the backup says so
(`backup/training_metadata.json`). `AtomicBackupAndRestore` writes that
only after every callback's `on_epoch_end` has returned, so by then the
epoch's checkpoint (`checkpoints/epoch_NNN.keras`, N counted from 1) and its
rows in `history.csv` (`epoch` counted from 0) and `updates.csv` are on
disk. A kill between those writes and the backup leaves records of an epoch
the backup does not count; the resumed run does that epoch again.

`repair_epoch_records`, run before a resumed `fit`, removes those records,
so a redone epoch appears once and no checkpoint of an unfinished epoch is
averaged. A run directory written before this rule (the backup first) may
lack the checkpoint of the epoch it resumes after: `AtomicEpochCheckpoint`
(in `translation_steps`) writes it again from the restored weights, which
are exactly that epoch's. Older gaps cannot be filled (those weights are
gone); they are reported, and `evaluate --average-last` and `save-preset`
refuse to average across them (`keras_attn.training.last_epoch_checkpoints`).
"""

import csv
import io
import re
import sys

from keras_attn.file_safety import write_text_atomically

HISTORY = "history.csv"
UPDATES = "updates.csv"
CHECKPOINTS = "checkpoints"
_CHECKPOINT = re.compile(r"epoch_(\d+)\.keras")


def checkpoint_name(epoch):
    """The file name of the checkpoint after `epoch` epochs (1 for the first)."""
    return f"epoch_{epoch:03d}.keras"


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _keep_rows(path, column, keep):
    """Rewrites the CSV file `path` with the rows whose `column` `keep` accepts.

    Returns the dropped rows' values of `column`. A row cut short by a kill
    (or one whose `column` is not an integer) is dropped. With no row left
    the file is removed, so that its writer starts it again with its header.
    """
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        rows = list(reader)
    if header is None or column not in header:
        return []
    index = header.index(column)
    kept, dropped = [], []
    for row in rows:
        value = _int(row[index]) if len(row) == len(header) else None
        (kept if value is not None and keep(value) else dropped).append(row)
    if not dropped:
        return []
    if kept:
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(kept)
        write_text_atomically(path, text.getvalue())
    else:
        path.unlink()
    return [row[index] if len(row) > index else "" for row in dropped]


def checkpoint_epochs(output_dir):
    """The epochs (counted from 1) that have a checkpoint in the run."""
    directory = output_dir / CHECKPOINTS
    if not directory.is_dir():
        return []
    epochs = []
    for path in directory.iterdir():
        match = _CHECKPOINT.fullmatch(path.name)
        if match and path.is_file():
            epochs.append(int(match.group(1)))
    return sorted(epochs)


def history_epochs(output_dir):
    """The `epoch` values (counted from 0) of the rows of `history.csv`."""
    path = output_dir / HISTORY
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as file:
        return [_int(row.get("epoch")) for row in csv.DictReader(file)]


def repair_epoch_records(output_dir, completed_epochs, completed_updates):
    """Makes the run's per-epoch records say what the backup says is done.

    Before a resumed `fit` (`completed_epochs` and `completed_updates` from
    the backup; 0 and 0 without one):

    - rows of `history.csv` of epochs the backup does not count (its
      `epoch` column, from 0, at or past `completed_epochs`) are dropped,
      and rows of `updates.csv` past `completed_updates`: the resumed run
      writes them again, once;
    - checkpoints of epochs past `completed_epochs` are deleted: their
      epochs are trained again.

    Prints what it removed, and a warning for what it cannot restore: an
    epoch before the last completed one without its checkpoint or its
    history row (left by a kill in a run from before the backup was written
    last). Averaging refuses to cross such a gap, naming the epoch.

    Returns:
        `True` when the checkpoint of epoch `completed_epochs` itself is
        missing: the restored weights are exactly that epoch's, and
        `AtomicEpochCheckpoint(..., resumed_epoch=completed_epochs)` writes
        it again.
    """
    dropped_rows = _keep_rows(
        output_dir / HISTORY, "epoch", lambda epoch: epoch < completed_epochs
    )
    dropped_updates = _keep_rows(
        output_dir / UPDATES, "update", lambda update: update <= completed_updates
    )
    stale = [e for e in checkpoint_epochs(output_dir) if e > completed_epochs]
    for epoch in stale:
        (output_dir / CHECKPOINTS / checkpoint_name(epoch)).unlink()
    if dropped_rows or dropped_updates or stale:
        print(
            f"The backup counts {completed_epochs} finished epoch(s); removed the "
            "records of later epochs, which this run trains again: "
            f"{len(dropped_rows)} row(s) of {HISTORY}, {len(dropped_updates)} "
            f"of {UPDATES}, checkpoints {[checkpoint_name(e) for e in stale]}."
        )
    have = set(checkpoint_epochs(output_dir))
    logged = set(history_epochs(output_dir))
    missing_checkpoints = [e for e in range(1, completed_epochs) if e not in have]
    missing_rows = [e for e in range(completed_epochs) if e not in logged]
    if missing_checkpoints or missing_rows:
        print(
            f"warning: this run lacks records of finished epochs that cannot "
            f"be restored (a kill in a run from before the backup was written "
            f"last): checkpoints "
            f"{[checkpoint_name(e) for e in missing_checkpoints]}, "
            f"{HISTORY} rows of epochs {missing_rows} (counted from 0). "
            "`evaluate --average-last` and `save-preset` refuse to average "
            "across a missing checkpoint.",
            file=sys.stderr,
        )
    return completed_epochs > 0 and completed_epochs not in have
