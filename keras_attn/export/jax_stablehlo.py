"""Serializing jax2tf functions in a StableHLO version TensorFlow can read.

On the JAX backend, `keras.export.ExportArchive` converts every endpoint
with `jax2tf` (native serialization): the SavedModel holds each function as
a serialized StableHLO module inside one `XlaCallModule` op. JAX 0.10 writes
these modules for StableHLO 1.15 (JAX's "4 weeks old" rule), but
TensorFlow 2.21 reads at most StableHLO 1.13.7, so `tf.saved_model.load`
works and the first call fails with "failed to deserialize portable artifact
using StableHLO_v1.13.7". JAX has no public setting for the version, so
`tensorflow_compatible_stablehlo` lowers JAX's target, for the duration of
an export, to the version of the TensorFlow installed beside it. The serving
runtime must then be that TensorFlow or a newer one.
"""

import contextlib
import warnings

import keras
from tensorflow.compiler.mlir.stablehlo import stablehlo as tf_stablehlo


def _version_tuple(version):
    return tuple(int(part) for part in str(version).split("."))


@contextlib.contextmanager
def tensorflow_compatible_stablehlo():
    """Within the block, jax2tf writes StableHLO this TensorFlow can read.

    Does nothing on other backends, or when JAX already targets a version
    TensorFlow reads. If a future JAX moves the private function this relies
    on, exports still run (with a warning); loading them is then checked by
    the tests of `keras_attn.export`.
    """
    if keras.backend.backend() != "jax":
        yield
        return
    try:
        from jax._src.export import _export

        hlo = _export.hlo
        original = hlo.get_version_from_compatibility_requirement
    except (ImportError, AttributeError) as error:
        warnings.warn(
            "Could not select the StableHLO version of the export "
            f"({error}); TensorFlow may fail to run the exported functions.",
            stacklevel=3,
        )
        yield
        return
    tensorflow_version = tf_stablehlo.get_current_version()

    def target_version(requirement):
        return min(original(requirement), tensorflow_version, key=_version_tuple)

    hlo.get_version_from_compatibility_requirement = target_version
    try:
        yield
    finally:
        hlo.get_version_from_compatibility_requirement = original
