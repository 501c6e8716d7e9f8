"""Zoo models saved on each other backend load here with the same outputs."""

import keras
import numpy as np
import pytest
from other_backend import OTHER_BACKENDS, run_on_backend

import keras_attn

# Each model: (class name, preset, constructor arguments, input builder).
BUILD_AND_SAVE = """
import sys
import keras
import numpy as np
from keras_attn import models

keras.utils.set_random_seed(3)
MODELS = {
    "classifier": models.TransformerEncoderClassifier.from_preset(
        "encoder_classifier_tiny", vocabulary_size=40, num_classes=3
    ),
    "lm": models.TransformerLM.from_preset("lm_tiny", vocabulary_size=30),
    "vit": models.VisionTransformer.from_preset(
        "vit_tiny", num_classes=5, image_size=(8, 8), num_channels=1
    ),
}
directory = sys.argv[1]
inputs = dict(np.load(f"{directory}/inputs.npz"))
for name, model in MODELS.items():
    np.save(f"{directory}/{name}.npy", keras.ops.convert_to_numpy(model(inputs[name])))
    model.save(f"{directory}/{name}.keras")
print(keras.backend.backend())
"""


def zoo_inputs():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 30, size=(2, 7)).astype("int32")
    tokens[0, 5:] = 0  # padding in the classifier's first row
    return {
        "classifier": tokens,
        "lm": tokens[:, :6],
        "vit": rng.random((2, 8, 8, 1)).astype("float32"),
    }


@pytest.fixture(scope="module", params=OTHER_BACKENDS)
def saved_on_other_backend(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"zoo_saved_on_{request.param}")
    inputs = zoo_inputs()
    np.savez(directory / "inputs.npz", **inputs)
    run_on_backend(request.param, BUILD_AND_SAVE, directory)
    return directory, inputs


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, cls",
    [
        ("classifier", keras_attn.models.TransformerEncoderClassifier),
        ("lm", keras_attn.models.TransformerLM),
        ("vit", keras_attn.models.VisionTransformer),
    ],
)
def test_keras_file_from_the_other_backend(saved_on_other_backend, name, cls):
    directory, inputs = saved_on_other_backend
    loaded = keras_attn.saving.load_model(directory / f"{name}.keras")
    assert isinstance(loaded, cls)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(inputs[name])),
        np.load(directory / f"{name}.npy"),
        atol=1e-5,
    )
