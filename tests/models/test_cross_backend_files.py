"""A preset or `.keras` file saved on one backend loads on another, with
the same outputs, both ways.

Each case runs one script on the other backend (tests/other_backend.py,
a subprocess: seconds of imports) for both kinds of file: it loads the
files saved here and saves its own, which the tests load here. When the
backends run side by side, each pair runs once (backend_pairs.py).
"""

import json

import keras
import numpy as np
import pytest
from backend_pairs import other_backend_cases
from other_backend import run_on_backend

from keras_attn.models import Transformer

# Padded on both sides: the masks travel with the files too.
SOURCE = np.array([[5, 7, 3, 9, 4, 0], [6, 3, 8, 0, 0, 0]], "int32")
TARGET = np.array([[1, 7, 7, 4, 5], [1, 9, 3, 6, 0]], "int32")
INPUTS = {"encoder_tokens": SOURCE, "decoder_tokens": TARGET}


def outputs(model):
    return keras.ops.convert_to_numpy(model(INPUTS, training=False))


def preset_model(seed):
    keras.utils.set_random_seed(seed)
    return Transformer.from_preset("transformer_tiny", vocabulary_size=20)


def keras_file_model(seed):
    keras.utils.set_random_seed(seed)
    return Transformer.from_preset(
        "transformer_tiny", vocabulary_size=16, dropout=0.0, normalize_first=True
    )


ON_THE_OTHER_BACKEND = """
import sys
from pathlib import Path
import keras
import numpy as np
from keras_attn.models import Transformer

directory = Path(sys.argv[1])
inputs = dict(np.load(directory / "inputs.npz"))


def outputs(model):
    return keras.ops.convert_to_numpy(model(inputs, training=False))


# Saved here, loaded there.
here = Transformer.from_preset(directory / "saved_here")
np.save(directory / "preset_loaded_there.npy", outputs(here))
here = keras.saving.load_model(directory / "here.keras")
np.save(directory / "keras_file_loaded_there.npy", outputs(here))
# Saved there, to be loaded here.
keras.utils.set_random_seed(5)
there = Transformer.from_preset("transformer_tiny", vocabulary_size=20)
there.save_to_preset(directory / "saved_there", weights_dtype="float16")
np.save(directory / "preset_there.npy", outputs(there))
keras.utils.set_random_seed(1)
there = Transformer.from_preset(
    "transformer_tiny", vocabulary_size=16, dropout=0.0, normalize_first=True
)
there.save(directory / "there.keras")
np.save(directory / "keras_file_there.npy", outputs(there))
print(keras.backend.backend())
"""


@pytest.fixture(scope="module", params=other_backend_cases())
def exchanged(request, tmp_path_factory):
    """`(other, directory, models)`: the files saved here and on `other`,
    and the models that saved them here (by kind of file)."""
    other = request.param
    directory = tmp_path_factory.mktemp(f"exchanged_with_{other}")
    np.savez(directory / "inputs.npz", **INPUTS)
    models = {"preset": preset_model(0), "keras_file": keras_file_model(2)}
    models["preset"].save_to_preset(directory / "saved_here")
    models["keras_file"].save(directory / "here.keras")
    run_on_backend(other, ON_THE_OTHER_BACKEND, directory)
    return other, directory, models


@pytest.mark.slow
def test_a_preset_loads_on_the_other_backend_with_the_same_outputs(exchanged):
    other, directory, models = exchanged
    # Saved here, loaded there.
    np.testing.assert_allclose(
        np.load(directory / "preset_loaded_there.npy"),
        outputs(models["preset"]),
        atol=1e-5,
    )
    # Saved there (float16 weights), loaded here.
    metadata = json.loads((directory / "saved_there" / "metadata.json").read_text())
    assert metadata["backend"] == other
    loaded = Transformer.from_preset(directory / "saved_there")
    np.testing.assert_allclose(
        outputs(loaded), np.load(directory / "preset_there.npy"), atol=5e-3
    )


@pytest.mark.slow
def test_keras_file_from_the_other_backend(exchanged):
    _, directory, models = exchanged
    np.testing.assert_allclose(
        np.load(directory / "keras_file_loaded_there.npy"),
        outputs(models["keras_file"]),
        atol=1e-5,
    )
    loaded = keras.saving.load_model(directory / "there.keras")
    np.testing.assert_allclose(
        outputs(loaded), np.load(directory / "keras_file_there.npy"), atol=1e-5
    )
