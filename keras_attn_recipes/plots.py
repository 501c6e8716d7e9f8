"""Pictures the translation recipe saves: learning curves and attention."""

import csv
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _read_csv(path, integer_fields=()):
    """The rows of a CSV log whose `integer_fields` hold integers.

    A log written before run directories were locked may hold a second
    header or a torn last row (two writers, or a kill mid-write): such rows
    are skipped with a warning naming the file and its lines, so one bad
    row does not stop every later `train` at the plot. A file that is not
    CSV text at all gives no rows, with a warning.
    """
    try:
        with open(path, newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        print(
            f"Warning: {path} is not a readable CSV log ({error}); not plotted.",
            file=sys.stderr,
        )
        return []
    good, skipped = [], []
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        try:
            if None in row or None in row.values():
                raise ValueError("a torn row")  # too many or too few fields
            for name in integer_fields:
                int(row[name])
        except (KeyError, ValueError):
            skipped.append(line)
            continue
        good.append(row)
    if skipped:
        print(
            f"Warning: {path}: skipped {len(skipped)} malformed row(s) (lines "
            f"{', '.join(map(str, skipped[:10]))}{', ...' if len(skipped) > 10 else ''}"
            "), e.g. a repeated header left by two processes writing one run "
            "directory.",
            file=sys.stderr,
        )
    return good


def _number(text):
    """A logged value as a float; NaN where Keras logged none (`NA`)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def plot_learning_curves(history_csv, path, updates_csv=None):
    """Plots loss, masked accuracy and (with `updates_csv`) the learning rate.

    With `updates_csv` (written by `UpdateBudget`) the x axis counts
    optimizer updates: the training loss every few updates (Keras's running
    mean over the epoch so far) and the validation values at each epoch's
    end; otherwise it counts epochs, from the `CSVLogger` file alone.
    """
    rows = _read_csv(history_csv, ("epoch",))
    if not rows:
        return None
    steps = []
    if updates_csv and updates_csv.exists():
        steps = _read_csv(updates_csv, ("update",))
    by_update = bool(steps) and "updates" in rows[0]
    if by_update:
        rows = [row for row in rows if row["updates"].isdigit()]
        if not rows:
            return None
        x_epochs = [int(row["updates"]) for row in rows]
        x_label = "update"
    else:
        x_epochs = [int(row["epoch"]) + 1 for row in rows]
        x_label = "epoch"
    panels = ("loss", "masked_accuracy") + (("learning_rate",) if by_update else ())
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for axis, metric in zip(axes, panels):
        if by_update and metric in ("loss", "learning_rate"):
            values = [
                (int(r["update"]), _number(r[metric])) for r in steps if r[metric]
            ]
            label = "training (running epoch mean)" if metric == "loss" else None
            if values:
                axis.plot(*zip(*values), "-", lw=1, label=label)
        for prefix, style in (("", "-o"), ("val_", "--s")):
            key = prefix + metric
            if key in rows[0] and not (by_update and key == "loss"):
                axis.plot(x_epochs, [_number(r[key]) for r in rows], style, label=key)
        axis.set_xlabel(x_label)
        axis.set_title(metric.replace("_", " "))
        if axis.get_legend_handles_labels()[0]:
            axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    _save(figure, path)
    return path


def plot_attention(scores, source_pieces, target_pieces, path, title):
    """Heat map of one sentence's cross-attention `(target, source)`."""
    scores = np.asarray(scores)
    figure, axis = plt.subplots(
        figsize=(
            max(4, 0.5 * len(source_pieces) + 2),
            max(3, 0.45 * len(target_pieces) + 2),
        )
    )
    image = axis.imshow(scores, cmap="viridis", vmin=0.0, aspect="auto")
    axis.set_xticks(range(len(source_pieces)), source_pieces, rotation=60, ha="right")
    axis.set_yticks(range(len(target_pieces)), target_pieces)
    axis.set_xlabel("source (English)")
    axis.set_ylabel("target (German)")
    axis.set_title(title)
    figure.colorbar(image, ax=axis, fraction=0.046)
    figure.tight_layout()
    _save(figure, path)
    return path


def _save(figure, path):
    """Saves `figure` as `path` atomically: a symbolic link or a special file
    at `path` is replaced, never written through."""
    # Imported here: the recipes load no Keras before `--backend` is applied.
    from keras_attn.file_safety import write_atomically

    try:
        write_atomically(path, lambda temporary: figure.savefig(temporary, dpi=120))
    finally:
        plt.close(figure)
