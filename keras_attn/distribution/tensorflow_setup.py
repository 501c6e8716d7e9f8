"""TensorFlow: a `tf.distribute.Strategy` (mirrored, multi-worker, TPU)."""

import json
import os

import tensorflow as tf

from keras_attn.distribution.device_names import check_each_device_once
from keras_attn.distribution.even_batches import check_dataset_batches


class _EvenBatches:
    """Checks that every batch of a distributed dataset splits over the replicas.

    `tf.distribute` splits a batch that the replicas do not divide unevenly
    (6 rows on 4 replicas: `[2, 2, 2, 0]`, on which Keras's first step fails
    in `AddN`); JAX refuses such a batch. Keras's trainer passes every
    dataset, arrays included, through `experimental_distribute_dataset`:
    there each batch is checked (see `even_batches`).
    """

    def experimental_distribute_dataset(self, dataset, options=None):
        dataset = check_dataset_batches(dataset, self.num_replicas_in_sync)
        return super().experimental_distribute_dataset(dataset, options)


class _MirroredStrategy(_EvenBatches, tf.distribute.MirroredStrategy):
    """`tf.distribute.MirroredStrategy` that refuses uneven batches."""


class _MultiWorkerMirroredStrategy(
    _EvenBatches, tf.distribute.MultiWorkerMirroredStrategy
):
    """`MultiWorkerMirroredStrategy` whose `reduce` takes what Keras 3 gives.

    Keras 3.15's TensorFlow trainer calls `strategy.reduce` in two ways that
    `MirroredStrategy` accepts but the multi-worker strategy rejects
    (keras-team/keras#20329, #20585):

    - on a nested input batch, to build the model before `fit`
      (`_maybe_symbolic_build`): "Attempt to convert a value
      ({'encoder_tokens': PerReplica...}) ... to a Tensor";
    - with `axis=0` on every scalar it logs (`reduce_per_replica`):
      "Invalid reduction dimension 0 for input with 0 dimensions".

    Reducing leaf by leaf, and scalars across replicas only, is what
    `MirroredStrategy` does in both places.
    """

    def reduce(self, reduce_op, value, axis=None):
        parent = super()

        def reduce_leaf(leaf):
            shape = getattr(self.experimental_local_results(leaf)[0], "shape", None)
            scalar = shape is not None and shape.rank == 0
            return parent.reduce(reduce_op, leaf, None if scalar else axis)

        return tf.nest.map_structure(reduce_leaf, value)


def _num_tf_config_tasks():
    """Number of tasks in `TF_CONFIG`'s cluster (0 when it is not set)."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return 0
    cluster = json.loads(text).get("cluster", {})
    return sum(len(tasks) for tasks in cluster.values())


def _canonical_device(name):
    # Keras-style "gpu:0" -> "/gpu:0"; TensorFlow names pass unchanged.
    name = str(name)
    return name if name.startswith("/") else "/" + name


def _device_key(name):
    """`("GPU", 0)` for "gpu:0", "/gpu:0", "/device:GPU:0"...; `None` if unreadable.

    Only devices of this process (job "localhost", or no job) have a key:
    `MirroredStrategy` mirrors over local devices.
    """
    try:
        spec = tf.DeviceSpec.from_string(_canonical_device(name))
    except (ValueError, TypeError):
        return None
    if spec.device_type is None:
        return None
    if spec.job not in (None, "localhost") or spec.task not in (None, 0):
        return None
    # "cpu" is "cpu:0", as in Keras's JAX device names.
    return spec.device_type.upper(), int(spec.device_index or 0)


def check_devices(devices):
    """The logical devices `devices` names, each once; refuses the others.

    A device that does not exist is refused here: `MirroredStrategy` accepts
    "/cpu:9" and trains on what it finds, and on a host without GPUs
    `["gpu:0", "gpu:1"]` makes `fit` wait forever.

    Returns:
        The TensorFlow names (`/job:localhost/.../device:CPU:0`) in order.
    """
    local = {}
    for device in tf.config.list_logical_devices():
        key = _device_key(device.name)
        if key is not None:
            local.setdefault(key, device.name)
    existing = [f"{kind.lower()}:{index}" for kind, index in sorted(local)]
    missing = [name for name in devices if local.get(_device_key(name)) is None]
    if missing:
        raise ValueError(
            f"`devices` names devices that this process does not have: {missing}. "
            f"The devices that exist: {existing}. Received: devices={devices!r}"
        )
    names = [local[_device_key(name)] for name in devices]
    check_each_device_once(devices, names)
    return names


def default_devices():
    """Every logical GPU, else every logical CPU (a CPU split for tests)."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices(
        "CPU"
    )
    return [device.name for device in devices]


def make_strategy(mesh_shape, devices):
    """Returns a data-parallel strategy: multi-worker if `TF_CONFIG` says so.

    With `TF_CONFIG` naming two tasks or more this is a
    `tf.distribute.MultiWorkerMirroredStrategy` (each worker mirrors over its
    local GPUs, or its CPU), otherwise a `tf.distribute.MirroredStrategy`
    over `devices`, each of which must exist (`check_devices`). Both refuse
    a batch that does not split evenly over the replicas (`_EvenBatches`).
    """
    if _num_tf_config_tasks() > 1:
        if devices is not None:
            raise ValueError(
                "`devices` cannot be set when TF_CONFIG describes a multi-worker "
                "cluster: each worker uses its local devices. Received: "
                f"devices={devices}"
            )
        strategy = _MultiWorkerMirroredStrategy()
    else:
        devices = default_devices() if devices is None else check_devices(devices)
        strategy = _MirroredStrategy(devices=devices)
    check_mesh_shape(mesh_shape, strategy)
    return strategy


def check_mesh_shape(mesh_shape, strategy):
    """`mesh_shape`, if given, must be `(replicas,)` or `(replicas, 1)`."""
    if mesh_shape is None:
        return
    replicas = strategy.num_replicas_in_sync
    if tuple(mesh_shape) not in ((replicas,), (replicas, 1)):
        raise ValueError(
            f"`mesh_shape` must be ({replicas},) to match the "
            f"{replicas} replicas of {type(strategy).__name__}. "
            f"Received: mesh_shape={tuple(mesh_shape)}"
        )


def process_info(strategy):
    """`(num_processes, process_id)` of a (multi-worker) strategy.

    Process 0 is the chief when `TF_CONFIG` names one, else worker 0.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not cluster:
        return 1, 0
    num_tasks = sum(len(tasks) for tasks in cluster.values())
    task_id = int(resolver.task_id or 0)
    if resolver.task_type == "worker" and "chief" in cluster:
        task_id += len(cluster["chief"])
    return num_tasks, task_id
