"""Zoo models saved on one backend load on another with the same outputs,
both ways."""

import inspect

import keras
import numpy as np
import pytest
from other_backend import OTHER_BACKENDS, run_on_backend

import keras_attn
from keras_attn import models

# Both directions in one process on the other backend: it loads the files
# saved here and saves its own (built by `build_models`, below, sent with
# the script, with another seed), which the test loads here.
EXCHANGE = """
import sys
import keras
import numpy as np
from keras_attn import models, saving

directory = sys.argv[1]
inputs = dict(np.load(f"{directory}/inputs.npz"))
# Saved here, loaded there.
for name in ("classifier", "lm", "vit"):
    loaded = saving.load_model(f"{directory}/{name}_here.keras")
    outputs = keras.ops.convert_to_numpy(loaded(inputs[name]))
    np.save(f"{directory}/{name}_loaded_there.npy", outputs)
# Saved there, to be loaded here.
for name, model in build_models(4).items():
    outputs = keras.ops.convert_to_numpy(model(inputs[name]))
    np.save(f"{directory}/{name}_there.npy", outputs)
    model.save(f"{directory}/{name}_there.keras")
print(keras.backend.backend())
"""


def build_models(seed):
    """The tiny zoo models, by name; the same function runs there."""
    keras.utils.set_random_seed(seed)
    return {
        "classifier": models.TransformerEncoderClassifier.from_preset(
            "encoder_classifier_tiny", vocabulary_size=40, num_classes=3
        ),
        "lm": models.TransformerLM.from_preset("lm_tiny", vocabulary_size=30),
        "vit": models.VisionTransformer.from_preset(
            "vit_tiny", num_classes=5, image_size=(8, 8), num_channels=1
        ),
    }


# Each pair of backends once when they run side by side (as
# tests/models/backend_pairs.py deals them): the case of `other` runs on
# the backend before it in the cycle jax -> tensorflow -> torch -> jax, and
# checks both directions. A backend run alone runs every case.
_RUNS_ON = {"tensorflow": "jax", "torch": "tensorflow", "jax": "torch"}
OTHER_BACKEND_CASES = [
    pytest.param(other, marks=pytest.mark.split_backend(_RUNS_ON[other]))
    for other in OTHER_BACKENDS
]


def zoo_inputs():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 30, size=(2, 7)).astype("int32")
    tokens[0, 5:] = 0  # padding in the classifier's first row
    return {
        "classifier": tokens,
        "lm": tokens[:, :6],
        "vit": rng.random((2, 8, 8, 1)).astype("float32"),
    }


@pytest.fixture(scope="module", params=OTHER_BACKEND_CASES)
def exchanged_with_other_backend(request, tmp_path_factory):
    """`(directory, inputs, outputs here)`: the models saved here and on
    the other backend, each loaded on the other side."""
    directory = tmp_path_factory.mktemp(f"zoo_exchanged_with_{request.param}")
    inputs = zoo_inputs()
    np.savez(directory / "inputs.npz", **inputs)
    outputs_here = {}
    for name, model in build_models(3).items():
        outputs_here[name] = keras.ops.convert_to_numpy(model(inputs[name]))
        model.save(directory / f"{name}_here.keras")
    run_on_backend(
        request.param,
        inspect.getsource(build_models) + EXCHANGE,
        directory,
    )
    return directory, inputs, outputs_here


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, cls",
    [
        ("classifier", keras_attn.models.TransformerEncoderClassifier),
        ("lm", keras_attn.models.TransformerLM),
        ("vit", keras_attn.models.VisionTransformer),
    ],
)
def test_keras_file_from_the_other_backend(exchanged_with_other_backend, name, cls):
    directory, inputs, outputs_here = exchanged_with_other_backend
    # Saved there, loaded here.
    loaded = keras_attn.saving.load_model(directory / f"{name}_there.keras")
    assert isinstance(loaded, cls)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(inputs[name])),
        np.load(directory / f"{name}_there.npy"),
        atol=1e-5,
    )
    # Saved here, loaded there.
    np.testing.assert_allclose(
        np.load(directory / f"{name}_loaded_there.npy"), outputs_here[name], atol=1e-5
    )
