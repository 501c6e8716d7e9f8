"""Pictures the translation recipe saves: learning curves and attention."""

import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_learning_curves(history_csv, path):
    """Plots loss and masked accuracy per epoch from a `CSVLogger` file."""
    with open(history_csv, newline="") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        return None
    epochs = [int(row["epoch"]) + 1 for row in rows]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, metric in zip(axes, ("loss", "masked_accuracy")):
        for prefix, style in (("", "-o"), ("val_", "--s")):
            key = prefix + metric
            if key in rows[0]:
                axis.plot(epochs, [float(row[key]) for row in rows], style, label=key)
        axis.set_xlabel("epoch")
        axis.set_title(metric.replace("_", " "))
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
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
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
