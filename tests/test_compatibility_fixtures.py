"""Files written by main at 5c2228a load with today's code, outputs unchanged.

`tests/fixtures/compat_5c2228a/` holds, for layers and every zoo model, a
`.keras` file, a weights file and the inputs and inference outputs that
commit gave (`make_fixtures.py` there says how they were made). The
attention core of issue #36 renamed sub-layers and arguments
(`_query_dense`, `flash_attention`); these tests hold it to loading what
users saved before, on every backend.
"""

import os

import keras
import numpy as np
import pytest

import keras_attn  # noqa: F401  (registers the package's classes)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "compat_5c2228a")
CASES = sorted(
    name[: -len(".npz")] for name in os.listdir(FIXTURES) if name.endswith(".npz")
)


def _inputs_and_outputs(case):
    arrays = np.load(os.path.join(FIXTURES, f"{case}.npz"))
    inputs = {}
    for key in sorted(arrays.files):
        if not key.startswith("input_"):
            continue
        index, _, field = key[len("input_") :].partition("_")
        if field:
            inputs.setdefault(int(index), {})[field] = arrays[key]
        else:
            inputs[int(index)] = arrays[key]
    inputs = [inputs[i] for i in sorted(inputs)]
    outputs = [
        arrays[f"output_{i}"]
        for i in range(len(arrays.files))
        if f"output_{i}" in arrays
    ]
    return (inputs[0] if len(inputs) == 1 else inputs), outputs


def _check_outputs(model, case):
    inputs, expected = _inputs_and_outputs(case)
    outputs = keras.tree.flatten(model(inputs, training=False))
    assert len(outputs) == len(expected)
    for output, reference in zip(outputs, expected):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(output), reference, rtol=1e-5, atol=1e-5
        )


def test_every_case_has_its_files():
    assert len(CASES) >= 12, CASES
    for case in CASES:
        for suffix in (".keras", ".weights.h5"):
            assert os.path.exists(os.path.join(FIXTURES, case + suffix)), case


@pytest.fixture(scope="module", params=CASES)
def case(request):
    """`(case, the model its `.keras` file loads)`, loaded once for both
    tests of the case (neither changes it)."""
    name = request.param
    return name, keras.saving.load_model(os.path.join(FIXTURES, f"{name}.keras"))


def test_keras_file_of_5c2228a_loads_with_the_same_outputs(case):
    name, model = case
    _check_outputs(model, name)


def test_weights_file_of_5c2228a_loads_into_todays_model(case):
    name, saved = case
    # A fresh model of today's code from the saved config, weights loaded
    # from the weights-only file: the weight paths must still match.
    model = saved.__class__.from_config(saved.get_config())
    model.load_weights(os.path.join(FIXTURES, f"{name}.weights.h5"))
    _check_outputs(model, name)
