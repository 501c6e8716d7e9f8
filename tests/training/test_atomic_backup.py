"""AtomicBackupAndRestore: resumes exactly, survives partial writes, names files."""

import json

import keras
import numpy as np
import pytest

from keras_attn.training import AtomicBackupAndRestore

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 8)).astype("float32")
Y = RNG.normal(size=(64, 1)).astype("float32")


def make_model(dropout_seed=1):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            # Random state to restore. Unseeded (the default of every
            # dropout layer), torch draws from its global generators.
            keras.layers.Dropout(0.3, seed=dropout_seed),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    return model


def fit(model, epochs, callbacks):
    return model.fit(
        X,
        Y,
        batch_size=16,
        epochs=epochs,
        shuffle=False,
        callbacks=callbacks,
        verbose=0,
    )


class StopAfterEpoch(keras.callbacks.Callback):
    """Simulates a crash once `epoch` (from 0) has ended and the backup has
    marked it done: at the next epoch's start, after the backup's."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch + 1:
            raise KeyboardInterrupt


class FailAtEpochEnd(keras.callbacks.Callback):
    """An end-of-epoch writer (a checkpoint, a log) that fails at `epoch`;
    records how many epochs the backup counted while it ran."""

    def __init__(self, backup, epoch):
        super().__init__()
        self.backup, self.epoch = backup, epoch
        self.backed_up_at_epoch_end = []

    def on_epoch_end(self, epoch, logs=None):
        self.backed_up_at_epoch_end.append(self.backup.completed_epochs())
        if epoch == self.epoch:
            raise KeyboardInterrupt


@pytest.mark.parametrize("dropout_seed", [1, None], ids=["seeded", "unseeded"])
def test_resumed_training_equals_uninterrupted_training(tmp_path, dropout_seed):
    uninterrupted = make_model(dropout_seed)
    fit(uninterrupted, 4, [])

    interrupted = make_model(dropout_seed)
    backup = AtomicBackupAndRestore(tmp_path / "backup")
    with pytest.raises(KeyboardInterrupt):
        fit(interrupted, 4, [backup, StopAfterEpoch(1)])
    assert backup.completed_epochs() == 2

    resumed = make_model(dropout_seed)  # A fresh process: a fresh model.
    keras.utils.set_random_seed(7)  # and its own random state until restored
    history = fit(resumed, 4, [AtomicBackupAndRestore(tmp_path / "backup")])
    assert history.epoch == [2, 3]
    for expected, actual in zip(
        uninterrupted.get_weights(), resumed.get_weights(), strict=True
    ):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)
    assert not (tmp_path / "backup").exists()  # Deleted after a normal end.


@pytest.mark.parametrize("backup_first", [True, False], ids=["first", "last"])
def test_an_epoch_is_done_only_after_every_end_of_epoch_callback(
    tmp_path, backup_first
):
    # Wherever the backup stands in the list, it counts an epoch only
    # once every callback's `on_epoch_end` for it has returned: a writer
    # that fails at epoch 1's end leaves epoch 1 to be done again.
    backup = AtomicBackupAndRestore(tmp_path / "backup")
    failing = FailAtEpochEnd(backup, 1)
    callbacks = [backup, failing] if backup_first else [failing, backup]
    with pytest.raises(KeyboardInterrupt):
        fit(make_model(), 4, callbacks)
    # While epoch N's end-of-epoch callbacks ran, the backup counted N.
    assert failing.backed_up_at_epoch_end == [0, 1]
    assert backup.completed_epochs() == 1
    # The weights of the undone epoch were written, but nothing names them.
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert metadata["weights"] == "epoch_00001.weights.h5"

    resumed = AtomicBackupAndRestore(tmp_path / "backup", delete_checkpoint=False)
    history = fit(make_model(), 3, [resumed])
    assert history.epoch == [1, 2]  # Epoch 1 again, once.
    assert resumed.completed_epochs() == 3  # Committed when `fit` ended.
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == [
        "epoch_00003.weights.h5",
        "training_metadata.json",
    ]


def test_partial_write_is_ignored_and_old_files_are_removed(tmp_path):
    directory = tmp_path / "backup"
    with pytest.raises(KeyboardInterrupt):
        fit(make_model(), 4, [AtomicBackupAndRestore(directory), StopAfterEpoch(1)])
    # A process killed while writing epoch 3's weights leaves this behind.
    (directory / ".partial.epoch_00003.weights.h5").write_bytes(b"\x89HDF")
    assert sorted(p.name for p in directory.iterdir()) == [
        ".partial.epoch_00003.weights.h5",
        "epoch_00002.weights.h5",
        "training_metadata.json",
    ]
    history = fit(make_model(), 3, [AtomicBackupAndRestore(directory)])
    assert history.epoch == [2]


def test_corrupt_backup_names_the_file(tmp_path):
    directory = tmp_path / "backup"
    with pytest.raises(KeyboardInterrupt):
        fit(make_model(), 3, [AtomicBackupAndRestore(directory), StopAfterEpoch(0)])
    weights = directory / "epoch_00001.weights.h5"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError, match=f"{weights} cannot be loaded"):
        fit(make_model(), 3, [AtomicBackupAndRestore(directory)])

    (directory / "training_metadata.json").write_text("{not json")
    with pytest.raises(ValueError, match="training_metadata.json is not valid"):
        fit(make_model(), 3, [AtomicBackupAndRestore(directory)])


def test_non_finite_epoch_is_not_backed_up(tmp_path):
    directory = tmp_path / "backup"
    callback = AtomicBackupAndRestore(directory)
    callback.set_model(make_model())
    callback.on_epoch_end(0, {"loss": 1.0})
    callback.on_epoch_begin(1)  # Every end-of-epoch callback has run.
    callback.on_epoch_end(1, {"loss": float("nan")})
    callback.on_epoch_begin(2)
    metadata = json.loads((directory / "training_metadata.json").read_text())
    assert metadata["epoch"] == 1 and metadata["weights"] == "epoch_00001.weights.h5"
    assert not (directory / "epoch_00002.weights.h5").exists()


def test_invalid_directory_is_named():
    with pytest.raises(ValueError, match="backup_dir=''"):
        AtomicBackupAndRestore("")


def one_epoch_backup(directory):
    """A backup of one epoch, written without `fit`."""
    callback = AtomicBackupAndRestore(directory)
    callback.set_model(make_model())
    callback.on_epoch_end(0, {"loss": 1.0})
    callback.on_epoch_begin(1)
    return directory / "training_metadata.json"


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("epoch", -3, "a non-negative integer"),
        ("epoch", True, "a non-negative integer"),
        ("epoch", "2", "a non-negative integer"),
        ("epoch", 2.0, "a non-negative integer"),
        ("updates", -1, "a non-negative integer or null"),
        ("weights", 5, "the name of a weights file this callback writes"),
        ("weights", "model.keras", "the name of a weights file this callback writes"),
        ("random_states", "abc", "a list of arrays"),
        ("torch_random_state", [1, 2], "the state of torch's generators or null"),
        (
            "torch_random_state",
            {"cpu": [300], "cuda": []},
            "the state of torch's generators or null",
        ),
    ],
)
def test_metadata_values_are_checked_before_fit(tmp_path, field, value, expected):
    metadata_path = one_epoch_backup(tmp_path / "backup")
    metadata = json.loads(metadata_path.read_text())
    metadata[field] = value
    metadata_path.write_text(json.dumps(metadata))
    model = make_model()
    before = model.get_weights()
    with pytest.raises(ValueError, match=f"`{field}` must be {expected}") as info:
        fit(model, 2, [AtomicBackupAndRestore(tmp_path / "backup")])
    assert f"Received: {field}={value!r}" in str(info.value)
    assert str(metadata_path) in str(info.value)
    for weight, original in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(weight, original)  # Nothing trained.


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"epoch": 1, "weights": "\xff"}', "is not UTF-8 text"),
        (b"[1, 2]", "`the file` must be a JSON object"),
        (b'{"weights": "epoch_00001.weights.h5"}', "`epoch` must be present"),
        (b"[" * 200_000, "nested too deeply"),
    ],
    ids=["not-utf8", "list", "no-epoch", "deep"],
)
def test_unreadable_metadata_names_the_file(tmp_path, content, message):
    metadata_path = one_epoch_backup(tmp_path / "backup")
    metadata_path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as info:
        AtomicBackupAndRestore(tmp_path / "backup").completed_epochs()
    assert str(metadata_path) in str(info.value)
