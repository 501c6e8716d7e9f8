"""The one private JAX API of keras-attn, watched: `tensorflow_compatible_stablehlo`.

JAX has no public setting for the StableHLO version that `jax.export` (and
so `jax2tf`) writes; `keras_attn.export.jax_stablehlo` lowers it by patching
`jax._src.export._export.hlo.get_version_from_compatibility_requirement`.
These tests fail loudly when a JAX upgrade moves that function or when the
patch stops giving modules the installed TensorFlow can read.
"""

import keras
import pytest

from keras_attn.export.jax_stablehlo import tensorflow_compatible_stablehlo

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="patches JAX's export only"
)


def _version(text):
    return tuple(int(part) for part in str(text).split("."))


def test_the_patched_private_function_still_exists():
    from jax._src.export import _export

    # If this fails, JAX moved the function: update jax_stablehlo.py (or
    # drop it, if JAX's default target is now one TensorFlow reads).
    assert callable(_export.hlo.get_version_from_compatibility_requirement)
    assert hasattr(_export.hlo, "StablehloCompatibilityRequirement")


def test_within_the_block_jax_targets_the_tensorflow_version():
    from jax._src.export import _export
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tf_stablehlo

    hlo = _export.hlo
    original = hlo.get_version_from_compatibility_requirement
    requirement = hlo.StablehloCompatibilityRequirement.WEEK_4
    with tensorflow_compatible_stablehlo():
        target = hlo.get_version_from_compatibility_requirement(requirement)
    assert hlo.get_version_from_compatibility_requirement is original  # restored
    assert _version(target) <= _version(tf_stablehlo.get_current_version())
    assert _version(target) <= _version(original(requirement))


def test_a_jax2tf_function_written_in_the_block_runs_in_tensorflow():
    import jax.numpy as jnp
    import numpy as np
    import tensorflow as tf
    from jax.experimental import jax2tf

    with tensorflow_compatible_stablehlo():
        function = tf.function(
            jax2tf.convert(lambda x: jnp.tanh(x) + 1.0, with_gradient=False),
            input_signature=[tf.TensorSpec((2, 3), tf.float32)],
            autograph=False,
        )
        concrete = function.get_concrete_function()
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(concrete(tf.constant(x)), np.tanh(x) + 1.0, rtol=1e-6)
