"""What the model-zoo recipes share: backend choice, a time budget, plots.

Imported by `classify_text.py`, `language_model_multi30k.py` and
`vit_digits.py`; nothing here imports Keras at module level, so a recipe can
choose its backend first.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from keras_attn_recipes.cli_io import (
    EXPECTED_FAILURES,
    check_output_dir,
    failure_message,
)
from keras_attn_recipes.host_memory import reuse_freed_host_memory
from keras_attn_recipes.run_lock import lock_for_this_process


def add_common_arguments(parser, default_output_dir):
    parser.add_argument(
        "--quick",
        action="store_true",
        help="A tiny model on a slice of the data (seconds; used by the tests).",
    )
    parser.add_argument(
        "--backend",
        choices=("jax", "tensorflow", "torch"),
        default=None,
        help="Keras backend (default: $KERAS_BACKEND or jax).",
    )
    parser.add_argument("--output-dir", type=Path, default=Path(default_output_dir))
    parser.add_argument("--epochs", type=positive_int, default=None)
    parser.add_argument(
        "--time-budget-minutes",
        type=float,
        default=None,
        help="Stop training after this many minutes (checked after each batch).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--steps-per-execution",
        type=positive_int,
        default=None,
        help="Updates per host round trip, `compile`'s argument (default: the "
        "setting's, lowered to a divisor of the steps per epoch).",
    )
    parser.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=1,
        help="Keras progress: 1 a progress bar, 2 one line per epoch, 0 none.",
    )


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer. Received: {text!r}"
        )
    return value


def select_backend(backend, restart=False):
    """Sets `KERAS_BACKEND` before Keras is imported (no effect after).

    With `restart=True` (a command-line run, not a call from a test), the
    JAX backend then re-executes the script with the malloc options of
    `keras_attn_recipes.host_memory`, so that its per-step CPU buffers
    reuse memory instead of page-faulting (docs/performance.md).
    """
    if backend:
        os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("KERAS_BACKEND", "jax")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    if backend and keras.backend.backend() != backend:
        raise RuntimeError(
            f"--backend {backend} was asked for, but Keras was already imported "
            f"with the {keras.backend.backend()} backend in this process."
        )
    if restart:
        reuse_freed_host_memory()
    return keras.backend.backend()


def shuffled_batches(inputs, labels, batch_size, seed, transform=None):
    """An endless generator of `(inputs, labels)` batches of one shape.

    Every epoch reshuffles and drops the remainder, so over epochs every
    example is seen, and on JAX the training step compiles once (a smaller
    last batch would compile a second program). Use with
    `steps_per_epoch=len(inputs) // batch_size`.

    Args:
        inputs, labels: NumPy arrays with the examples on axis 0.
        batch_size: int.
        seed: int, the shuffling seed.
        transform: optional `(batch_inputs, rng) -> batch_inputs`
            (augmentation).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(inputs))
        for begin in range(0, len(order) - batch_size + 1, batch_size):
            index = order[begin : begin + batch_size]
            batch = inputs[index]
            if transform is not None:
                batch = transform(batch, rng)
            yield batch, labels[index]


def pad_to_batches(inputs, labels, batch_size, pad_value=0):
    """Pads examples to a multiple of `batch_size`, weighted 0.

    Returns `(inputs, labels, sample_weight)` for `evaluate` or
    `validation_data`: every batch has one shape (one compiled step on JAX)
    and the padding rows count for nothing in the metrics.
    """
    import numpy as np

    missing = -len(inputs) % batch_size

    def pad(array):
        filler = np.full((missing, *array.shape[1:]), pad_value, array.dtype)
        return np.concatenate([array, filler])

    weights = np.concatenate([np.ones(len(inputs)), np.zeros(missing)])
    return pad(inputs), pad(labels), weights.astype("float32")


def resolve_config(settings, args):
    """The setting chosen by `--quick`, with the command-line overrides.

    Also creates `args.output_dir` and takes its lock
    (`keras_attn_recipes.run_lock`); exits naming the directory and the
    owner where another process writes there.
    """
    import dataclasses

    overrides = {"seed": args.seed}
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.time_budget_minutes is not None:
        overrides["time_budget_minutes"] = args.time_budget_minutes
    if args.steps_per_execution is not None:
        overrides["steps_per_execution"] = args.steps_per_execution
    config = dataclasses.replace(
        settings["quick" if args.quick else "default"], **overrides
    )
    try:
        check_output_dir(args.output_dir, create=True)
        # Held until the recipe's process exits: one writer per directory.
        lock_for_this_process(args.output_dir, Path(sys.argv[0]).name)
    except EXPECTED_FAILURES as error:
        sys.exit(f"error: {failure_message(error)}")
    return config


def fit_steps_per_execution(wanted, steps_per_epoch):
    """The largest divisor of `steps_per_epoch` that is at most `wanted`.

    Keras runs whole groups of `steps_per_execution` batches: with an
    endless generator and `steps_per_epoch` not a multiple of the group, an
    epoch would run past `steps_per_epoch` (and the learning-rate schedule,
    counted in updates, with it). 1 on torch, whose Keras trainer takes no
    other value.
    """
    import keras

    if keras.backend.backend() == "torch":
        # Keras's torch trainer runs one step per call only.
        return 1
    wanted = max(1, min(wanted, steps_per_epoch))
    return next(n for n in range(wanted, 0, -1) if steps_per_epoch % n == 0)


def time_budget_callback(minutes):
    import keras

    class TimeBudget(keras.callbacks.Callback):
        """Stops training once `minutes` have passed."""

        def __init__(self):
            super().__init__()
            self.seconds = None if minutes is None else 60.0 * minutes

        def on_train_begin(self, logs=None):
            self.start = time.time()

        def on_train_batch_end(self, batch, logs=None):
            if self.seconds is not None and time.time() - self.start > self.seconds:
                print(f"\nTime budget of {minutes:g} min reached: stopping.")
                self.model.stop_training = True

    return TimeBudget()


def plot_history(history, metrics, path, title):
    """One panel per metric, training and validation curves per epoch.

    Args:
        history: `keras.callbacks.History.history`, a dict of lists.
        metrics: names such as `("loss", "accuracy")`; `val_` curves are
            drawn where present.
        path: the PNG to write, replaced atomically (a symbolic link there
            is replaced, not followed).
        title: the figure title.
    """
    import matplotlib

    from keras_attn.file_safety import write_atomically

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4))
    axes = [axes] if len(metrics) == 1 else axes
    for axis, metric in zip(axes, metrics):
        for prefix, style in (("", "-o"), ("val_", "--s")):
            values = history.get(prefix + metric)
            if values:
                epochs = range(1, len(values) + 1)
                axis.plot(epochs, values, style, label=prefix + metric, markersize=3)
        axis.set_xlabel("epoch")
        axis.set_title(metric.replace("_", " "))
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    try:
        write_atomically(path, lambda temporary: figure.savefig(temporary, dpi=110))
    finally:
        plt.close(figure)
    return path


def write_summary(output_dir, summary):
    """Writes `summary.json` and prints it."""
    from keras_attn.file_safety import write_text_atomically

    path = Path(output_dir) / "summary.json"
    write_text_atomically(path, json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return path
