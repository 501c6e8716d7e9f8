"""`SinusoidalPositionEncoding` against the formula of section 3.5."""

import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import SinusoidalPositionEncoding


def paper_encoding(length, dim, start=0, max_wavelength=10000.0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    encoding = np.zeros((length, dim))
    for pos in range(start, start + length):
        for i in range(dim // 2):
            angle = pos / max_wavelength ** (2 * i / dim)
            encoding[pos - start, 2 * i] = np.sin(angle)
            encoding[pos - start, 2 * i + 1] = np.cos(angle)
    return encoding


def test_layer_contract():
    run_layer_test(
        SinusoidalPositionEncoding,
        dict(max_wavelength=1000),
        np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        expected_num_trainable_weights=0,
    )


@pytest.mark.parametrize("dim", [2, 8, 32])
def test_matches_paper_formula(dim):
    inputs = np.zeros((2, 64, dim), "float32")
    encoding = ops.convert_to_numpy(SinusoidalPositionEncoding()(inputs))
    expected = paper_encoding(64, dim)
    np.testing.assert_allclose(encoding[0], expected, atol=2e-5)
    np.testing.assert_array_equal(encoding[1], encoding[0])


def test_max_wavelength():
    encoding = SinusoidalPositionEncoding(max_wavelength=100)(np.zeros((1, 10, 6)))
    np.testing.assert_allclose(
        ops.convert_to_numpy(encoding)[0],
        paper_encoding(10, 6, max_wavelength=100.0),
        atol=1e-5,
    )


@pytest.mark.parametrize("as_tensor", [False, True])
def test_start_index_offsets_positions(as_tensor):
    start = ops.convert_to_tensor(7, "int32") if as_tensor else 7
    encoding = SinusoidalPositionEncoding()(np.zeros((1, 3, 8)), start_index=start)
    np.testing.assert_allclose(
        ops.convert_to_numpy(encoding)[0], paper_encoding(3, 8, start=7), atol=1e-5
    )


def test_odd_dimension_is_rejected():
    with pytest.raises(ValueError, match=r"inputs\.shape\[-1\]=7"):
        SinusoidalPositionEncoding()(np.zeros((1, 3, 7), "float32"))


def test_non_positive_max_wavelength_is_rejected():
    with pytest.raises(ValueError, match="max_wavelength=0"):
        SinusoidalPositionEncoding(max_wavelength=0)
