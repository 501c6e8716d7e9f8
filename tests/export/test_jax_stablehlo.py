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


def _serialized_module():
    import jax
    import jax.numpy as jnp

    exported = jax.export.export(jax.jit(lambda x: jnp.tanh(x) + 1.0))(
        jax.ShapeDtypeStruct((2, 3), jnp.float32)
    )
    return exported.mlir_module_serialized


def test_the_patched_private_function_still_exists():
    from jax._src.export import _export

    # If this fails, JAX moved the function: update jax_stablehlo.py (or
    # drop it, if JAX's default target is now one TensorFlow reads).
    assert callable(_export.hlo.get_version_from_compatibility_requirement)
    assert hasattr(_export.hlo, "StablehloCompatibilityRequirement")


def test_exports_within_the_block_are_readable_by_tensorflow():
    from jax._src.export import _export
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tf_stablehlo

    original = _export.hlo.get_version_from_compatibility_requirement
    with tensorflow_compatible_stablehlo():
        serialized = _serialized_module()
    # Restored on exit.
    assert _export.hlo.get_version_from_compatibility_requirement is original
    # TensorFlow deserializes the portable artifact (it raises otherwise).
    text = tf_stablehlo.deserialize_portable_artifact_str(serialized)
    assert "stablehlo.tanh" in str(text)
