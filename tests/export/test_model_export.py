"""`model.export` of every zoo model: one SavedModel, any batch and length."""

import os
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from zoo_cases import ZOO_MODELS, make_inputs, make_model  # noqa: E402

SHAPES = ((2, 5), (3, 9))  # (batch, length), both served by one artifact
# The exported models have one layer: the export treats every layer alike,
# and its time grows with the layers (half that of the presets' 2).
ONE_LAYER = dict(num_layers=1)


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="Keras exports a SavedModel from torch only through torch_xla",
)
@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_export_serves_two_batch_sizes_and_lengths(kind, tmp_path):
    model = make_model(kind, **ONE_LAYER)
    path = os.path.join(tmp_path, "saved_model")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TensorFlow's and jax2tf's notices.
        model.export(path, verbose=False)
    loaded = tf.saved_model.load(path)  # keeps the variables alive
    for batch_size, length in SHAPES:
        inputs = make_inputs(kind, batch_size=batch_size, length=length)
        expected = keras.ops.convert_to_numpy(model(inputs))
        served = np.asarray(loaded.serve(inputs))
        assert served.shape == expected.shape
        np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
