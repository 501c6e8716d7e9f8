"""JAX side of the distribution tests, run in a fresh process.

python jax_distributed_worker.py mesh OUT_DIR
    (with XLA_FLAGS=--xla_force_host_platform_device_count=8) trains on
    one device, then DataParallel over 8, then ModelParallel on a (2, 4)
    mesh; writes OUT_DIR/{single,data,model}.{npz,json}.
python jax_distributed_worker.py process PROCESS_ID PORT OUT_STEM
    one of two processes joined by `keras.distribution.initialize` on
    127.0.0.1:PORT, data parallel over both processes' CPU devices.
"""

import json
import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "jax"

import keras  # noqa: E402
from distributed_case import (  # noqa: E402
    GLOBAL_BATCH,
    compile_model,
    fit,
    make_data,
    make_dataset,
    make_model,
    save_result,
    set_initial_weights,
    weights,
)

import keras_attn  # noqa: E402


def spec(variable):
    """The `PartitionSpec` padded to the variable's rank (`None`: one device)."""
    partition = getattr(variable.value.sharding, "spec", None)
    if partition is None:
        return None
    return [*partition] + [None] * (len(variable.shape) - len(partition))


def layouts(model):
    """Sharding spec and shard shape of every weight and optimizer variable."""
    found = {}
    for variable in [*model.trainable_variables, *model.optimizer.variables]:
        found[variable.path] = {
            "spec": spec(variable),
            "shard_shape": list(variable.value.sharding.shard_shape(variable.shape)),
            "num_devices": len(variable.value.sharding.device_set),
        }
    return found


def train(distribution, data=None):
    keras.utils.set_random_seed(0)
    with distribution.scope():
        model = make_model()
        set_initial_weights(model)
        compile_model(model)
        # Unequal real tokens per replica: JAX takes one global token mean.
        losses = fit(model, data, balanced=False)
    return model, losses


def mesh_runs(out_dir):
    import time

    import jax

    assert jax.device_count() == 8, jax.devices()
    for name, kind, mesh_shape in (
        ("single", "none", None),
        ("data", "data", None),
        ("model", "model", (2, 4)),
    ):
        start = time.time()
        distribution = keras_attn.distribution.configure(kind, mesh_shape)
        distribution.check_batch_size(GLOBAL_BATCH)
        model, losses = train(distribution)
        try:
            distribution.check_batch_size(12)
            batch_error = None
        except ValueError as error:
            batch_error = str(error)
        save_result(
            os.path.join(out_dir, name),
            losses,
            weights(model),
            layouts=layouts(model),
            num_replicas=distribution.num_replicas,
            batch_error=batch_error,
        )
        print(f"{name}: {time.time() - start:.1f} s", flush=True)
    # 4 heads cannot be split 8 ways: a clear error while building.
    try:
        with keras_attn.distribution.configure("model", (1, 8)).scope():
            make_model()
        indivisible_error = None
    except ValueError as error:
        indivisible_error = str(error)
    Path(out_dir, "indivisible_error.txt").write_text(str(indivisible_error))
    Path(out_dir, "uneven_batch_errors.json").write_text(
        json.dumps(uneven_batch_errors())
    )


def uneven_batch_errors():
    """What `fit` on DataParallel(8) says to batches that 8 does not divide."""
    import tensorflow as tf

    inputs, labels = make_data()
    arrays = ({k: v[:24] for k, v in inputs.items()}, labels[:24])
    # 20 rows in batches of 12: the size is not static, checked as read.
    dataset = tf.data.Dataset.from_tensor_slices(
        ({k: v[:20] for k, v in inputs.items()}, labels[:20])
    ).batch(12)
    errors = {}
    with keras_attn.distribution.configure("data").scope():
        model = make_model()
        compile_model(model)
        for name, call in (
            ("arrays", lambda: model.fit(*arrays, batch_size=12, verbose=0)),
            ("dataset", lambda: model.fit(dataset, verbose=0)),
        ):
            try:
                call()
                errors[name] = None
            except Exception as error:  # noqa: BLE001 (type and text recorded)
                errors[name] = [type(error).__name__, str(error)]
    return errors


def process_run(process_id, port, out_stem):
    os.environ.update(
        KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}",
        KERAS_DISTRIBUTION_NUM_PROCESSES="2",
        KERAS_DISTRIBUTION_PROCESS_ID=str(process_id),
    )
    keras.utils.set_random_seed(0)  # before initialize: no cross-process seed sum
    distribution = keras_attn.distribution.configure("data")
    import jax

    assert jax.process_count() == 2 and distribution.process_id == process_id
    distribution.check_batch_size(GLOBAL_BATCH)
    # One global batch of 16 per step; Keras gives each process its 8 rows.
    model, losses = train(distribution, make_dataset(balanced=False))
    save_result(
        out_stem,
        losses,
        weights(model),
        num_replicas=distribution.num_replicas,
        num_processes=distribution.num_processes,
        local_devices=jax.local_device_count(),
    )


if __name__ == "__main__":
    if sys.argv[1] == "mesh":
        mesh_runs(sys.argv[2])
    else:
        process_run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
