"""Train a Vision Transformer on scikit-learn's 8x8 handwritten digits.

    python recipes/vit_digits.py                  # the `vit_digits` preset
    python recipes/vit_digits.py --quick          # a tiny model (the tests)
    python recipes/vit_digits.py --backend tensorflow --epochs 40

The data is the UCI optical-recognition digits set that scikit-learn ships
in its wheel (`sklearn.datasets.load_digits`: 1,797 grey 8x8 images, 10
classes; no download). Each image is cut into 16 patches of 2x2 pixels. The
recipe holds out a stratified 20 % test split, trains with AdamW and a
warm-up + cosine schedule, prints the test accuracy of the untrained and
the trained model, and writes into `--output-dir`: `model.keras`,
`learning_curves.png` and `summary.json`.
"""

import argparse
import dataclasses
import time

from keras_attn_recipes.quiet_start import quiet_start
from keras_attn_recipes.zoo_common import (
    add_common_arguments,
    fit_steps_per_execution,
    pad_to_batches,
    plot_history,
    resolve_config,
    select_backend,
    shuffled_batches,
    time_budget_callback,
    write_summary,
)


@dataclasses.dataclass(frozen=True)
class DigitsConfig:
    preset: str = "vit_digits"
    epochs: int = 60
    batch_size: int = 64
    learning_rate: float = 3e-3
    weight_decay: float = 0.05
    warmup_epochs: int = 3
    max_shift: int = 1  # random translation, in pixels
    time_budget_minutes: float | None = None
    # Updates per host round trip (`compile`), at most; see
    # `fit_steps_per_execution`.
    steps_per_execution: int = 8
    seed: int = 0


SETTINGS = {
    "default": DigitsConfig(),
    "quick": DigitsConfig(
        preset="vit_tiny", epochs=12, learning_rate=3e-3, warmup_epochs=1, max_shift=0
    ),
}


def load_digits_splits(seed):
    """`((x, y) train, (x, y) validation, (x, y) test)`, images in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")[..., None]  # (n, 8, 8, 1)
    labels = digits.target.astype("int32")
    x_rest, x_test, y_rest, y_test = train_test_split(
        images, labels, test_size=0.2, stratify=labels, random_state=seed
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=0.1, stratify=y_rest, random_state=seed
    )
    return (x_train, y_train), (x_val, y_val), (x_test, y_test)


def random_shift(max_shift):
    """Moves each image by up to `max_shift` pixels (zeros fill the border)."""
    import numpy as np

    def transform(images, rng):
        size = images.shape[1]
        padded = np.pad(images, ((0, 0), (max_shift,) * 2, (max_shift,) * 2, (0, 0)))
        dy, dx = rng.integers(0, 2 * max_shift + 1, size=(2, len(images)))
        return np.stack(
            [
                padded[i, y : y + size, x : x + size]
                for i, (y, x) in enumerate(zip(dy, dx))
            ]
        )

    return transform if max_shift else None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser, "runs/vit_digits")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    backend = select_backend(args.backend, restart=argv is None)
    import keras

    from keras_attn.file_safety import write_atomically
    from keras_attn.models import VisionTransformer

    config = resolve_config(SETTINGS, args)
    output_dir = args.output_dir

    keras.utils.set_random_seed(config.seed)
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = load_digits_splits(
        config.seed
    )
    print(
        f"Backend {backend}; digits: {len(x_train)} train, {len(x_val)} "
        f"validation, {len(x_test)} test images of 8x8."
    )
    model = VisionTransformer.from_preset(config.preset, num_classes=10)
    steps_per_epoch = len(x_train) // config.batch_size
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        warmup_target=config.learning_rate,
        warmup_steps=config.warmup_epochs * steps_per_epoch,
        decay_steps=max(1, (config.epochs - config.warmup_epochs) * steps_per_epoch),
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        # Weighted: the rows `pad_to_batches` adds have weight 0.
        weighted_metrics=["accuracy"],
        steps_per_execution=fit_steps_per_execution(
            config.steps_per_execution, steps_per_epoch
        ),
    )
    print(f"Model {config.preset}: {model.count_params():,} parameters.")
    # Equal-shaped batches: one compiled training and one evaluation step.
    validation = pad_to_batches(x_val, y_val, config.batch_size)
    test = pad_to_batches(x_test, y_test, config.batch_size)
    _, untrained_accuracy = model.evaluate(
        *test[:2], sample_weight=test[2], batch_size=config.batch_size, verbose=0
    )
    print(f"Untrained test accuracy: {untrained_accuracy:.3f}")

    start = time.time()
    history = model.fit(
        shuffled_batches(
            x_train,
            y_train,
            config.batch_size,
            config.seed,
            transform=random_shift(config.max_shift),
        ),
        steps_per_epoch=steps_per_epoch,
        shuffle=False,  # the generator shuffles
        validation_data=validation,
        validation_batch_size=config.batch_size,
        epochs=config.epochs,
        callbacks=[time_budget_callback(config.time_budget_minutes)],
        verbose=args.verbose,
    )
    training_seconds = time.time() - start
    _, test_accuracy = model.evaluate(
        *test[:2], sample_weight=test[2], batch_size=config.batch_size, verbose=0
    )
    print(f"Test accuracy: {test_accuracy:.4f} ({len(x_test)} images)")

    # Beside and renamed: a kill or a full disk leaves the old model whole.
    write_atomically(output_dir / "model.keras", model.save)
    plot_history(
        history.history,
        ("loss", "accuracy"),
        output_dir / "learning_curves.png",
        f"ViT ({config.preset}) on 8x8 digits",
    )
    summary = {
        "backend": backend,
        "config": dataclasses.asdict(config),
        "parameters": model.count_params(),
        "epochs_run": len(history.history["loss"]),
        "training_seconds": round(training_seconds, 1),
        "untrained_test_accuracy": round(float(untrained_accuracy), 4),
        "test_accuracy": round(float(test_accuracy), 4),
    }
    write_summary(output_dir, summary)
    return summary


if __name__ == "__main__":
    quiet_start()  # Before TensorFlow loads: no CUDA notices on a CPU.
    main()
