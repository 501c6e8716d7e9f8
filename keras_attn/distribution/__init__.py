"""Data and model parallel training with the engines that exist.

`configure(kind, mesh_shape, devices)` returns a `TrainingDistribution`
whose `scope()` the training code builds, compiles and fits in:

- JAX: `keras.distribution.DataParallel` / `ModelParallel` over a
  `DeviceMesh` with axes `("batch", "model")`, the weights laid out by
  `keras_attn.models.transformer_layout_map`.
- TensorFlow: `tf.distribute.MirroredStrategy`,
  `MultiWorkerMirroredStrategy` (from `TF_CONFIG`) or a strategy you pass
  (`TPUStrategy`).

JAX and TensorFlow are imported only when `configure` needs them. See
`docs/distribution.md`.
"""

from keras_attn.distribution.training_distribution import (
    KINDS,
    TrainingDistribution,
    configure,
    parse_mesh_shape,
)

__all__ = ["KINDS", "TrainingDistribution", "configure", "parse_mesh_shape"]
