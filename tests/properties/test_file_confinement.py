"""File confinement: a path read from a file the user did not type stays in
its folder.

A backup's `training_metadata.json` and a preset's JSON files name other
files; a hostile or corrupt one (`../`, an absolute path, a symbolic link
out) must never make keras-attn read, overwrite or delete a file outside
the folder. A preset name means the registry only; a folder in the working
directory is used only when it is given as a path.
"""

import json
import shutil

import keras
import numpy as np
import pytest
from untrained_runs import untrained_model_and_tokenizer

from keras_attn.models import TransformerLM, preset_io
from keras_attn.text import SubwordTokenizer, TextGenerator, Translator
from keras_attn.training import AtomicBackupAndRestore

# File handling, the same code on every backend: side by side it runs on
# torch only (`split_backend`); a one-backend run runs it.
pytestmark = pytest.mark.split_backend("torch")

# --- Backups --------------------------------------------------------------

X = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
Y = X[:, :1]


def make_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def fit(model, epochs, backup):
    return model.fit(X, Y, batch_size=8, epochs=epochs, callbacks=[backup], verbose=0)


@pytest.fixture
def backup_and_victim(tmp_path):
    """A backup folder holding one epoch, and a valid weights file beside it.

    The victim would load without error, so only the confinement check
    stands between a hostile metadata file and reading (then deleting) it.
    """
    directory = tmp_path / "backup"
    callback = AtomicBackupAndRestore(directory)
    callback.set_model(make_model())
    callback.on_epoch_end(0, {"loss": 1.0})
    callback.on_epoch_begin(1)  # The backup marks epoch 1 done here.
    victim = tmp_path / "victim.weights.h5"
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]).save_weights(victim)
    return directory, victim, victim.read_bytes()


def set_metadata(directory, **fields):
    path = directory / "training_metadata.json"
    metadata = {**json.loads(path.read_text()), **fields}
    path.write_text(json.dumps(metadata))


@pytest.mark.parametrize("hostile", ["relative", "absolute", "symlink", "nested"])
def test_hostile_backup_metadata_never_reads_or_deletes_the_victim(
    backup_and_victim, hostile
):
    directory, victim, victim_bytes = backup_and_victim
    name = {
        "relative": "../victim.weights.h5",
        "absolute": str(victim),
        "symlink": "epoch_00007.weights.h5",
        "nested": "epoch_00001.weights.h5/../../victim.weights.h5",
    }[hostile]
    if hostile == "symlink":
        (directory / name).symlink_to(victim)
    set_metadata(directory, weights=name)
    # `fit` (restore, then save and delete the previous weights) and the
    # save of an epoch alone (which deletes the previous weights) refuse.
    with pytest.raises(ValueError, match="`weights` must be") as info:
        fit(make_model(), 2, AtomicBackupAndRestore(directory))
    assert "training_metadata.json" in str(info.value)
    assert f"weights={name!r}" in str(info.value)
    callback = AtomicBackupAndRestore(directory)
    callback.set_model(make_model())
    with pytest.raises(ValueError, match="`weights` must be"):
        callback.on_epoch_end(1, {"loss": 1.0})
    assert victim.read_bytes() == victim_bytes


def test_a_metadata_file_linked_out_of_the_folder_is_refused(backup_and_victim):
    directory, _, _ = backup_and_victim
    outside = directory.parent / "outside.json"
    shutil.move(directory / "training_metadata.json", outside)
    (directory / "training_metadata.json").symlink_to(outside)
    with pytest.raises(ValueError, match="outside its folder"):
        AtomicBackupAndRestore(directory).completed_epochs()


def test_ending_fit_deletes_only_the_callbacks_own_files(tmp_path):
    directory = tmp_path / "backup"
    directory.mkdir()
    (directory / "notes.txt").write_text("mine")
    victim = tmp_path / "victim.weights.h5"
    victim.write_bytes(b"precious")
    # A link with the name of a backup file: removed neither it nor its target.
    (directory / "epoch_00009.weights.h5").symlink_to(victim)
    fit(make_model(), 2, AtomicBackupAndRestore(directory))
    assert sorted(p.name for p in directory.iterdir()) == [
        "epoch_00009.weights.h5",
        "notes.txt",
    ]
    assert victim.read_bytes() == b"precious"


# --- Presets --------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_preset(tmp_path_factory):
    """A tiny `TransformerLM` preset with a SentencePiece tokenizer."""
    model, tokenizer = untrained_model_and_tokenizer(TransformerLM, "lm_tiny")
    directory = tmp_path_factory.mktemp("saved") / "preset"
    model.save_to_preset(directory, tokenizer=tokenizer)
    return directory, model


@pytest.fixture
def preset(saved_preset, tmp_path):
    """A fresh copy of the preset, and the model it was saved from."""
    directory, model = saved_preset
    copy = tmp_path / "preset"
    shutil.copytree(directory, copy)
    return copy, model


TOKENS = np.array([[5, 6, 7, 3]], "int32")


def outputs(model):
    return keras.ops.convert_to_numpy(model(TOKENS))


SHIPPED = "multi30k_en_lm"


def test_a_bare_name_means_the_registry_never_a_local_folder(
    preset, tmp_path, monkeypatch
):
    directory, model = preset
    monkeypatch.chdir(tmp_path)
    # A decoy: a valid preset in a folder named like the shipped one.
    shutil.copytree(directory, tmp_path / SHIPPED)
    assert preset_io.preset_directory(SHIPPED) == preset_io.PRESETS_DIR / SHIPPED
    shipped = SubwordTokenizer.from_preset(SHIPPED)
    decoy = SubwordTokenizer.from_preset(f"./{SHIPPED}")
    assert shipped.vocabulary_size != decoy.vocabulary_size == 120
    # An unknown bare name is not looked up in the working directory; the
    # error says how to ask for the folder.
    shutil.copytree(directory, tmp_path / "my_preset")
    for load in (
        TransformerLM.from_preset,
        SubwordTokenizer.from_preset,
        Translator.from_preset,
        TextGenerator.from_preset,
    ):
        with pytest.raises(ValueError, match="Unknown preset") as info:
            load("my_preset")
        assert "pass its path, `'./my_preset'`" in str(info.value)
    assert TextGenerator.from_preset("./my_preset").tokenizer.vocabulary_size == 120
    # Given as a path (./, a separator, absolute, pathlib.Path), it loads.
    from pathlib import Path

    for path in ("./my_preset", "preset/", str(directory), Path("my_preset")):
        found = preset_io.preset_directory(path)
        assert found.resolve() == (tmp_path / Path(path).name).resolve()
    loaded = TransformerLM.from_preset("./my_preset")
    np.testing.assert_allclose(outputs(loaded), outputs(model), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="No preset directory"):
        TransformerLM.from_preset("./missing")


def link(directory, file_name, target):
    """Replaces `directory/file_name` with a symbolic link to `target`."""
    shutil.move(directory / file_name, target)
    (directory / file_name).symlink_to(target)


PRESET_FILES = {
    "weights": "model.weights.h5",
    "config": "config.json",
    "metadata": "metadata.json",
    "tokenizer_config": "tokenizer.json",
    "tokenizer_model": "assets/tokenizer/tokenizer.model",
}


def load_everything(directory):
    model = TransformerLM.from_preset(directory)
    tokenizer = SubwordTokenizer.from_preset(directory)
    return model, tokenizer


@pytest.mark.parametrize("part", list(PRESET_FILES))
def test_a_symbolic_link_inside_the_preset_is_followed(preset, part):
    directory, model = preset
    file_name = PRESET_FILES[part]
    (directory / "store").mkdir()
    link(directory, file_name, directory / "store" / "real_file")
    loaded, tokenizer = load_everything(directory)
    np.testing.assert_allclose(outputs(loaded), outputs(model), atol=1e-6)
    assert tokenizer.vocabulary_size == 120


@pytest.mark.parametrize("part", list(PRESET_FILES))
def test_a_symbolic_link_out_of_the_preset_is_refused(preset, tmp_path, part):
    directory, _ = preset
    file_name = PRESET_FILES[part]
    outside = tmp_path / "outside_file"
    link(directory, file_name, outside)
    with pytest.raises(ValueError, match="outside the preset") as info:
        load_everything(directory)
    assert "symbolic link" in str(info.value)
    assert str(outside) in str(info.value)


@pytest.mark.parametrize(
    "model_file, error, message",
    [
        ("../victim.model", ValueError, "outside the preset"),
        ("/etc/hostname", ValueError, "as a file name inside the preset"),
        ("", ValueError, "as a file name inside the preset"),
        (7, ValueError, "`model_file` must be a file name string"),
    ],
)
def test_the_tokenizer_model_file_named_in_json_is_confined(
    preset, tmp_path, model_file, error, message
):
    directory, _ = preset
    shutil.copy(directory / PRESET_FILES["tokenizer_model"], tmp_path / "victim.model")
    config = json.loads((directory / "tokenizer.json").read_text())
    (directory / "tokenizer.json").write_text(
        json.dumps({**config, "model_file": model_file})
    )
    with pytest.raises(error, match=message) as info:
        SubwordTokenizer.from_preset(directory)
    assert "tokenizer.json" in str(info.value)
