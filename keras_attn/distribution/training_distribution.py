"""One call that spreads training over devices, whatever the Keras backend."""

import collections.abc
import contextlib

import keras

from keras_attn.validation import (
    check_choice,
    check_positive_int,
    check_positive_int_sequence,
    is_integer,
)

KINDS = ("none", "data", "model")


class TrainingDistribution:
    """How training is spread over devices; returned by `configure`.

    Training code uses it the same way on every backend: build, compile and
    fit the model inside `scope()`, and check batch sizes with
    `check_batch_size` before training.

    - JAX: `scope()` makes `keras_distribution` (a
      `keras.distribution.DataParallel` or `ModelParallel`) the current
      distribution, so variables are created with their layouts and `fit`
      shards each batch over the mesh's `"batch"` axis.
    - TensorFlow: `scope()` is `tf_strategy.scope()`; Keras takes the
      strategy from the variables created in it.
    - `kind="none"`: `scope()` does nothing.

    Attributes:
        kind: `"none"`, `"data"` or `"model"`.
        backend: the Keras backend, `"jax"` or `"tensorflow"`.
        mesh_shape: `(batch,)` for data parallelism, `(batch, model)` for
            model parallelism, `(1,)` for `"none"`.
        num_replicas: int, the data-parallel width (over all processes):
            every batch is split into this many equal parts.
        model_parallel_size: int, devices that share one model replica.
        num_processes: int, processes taking part (1 unless multi-host).
        process_id: int, this process's index; 0 is the one that writes.
        keras_distribution: the `keras.distribution.Distribution` (JAX), or
            `None`.
        tf_strategy: the `tf.distribute.Strategy` (TensorFlow), or `None`.
    """

    def __init__(
        self,
        kind,
        backend,
        mesh_shape,
        num_processes=1,
        process_id=0,
        keras_distribution=None,
        tf_strategy=None,
    ):
        self.kind = kind
        self.backend = backend
        self.mesh_shape = tuple(mesh_shape)
        self.num_replicas = self.mesh_shape[0]
        self.model_parallel_size = self.mesh_shape[1] if len(mesh_shape) > 1 else 1
        self.num_processes = num_processes
        self.process_id = process_id
        self.keras_distribution = keras_distribution
        self.tf_strategy = tf_strategy

    @contextlib.contextmanager
    def scope(self):
        """Context in which to build, compile and fit the model."""
        if self.keras_distribution is not None:
            with self.keras_distribution.scope():
                yield
        elif self.tf_strategy is not None:
            with self.tf_strategy.scope():
                yield
        else:
            yield

    def check_batch_size(self, batch_size, name="batch_size", num_examples=None):
        """Raises `ValueError` unless every batch splits evenly over replicas.

        Call it before training with the global batch size (or, for a
        pipeline with several batch shapes, all of them), and with
        `num_examples` when `fit` gets arrays: the last batch then holds
        `num_examples % batch_size` rows, which must split too. A batch
        that does not split is refused on both backends (JAX cannot shard
        it, and TensorFlow would give replicas unequal shares); one that
        gets past this check stops `fit` where it enters the distribution,
        with the same message.

        Args:
            batch_size: int, or an iterable of ints.
            name: the argument to name in the error. Defaults to
                `"batch_size"`.
            num_examples: int, the number of examples `fit` is given
                (`batch_size` must then be one int), or `None` not to check
                the last partial batch. Defaults to `None`.

        Returns:
            `batch_size`, unchanged.
        """
        sizes = _check_batch_sizes(batch_size, name)
        full_batches = sizes
        if num_examples is not None and len(sizes) == 1:
            # Fewer examples than one batch: no batch of `batch_size` rows
            # exists, only the last (checked below).
            num_examples = check_positive_int(num_examples, "num_examples")
            full_batches = [] if num_examples < sizes[0] else sizes
        bad = [size for size in full_batches if size % self.num_replicas]
        if bad:
            received = batch_size if len(sizes) == 1 else sorted(set(sizes))
            raise ValueError(
                f"`{name}` must be divisible by the {self.num_replicas} "
                f"data-parallel replicas ({self._where()}) so that each replica "
                f"gets an equal share of every batch; not divisible: "
                f"{sorted(set(bad))}. Received: {name}={received}"
            )
        if num_examples is not None:
            self._check_last_batch(sizes, name, num_examples)
        return batch_size

    def _check_last_batch(self, sizes, name, num_examples):
        num_examples = check_positive_int(num_examples, "num_examples")
        if len(sizes) != 1:
            raise ValueError(
                f"`num_examples` needs one `{name}`, the size of every batch "
                f"but the last. Received: {name}={sizes}, "
                f"num_examples={num_examples}"
            )
        last = num_examples % sizes[0]
        if last % self.num_replicas:
            raise ValueError(
                f"The last batch holds num_examples % {name} = {num_examples} % "
                f"{sizes[0]} = {last} examples, which do not split evenly over the "
                f"{self.num_replicas} data-parallel replicas ({self._where()}). "
                f"Use a number of examples whose remainder is a multiple of "
                f"{self.num_replicas}, or drop the last {last}. Received: "
                f"num_examples={num_examples}"
            )

    def _where(self):
        if self.kind == "model":
            return f"axis 'batch' of mesh_shape={self.mesh_shape}"
        return f"kind={self.kind!r} on {self.backend}"

    def __repr__(self):
        return (
            f"<TrainingDistribution kind={self.kind!r} backend={self.backend!r} "
            f"mesh_shape={self.mesh_shape} num_replicas={self.num_replicas} "
            f"num_processes={self.num_processes} process_id={self.process_id}>"
        )


def _check_batch_sizes(batch_size, name):
    """`batch_size` (an int or an iterable of them) as a list of positive ints."""
    if is_integer(batch_size):
        return [check_positive_int(batch_size, name)]
    return list(check_positive_int_sequence(batch_size, name))


def parse_mesh_shape(text):
    """Parses `"2,4"` (batch, model) or `"8"` into a tuple of positive ints.

    Args:
        text: str such as the recipe's `--mesh` value, or `None`.

    Returns:
        A tuple of ints, or `None` when `text` is `None` or empty.
    """
    if text is None or not str(text).strip():
        return None
    try:
        shape = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        shape = ()
    if not shape or len(shape) > 2 or min(shape) < 1:
        raise ValueError(
            "`mesh` must be one or two positive integers separated by a comma: "
            f'"batch" or "batch,model" (e.g. "2,4"). Received: mesh={text!r}'
        )
    return shape


def _check_mesh_shape(mesh_shape):
    if mesh_shape is None:
        return None
    if isinstance(mesh_shape, str):
        return parse_mesh_shape(mesh_shape)
    expected = (
        "`mesh_shape` must be a tuple of positive integers, (batch,) or "
        f"(batch, model). Received: mesh_shape={mesh_shape!r}"
    )
    if not isinstance(mesh_shape, collections.abc.Iterable) or not all(
        is_integer(n) for n in mesh_shape
    ):
        raise TypeError(expected)
    shape = tuple(int(n) for n in mesh_shape)
    if not 1 <= len(shape) <= 2 or min(shape) < 1:
        raise ValueError(expected)
    return shape


def _check_devices(devices):
    if devices is None:
        return None
    expected = (
        "`devices` must be a non-empty list of device names such as "
        f"['gpu:0', 'gpu:1']. Received: devices={devices!r}"
    )
    if isinstance(devices, str) or not isinstance(devices, collections.abc.Iterable):
        raise TypeError(expected)
    devices = list(devices)
    if not all(isinstance(device, str) for device in devices):
        raise TypeError(expected)
    if not devices:
        raise ValueError(expected)
    return devices


def _check_arguments(kind, mesh_shape, devices, layout_map, tf_strategy, backend):
    """The arguments checked against each other; returns them canonical."""
    kind = check_choice(kind, "kind", KINDS)
    mesh_shape = _check_mesh_shape(mesh_shape)
    if layout_map is not None and not callable(layout_map):
        raise TypeError(
            "`layout_map` must be a callable `device_mesh -> "
            f"keras.distribution.LayoutMap`. Received: layout_map={layout_map!r}"
        )
    if kind == "none":
        for name, value in (("mesh_shape", mesh_shape), ("devices", devices)):
            if value is not None:
                raise ValueError(
                    f"`{name}` applies to kind='data' or kind='model'. "
                    f"Received: kind='none', {name}={value!r}"
                )
    devices = _check_devices(devices)
    if tf_strategy is not None and (backend != "tensorflow" or kind != "data"):
        raise ValueError(
            "`tf_strategy` needs the TensorFlow backend and kind='data'. "
            f"Received: tf_strategy={type(tf_strategy).__name__}, kind={kind!r}, "
            f"backend={backend!r}"
        )
    return kind, mesh_shape, devices


def _configure_jax(kind, mesh_shape, devices, layout_map):
    from keras_attn.distribution import jax_setup

    jax_setup.maybe_initialize_multi_process()
    distribution, mesh_shape = jax_setup.make_keras_distribution(
        kind, mesh_shape, devices, layout_map
    )
    num_processes, process_id = jax_setup.process_info()
    return TrainingDistribution(
        kind,
        "jax",
        mesh_shape,
        num_processes,
        process_id,
        keras_distribution=distribution,
    )


def _configure_tensorflow(kind, mesh_shape, devices, tf_strategy):
    if kind == "model":
        raise ValueError(
            "`kind='model'` (model parallelism) is only supported on the JAX "
            "backend (keras.distribution.ModelParallel); on TensorFlow use "
            "kind='data'. Received: kind='model' with KERAS_BACKEND=tensorflow"
        )
    from keras_attn.distribution import tensorflow_setup

    if tf_strategy is None:
        tf_strategy = tensorflow_setup.make_strategy(mesh_shape, devices)
    else:
        tensorflow_setup.check_mesh_shape(mesh_shape, tf_strategy)
    num_processes, process_id = tensorflow_setup.process_info(tf_strategy)
    return TrainingDistribution(
        kind,
        "tensorflow",
        (tf_strategy.num_replicas_in_sync,),
        num_processes,
        process_id,
        tf_strategy=tf_strategy,
    )


def _unsupported_backend_error(kind, backend):
    if backend == "torch":
        return ValueError(
            f"`kind={kind!r}` is not available on the torch backend: Keras "
            "implements `keras.distribution` for JAX only (and keras-attn uses "
            "tf.distribute on TensorFlow), and keras-attn does not add a data- "
            "or model-parallel layer of its own. Train with kind='none' on "
            "torch, or use KERAS_BACKEND=jax or tensorflow to distribute. "
            "Received: KERAS_BACKEND=torch"
        )
    return ValueError(
        f"`kind={kind!r}` needs the JAX or TensorFlow backend. "
        f"Received: KERAS_BACKEND={backend}"
    )


def configure(
    kind="none", mesh_shape=None, devices=None, layout_map=None, tf_strategy=None
):
    """Sets up data or model parallel training for the current Keras backend.

    Call it at the start of the program, before anything runs on a device:
    the multi-process set-up below must come first. Then build, compile and
    fit inside the returned object's `scope()`:

    | kind | JAX | TensorFlow |
    |---|---|---|
    | `"none"` | one device | the default strategy |
    | `"data"` | `keras.distribution.DataParallel` | `tf.distribute.MirroredStrategy` |
    | `"model"` | `keras.distribution.ModelParallel` with `transformer_layout_map` | `ValueError` |

    Several processes (hosts) take part when the launcher says so, with no
    code change: on JAX, `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
    `KERAS_DISTRIBUTION_NUM_PROCESSES` and `KERAS_DISTRIBUTION_PROCESS_ID`
    make this call run `keras.distribution.initialize()` (or call that, or
    `jax.distributed.initialize`, yourself first); the mesh then spans every
    process's devices. On TensorFlow, a `TF_CONFIG` with two tasks or more
    gives a `tf.distribute.MultiWorkerMirroredStrategy`.

    Args:
        kind: `"none"`, `"data"` (replicate the model, split each batch)
            or `"model"` (JAX only: also shard the weights Megatron-style
            over a `"model"` mesh axis). Defaults to `"none"`.
        mesh_shape: `(batch,)` for `"data"`; `(batch, model)` for
            `"model"`, e.g. `(2, 4)` on 8 devices; or a string `"2,4"`.
            Defaults to `None`: every device on the batch axis for `"data"`,
            on the model axis (`(1, n)`) for `"model"`.
        devices: list of device names (`"gpu:0"`, ...) to use. Defaults to
            `None`: every accelerator, else every CPU device (all processes'
            on JAX; the logical CPU devices on TensorFlow).
        layout_map: JAX `"model"` only: a callable `device_mesh ->
            keras.distribution.LayoutMap`. Defaults to `None`, meaning
            `keras_attn.models.transformer_layout_map`.
        tf_strategy: TensorFlow only: a ready `tf.distribute.Strategy` to
            use as is, e.g. a `TPUStrategy` or a `MultiWorkerMirroredStrategy`
            with custom options; `kind` must then be `"data"`. Defaults to
            `None`.

    Returns:
        A `TrainingDistribution`.

    Example:

    ```python
    distribution = keras_attn.distribution.configure("model", mesh_shape=(2, 4))
    distribution.check_batch_size(64)
    with distribution.scope():
        model = keras_attn.models.Transformer.from_preset(
            "transformer_base", vocabulary_size=32000)
        model.compile(optimizer="adam", loss=...)
        model.fit(dataset, epochs=1)
    ```
    """
    backend = keras.backend.backend()
    kind, mesh_shape, devices = _check_arguments(
        kind, mesh_shape, devices, layout_map, tf_strategy, backend
    )
    if kind == "none":
        return TrainingDistribution("none", backend, (1,))
    if backend == "jax":
        return _configure_jax(kind, mesh_shape, devices, layout_map)
    if backend == "tensorflow":
        return _configure_tensorflow(kind, mesh_shape, devices, tf_strategy)
    raise _unsupported_backend_error(kind, backend)
