"""`UpdateBudget` counts, logs and stops at update counts, with any
`steps_per_execution`; the recipes' `steps_per_execution` settings."""

import csv

import keras
import numpy as np
import pytest

from keras_attn_recipes.translation_config import SETTINGS, TranslationConfig
from keras_attn_recipes.update_budget import UpdateBudget
from keras_attn_recipes.zoo_common import fit_steps_per_execution

BATCHES_PER_EPOCH = 10
ON_TORCH = keras.backend.backend() == "torch"
needs_groups = pytest.mark.skipif(
    ON_TORCH, reason="Keras's torch trainer takes steps_per_execution=1 only"
)


def run(tmp_path, steps_per_execution, total_updates, epochs=3):
    """Fits a one-weight model; returns (updates, log rows, epoch updates)."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss="mse",
        steps_per_execution=steps_per_execution,
    )
    x = np.ones((2 * BATCHES_PER_EPOCH, 2), "float32")
    y = np.zeros((2 * BATCHES_PER_EPOCH, 1), "float32")
    path = tmp_path / f"updates_{steps_per_execution}.csv"
    budget = UpdateBudget(total_updates, log_path=path, log_every=5)
    history = model.fit(
        x, y, batch_size=2, epochs=epochs, callbacks=[budget], verbose=0
    )
    with open(path) as file:
        rows = [int(row["update"]) for row in csv.DictReader(file)]
    # The model's own count, read after `fit` synchronised the state.
    return int(model.optimizer.iterations), rows, history.history["updates"]


def test_one_step_per_execution_is_exact(tmp_path):
    updates, rows, per_epoch = run(tmp_path, 1, total_updates=23)
    assert updates == 23
    assert rows == [5, 10, 15, 20]
    assert per_epoch == [10, 20, 23]


@needs_groups
def test_a_group_dividing_the_budget_and_the_log_is_exact(tmp_path):
    updates, rows, per_epoch = run(tmp_path, 5, total_updates=25)
    assert updates == 25
    assert rows == [5, 10, 15, 20, 25]
    assert per_epoch == [10, 20, 25]


@needs_groups
def test_other_groups_count_truly_and_stop_within_one_group(tmp_path):
    # Groups of 4 over 10-batch epochs end after batches 4, 8, 10 (a last
    # group of 2), 14, 18, 20, 24: each log row is the first group end at
    # or past a multiple of 5, labelled with its true count, and training
    # stops at the first group end at or past 23.
    updates, rows, per_epoch = run(tmp_path, 4, total_updates=23)
    assert updates == 24
    assert rows == [8, 10, 18, 20]
    assert per_epoch == [10, 20, 24]


def test_translation_steps_per_execution_defaults_to_one_and_is_validated():
    assert all(config.steps_per_execution == 1 for config in SETTINGS.values())
    assert SETTINGS["quick"].replace(steps_per_execution=4).steps_per_execution == 4
    with pytest.raises(ValueError, match="steps_per_execution=0"):
        TranslationConfig(epochs=1, steps_per_execution=0)


@pytest.mark.parametrize(
    "wanted, steps_per_epoch, expected",
    [(8, 64, 8), (8, 30, 6), (8, 7, 7), (8, 13, 1), (1, 64, 1), (16, 4, 4)],
)
def test_zoo_steps_per_execution_divides_the_epoch(wanted, steps_per_epoch, expected):
    expected = 1 if ON_TORCH else expected
    assert fit_steps_per_execution(wanted, steps_per_epoch) == expected
