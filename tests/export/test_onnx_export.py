"""ONNX export of every zoo model's forward pass, run in ONNX Runtime.

Each artifact runs in a fresh process that imports neither Keras nor
TensorFlow (tests/export/onnx_client.py), against the in-memory model.
The cells that cannot work today are tested as the failures they are, so
that an upstream fix shows up here (docs/serving.md, "Formats").
"""

import os
import sys

import keras
import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from keras_attn.export.onnx_export import export_onnx  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from onnx_client import RUN_ONNX, run_artifact, run_artifact_on_each  # noqa: E402
from zoo_cases import ZOO_MODELS, make_inputs, make_model  # noqa: E402

BACKEND = keras.backend.backend()
# The converted models have one layer: the converters treat every layer
# alike, and their time grows with the layers (half that of the presets' 2).
ONE_LAYER = dict(num_layers=1)
# float32 reassociation between Keras's kernels and ONNX Runtime's
# (1.5e-6 measured on the tiny models).
TOLERANCE = dict(rtol=1e-5, atol=1e-5)
# Dynamic batch and length: two shapes, one artifact.
SHAPES = ((2, 5), (3, 9))


def named(kind, inputs, model):
    if isinstance(inputs, dict):
        return inputs
    return {model.inputs[0].name: inputs}


def check_shapes(kind, model, path, tmp_path):
    """The artifact at `path` equals `model` at each of `SHAPES`, in one session."""
    inputs = [make_inputs(kind, batch_size=b, length=n) for b, n in SHAPES]
    served = run_artifact_on_each(
        RUN_ONNX, path, [named(kind, x, model) for x in inputs], tmp_path
    )
    for x, got in zip(inputs, served, strict=True):
        expected = keras.ops.convert_to_numpy(model(x))
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, **TOLERANCE)


@pytest.mark.skipif(BACKEND == "jax", reason="jax2onnx fails: see the JAX test below")
@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_onnx_runtime_equals_the_keras_model(kind, tmp_path):
    if BACKEND == "tensorflow":
        pytest.importorskip("tf2onnx")
    model = make_model(kind, **ONE_LAYER)
    path = export_onnx(model, tmp_path / f"{kind}.onnx")
    # One self-contained file: torch wrote the weights to a hidden
    # `.partial-*.data` beside it, which the rename did not move.
    assert [p.name for p in tmp_path.iterdir()] == [f"{kind}.onnx"]
    check_shapes(kind, model, path, tmp_path)


@pytest.mark.skipif(BACKEND != "torch", reason="torch only")
def test_torch_fixed_shapes_go_through_keras_export(tmp_path):
    model = make_model("lm", **ONE_LAYER)
    path = export_onnx(model, tmp_path / "lm.onnx", batch_size=2, sequence_length=5)
    inputs = make_inputs("lm", batch_size=2, length=5)
    expected = keras.ops.convert_to_numpy(model(inputs))
    served = run_artifact(RUN_ONNX, path, named("lm", inputs, model), tmp_path)
    np.testing.assert_allclose(served, expected, **TOLERANCE)


@pytest.mark.skipif(BACKEND == "jax", reason="jax2onnx fails: see the JAX tests below")
# The decoder's causal buckets (LM) and the encoder's bidirectional ones
# (classifier); the Transformer holds both and takes minutes on torch.
@pytest.mark.parametrize("kind", ["lm", "classifier"])
def test_relative_position_models_run_at_dynamic_shapes(kind, tmp_path):
    """T5's relative bias exported from torch ran in ONNX Runtime at 1x1 only.

    Keras's torch `take` of a 1-D table ended in a `Squeeze` that ONNX
    Runtime refuses for more than one element (`Dimension of input 0 must
    be 1 instead of 25`); TensorFlow's export was right.
    """
    if BACKEND == "tensorflow":
        pytest.importorskip("tf2onnx")
    model = make_model(kind, position="relative", **ONE_LAYER)
    path = export_onnx(model, tmp_path / f"{kind}.onnx")
    # One self-contained file: torch wrote the weights to a hidden
    # `.partial-*.data` beside it, which the rename did not move.
    assert [p.name for p in tmp_path.iterdir()] == [f"{kind}.onnx"]
    check_shapes(kind, model, path, tmp_path)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
def test_jax_without_jax2onnx_says_what_works(tmp_path, monkeypatch):
    """Keras said "install jax2onnx", which fails on most of these models."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "jax2onnx" else find_spec(name, *args),
    )
    with pytest.raises(ImportError) as error:
        export_onnx(make_model("lm"), tmp_path / "lm.onnx")
    message = str(error.value)
    assert "KERAS_BACKEND=tensorflow or KERAS_BACKEND=torch" in message
    assert "only at a fixed `batch_size` and `sequence_length`" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
@pytest.mark.parametrize(
    "kind, error",
    [
        # jax2onnx 0.17's `jnp.arange` plugin gets `stop=None` from Keras.
        ("lm", "jax.numpy.arange"),
        # A reshape of the symbolic batch dimension.
        ("vit", "reshape with symbolic dimensions"),
    ],
)
def test_jax_export_fails_upstream(kind, error, tmp_path):
    """What jax2onnx cannot convert is refused naming what works instead.

    Keras's own `model.export` still raises jax2onnx's `TypeError`, so that
    an upstream fix shows up here.
    """
    pytest.importorskip("jax2onnx")
    model = make_model(kind)
    with pytest.raises(ValueError, match=error) as refused:
        export_onnx(model, tmp_path / f"{kind}.onnx")
    assert "KERAS_BACKEND=tensorflow or KERAS_BACKEND=torch" in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # no partial file left
    with pytest.raises(TypeError, match=error):
        model.export(str(tmp_path / "keras.onnx"), format="onnx", verbose=False)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
@pytest.mark.parametrize("kind", ["classifier", "vit"])
def test_jax_fixed_shapes_of_the_classifiers_convert(kind, tmp_path):
    pytest.importorskip("jax2onnx")
    model = make_model(kind)
    path = export_onnx(
        model, tmp_path / f"{kind}.onnx", batch_size=2, sequence_length=5
    )
    inputs = make_inputs(kind, batch_size=2, length=5)
    expected = keras.ops.convert_to_numpy(model(inputs))
    served = run_artifact(RUN_ONNX, path, named(kind, inputs, model), tmp_path)
    np.testing.assert_allclose(served, expected, **TOLERANCE)
