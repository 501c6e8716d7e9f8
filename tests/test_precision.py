"""The test session pins float32 matrix products to full precision.

`tests/conftest.py` switches TF32-style products off (JAX's default matmul
precision on a GPU, TensorFlow's TensorFloat-32), so that the float32
reference comparisons hold on a GPU as on a CPU.
"""

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's setting")
def test_jax_matmul_precision_is_highest():
    import jax

    assert str(jax.config.jax_default_matmul_precision).lower() == "highest"


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's setting")
def test_tensorflow_tensor_float_32_is_off():
    import tensorflow as tf

    assert tf.config.experimental.tensor_float_32_execution_enabled() is False


def test_float32_product_matches_float64():
    # A product that TF32 (10 mantissa bits) would miss by ~1e-3.
    rng = np.random.default_rng(0)
    a = rng.normal(size=(64, 256)).astype("float32")
    b = rng.normal(size=(256, 64)).astype("float32")
    product = keras.ops.convert_to_numpy(keras.ops.matmul(a, b))
    expected = a.astype("float64") @ b.astype("float64")
    np.testing.assert_allclose(product, expected, rtol=1e-4, atol=1e-4)
