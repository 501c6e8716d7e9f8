"""JAX: `keras.distribution.DataParallel` and `ModelParallel` over a mesh."""

import math
import os

import jax
import keras

from keras_attn.distribution.device_names import check_each_device_once
from keras_attn.distribution.even_batches import check_dataset_batches, check_rows
from keras_attn.models.transformer_layout import transformer_layout_map

BATCH_AXIS = "batch"
MODEL_AXIS = "model"


class _EvenBatches:
    """Refuses a batch that the mesh's batch axis does not divide, by name.

    JAX raises an `IndivisibleError` about a `NamedSharding`; this raises
    `even_batches.uneven_batch_message` instead, as on TensorFlow: when
    Keras asks for the layout of a batch (the first batch of `fit`), and for
    every batch of a `tf.data.Dataset` as it is read. (For arrays Keras
    reuses the first batch's layout, so a last partial batch of arrays
    still meets JAX's error; `TrainingDistribution.check_batch_size` with
    `num_examples` finds it before training.)
    """

    def _batch_replicas(self):
        mesh = self.device_mesh
        return dict(zip(mesh.axis_names, mesh.shape))[self.batch_dim_name]

    def get_data_layout(self, data_shape):
        # With several processes `data_shape` is this process's share.
        if len(data_shape) and jax.process_count() == 1:
            check_rows(data_shape[0], self._batch_replicas())
        return super().get_data_layout(data_shape)

    def distribute_dataset(self, dataset):
        import tensorflow as tf  # Keras passes only tf.data datasets here

        if not isinstance(dataset, tf.data.Dataset):
            return super().distribute_dataset(dataset)
        if jax.process_count() == 1:
            return super().distribute_dataset(
                check_dataset_batches(dataset, self._batch_replicas())
            )
        # Keras finds the global batch size of a dataset by reading its
        # graph, which a check in front hides: check this process's share
        # against this process's replicas instead.
        dataset = super().distribute_dataset(dataset)
        return check_dataset_batches(
            dataset, self._batch_replicas() // jax.process_count()
        )


class EvenDataParallel(_EvenBatches, keras.distribution.DataParallel):
    """`keras.distribution.DataParallel` that refuses uneven batches by name."""


class ShapeCheckedModelParallel(_EvenBatches, keras.distribution.ModelParallel):
    """`ModelParallel` that names the variable a mesh cannot shard evenly.

    JAX refuses a dimension that the mesh axis does not divide, with an
    `IndivisibleError` about a `NamedSharding` deep inside variable
    creation; this raises a `ValueError` naming the variable, the dimension
    and the mesh instead, when the model is built.
    """

    def get_variable_layout(self, variable):
        layout = super().get_variable_layout(variable)
        mesh = self.device_mesh
        sizes = dict(zip(mesh.axis_names, mesh.shape))
        for dim, (size, axes) in enumerate(zip(variable.shape, layout.axes)):
            if axes is None:
                continue
            names = axes if isinstance(axes, tuple) else (axes,)
            ways = math.prod(sizes[name] for name in names)
            if size % ways:
                raise ValueError(
                    f"Variable `{variable.path}` of shape {tuple(variable.shape)} "
                    f"is sharded {layout.axes} on a mesh {dict(sizes)}, but "
                    f"dimension {dim} ({size}) is not divisible by {ways}. For "
                    "`keras_attn.models.Transformer`, `num_heads`, "
                    "`intermediate_dim` and `vocabulary_size` must be divisible "
                    "by the size of the mesh's 'model' axis: pick another "
                    "`mesh_shape` (recipe: `--mesh`)."
                )
        return layout


def maybe_initialize_multi_process():
    """Joins the JAX process group when the launcher asked for one.

    Calls `keras.distribution.initialize()` if `KERAS_DISTRIBUTION_NUM_PROCESSES`
    is above 1 and `jax.distributed` is not initialized yet; Keras then reads
    `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the coordinator's `host:port`) and
    `KERAS_DISTRIBUTION_PROCESS_ID` too, and calls
    `jax.distributed.initialize`. A launcher that sets these turns on
    multi-process training without a code change. It must run before the
    first JAX computation.
    """
    if jax.distributed.is_initialized():
        return
    if int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")) > 1:
        keras.distribution.initialize()


def _find_device(name):
    """The `jax.Device` that "cpu:0", "gpu:1", "cuda:1" names, or `None`."""
    platform, _, index = str(name).strip().lower().partition(":")
    if not platform.isalpha():  # jax.devices(backend="") is the default one
        return None
    try:
        index = int(index or 0)
        candidates = jax.devices(backend=platform)
    except (ValueError, RuntimeError):  # not a number; no such platform
        return None
    return next((device for device in candidates if device.id == index), None)


def check_devices(devices):
    """`"platform:id"` names of the JAX devices `devices` names, each once.

    A device that does not exist is refused here, naming the ones that do:
    otherwise "gpu:0" on a host without GPUs fails inside `fit` with
    "Unknown backend: 'gpu'", and a device named twice with a bare
    `AssertionError` from the mesh.
    """
    found = {name: _find_device(name) for name in devices}
    missing = [name for name, device in found.items() if device is None]
    if missing:
        existing = {*jax.devices(), *jax.devices("cpu")}
        existing = [
            f"{d.platform}:{d.id}"
            for d in sorted(existing, key=lambda d: (d.platform, d.id))
        ]
        raise ValueError(
            f"`devices` names devices that JAX does not have: {missing}. "
            f"The devices that exist: {existing}. Received: devices={devices!r}"
        )
    canonical = [f"{found[name].platform}:{found[name].id}" for name in devices]
    check_each_device_once(devices, canonical)
    return canonical


def _mesh_error(kind, mesh_shape, num_devices, expected):
    return ValueError(
        f"`mesh_shape` must be {expected} with a product equal to the "
        f"{num_devices} devices for kind={kind!r}. Received: mesh_shape={mesh_shape}"
    )


def resolve_mesh_shape(kind, mesh_shape, num_devices):
    """Fills in and validates `(batch,)` for "data", `(batch, model)` for "model"."""
    if kind == "data":
        if mesh_shape is None:
            return (num_devices,)
        if len(mesh_shape) == 2 and mesh_shape[1] == 1:
            mesh_shape = mesh_shape[:1]
        if len(mesh_shape) != 1 or mesh_shape[0] != num_devices:
            raise _mesh_error(kind, mesh_shape, num_devices, "(batch,) or (batch, 1)")
        return tuple(mesh_shape)
    if mesh_shape is None:
        return (1, num_devices)
    if len(mesh_shape) != 2 or math.prod(mesh_shape) != num_devices:
        raise _mesh_error(kind, mesh_shape, num_devices, "(batch, model)")
    return tuple(mesh_shape)


def make_keras_distribution(kind, mesh_shape, devices, layout_map_fn=None):
    """Returns `(distribution, mesh_shape)` for kind "data" or "model".

    Args:
        kind: `"data"` or `"model"`.
        mesh_shape: tuple or `None` (all devices on the batch axis for
            "data", on the model axis for "model").
        devices: list of device names (`"cpu:0"`, `"gpu:3"`), each of an
            existing device, named once (`check_devices`), or `None` for
            `keras.distribution.list_devices()` (every process's devices
            when multi-process).
        layout_map_fn: callable `device_mesh -> keras.distribution.LayoutMap`
            for "model". Defaults to `transformer_layout_map`.
    """
    if devices is None:
        devices = keras.distribution.list_devices()
    else:
        devices = check_devices(devices)
    mesh_shape = resolve_mesh_shape(kind, mesh_shape, len(devices))
    if kind == "data":
        mesh = keras.distribution.DeviceMesh(mesh_shape, [BATCH_AXIS], devices)
        return EvenDataParallel(device_mesh=mesh), mesh_shape
    mesh = keras.distribution.DeviceMesh(mesh_shape, [BATCH_AXIS, MODEL_AXIS], devices)
    layout_map = (layout_map_fn or transformer_layout_map)(mesh)
    distribution = ShapeCheckedModelParallel(
        layout_map=layout_map, batch_dim_name=BATCH_AXIS
    )
    return distribution, mesh_shape


def process_info():
    """`(num_processes, process_id)` of the JAX process group."""
    return jax.process_count(), jax.process_index()
