"""LiteRT export of the zoo models, run in the `ai-edge-litert` interpreter.

Each `.tflite` runs in a fresh process without Keras or TensorFlow, against
the in-memory model: float32 to 1e-5, dynamic-range int8 to the tolerance
of 8-bit weights.
"""

import os
import sys

import keras
import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="Keras exports LiteRT from TensorFlow (torch: litert-torch, untested)",
)

from keras_attn.export.litert_export import export_litert  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from onnx_client import RUN_LITERT, run_artifact, run_artifact_on_each  # noqa: E402
from zoo_cases import ZOO_MODELS, make_inputs, make_model  # noqa: E402

BATCH_SIZE, LENGTH = 2, 5
# The converted models have one layer: the converter treats every layer
# alike, and its time grows with the layers (half that of the presets' 2).
ONE_LAYER = dict(num_layers=1)


def named(inputs, model):
    return inputs if isinstance(inputs, dict) else {model.inputs[0].name: inputs}


@pytest.mark.parametrize("quantize", [None, "dynamic_range"])
@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_litert_interpreter_equals_the_keras_model(kind, quantize, tmp_path):
    model = make_model(kind, **ONE_LAYER)
    path = export_litert(
        model,
        tmp_path / f"{kind}.tflite",
        sequence_length=LENGTH,
        batch_size=BATCH_SIZE,
        quantize=quantize,
    )
    inputs = make_inputs(kind, batch_size=BATCH_SIZE, length=LENGTH)
    if kind == "transformer":
        inputs["encoder_tokens"] = inputs["encoder_tokens"][:, :LENGTH]
    expected = keras.ops.convert_to_numpy(model(inputs))
    served = run_artifact(RUN_LITERT, path, named(inputs, model), tmp_path)
    assert served.shape == expected.shape
    if quantize is None:
        np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    else:
        # 8-bit weights: close, not equal (and not the float result).
        error = np.abs(served - expected).max()
        assert 0 < error < 0.1 * np.abs(expected).max(), error


def test_token_models_need_a_fixed_length(tmp_path):
    with pytest.raises(Exception, match="StridedSlice"):
        export_litert(
            make_model("classifier", **ONE_LAYER), tmp_path / "classifier.tflite"
        )


def test_vit_serves_any_batch_size(tmp_path):
    model = make_model("vit", **ONE_LAYER)
    path = export_litert(model, tmp_path / "vit.tflite")
    inputs = [make_inputs("vit", batch_size=batch_size) for batch_size in (1, 3)]
    served = run_artifact_on_each(
        RUN_LITERT, path, [named(x, model) for x in inputs], tmp_path
    )
    for x, got in zip(inputs, served, strict=True):
        expected = keras.ops.convert_to_numpy(model(x))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
