"""TensorFlow side of the distribution tests, run in a fresh process.

python tf_distributed_worker.py mirrored OUT_DIR
    splits the CPU into 2 logical devices (before any op), trains with no
    strategy, then with `MirroredStrategy` over both; writes
    OUT_DIR/{single,data}.{npz,json}.
python tf_distributed_worker.py worker OUT_STEM
    one worker of a `MultiWorkerMirroredStrategy` described by the
    TF_CONFIG environment variable.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"

import tensorflow as tf  # noqa: E402

if sys.argv[1] == "mirrored":
    # Must come before TensorFlow runs anything.
    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )

import keras  # noqa: E402

keras.config.disable_traceback_filtering()  # full tracebacks in test logs
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


def variable_kinds(model):
    """For every weight and optimizer variable: distributed type and replicas."""
    found = {}
    for variable in [*model.trainable_variables, *model.optimizer.variables]:
        value = variable.value
        distributed = isinstance(value, tf.distribute.DistributedValues)
        found[variable.path] = {
            "type": type(value).__name__,
            "distributed": distributed,
            "devices": sorted(v.device for v in value.values) if distributed else [],
        }
    return found


def train(distribution, data=None):
    keras.utils.set_random_seed(0)
    with distribution.scope():
        model = make_model()
        set_initial_weights(model)
        compile_model(model)
        losses = fit(model, data)
    return model, losses


def error_of(function):
    try:
        function()
    except ValueError as error:
        return str(error)
    return None


def uneven_batch_errors(distribution):
    """What `fit` on 2 replicas says to batches that 2 does not divide."""
    inputs, labels = make_data()
    errors = {}
    with distribution.scope():
        model = make_model()
        compile_model(model)
        # 6 rows in batches of 3: a static batch size, refused at once; 3
        # rows in batches of 4: one partial batch, refused as it is read.
        for name, rows, batch_size in (("static", 6, 3), ("partial", 3, 4)):
            arrays = ({k: v[:rows] for k, v in inputs.items()}, labels[:rows])
            try:
                model.fit(*arrays, batch_size=batch_size, verbose=0)
                errors[name] = None
            except Exception as error:  # noqa: BLE001 (type and text recorded)
                errors[name] = [type(error).__name__, str(error)]
    return errors


def mirrored_runs(out_dir):
    for name, kind in (("single", "none"), ("data", "data")):
        distribution = keras_attn.distribution.configure(kind)
        distribution.check_batch_size(GLOBAL_BATCH)
        model, losses = train(distribution)
        save_result(
            os.path.join(out_dir, name),
            losses,
            weights(model),
            variables=variable_kinds(model),
            strategy=type(tf.distribute.get_strategy()).__name__,
            model_strategy=type(model.distribute_strategy).__name__,
            num_replicas=distribution.num_replicas,
            batch_error=error_of(lambda d=distribution: d.check_batch_size(15)),
            model_parallel_error=error_of(
                lambda: keras_attn.distribution.configure("model", (1, 2))
            ),
            uneven_batch_errors=(
                uneven_batch_errors(distribution) if kind == "data" else None
            ),
            # On a host without GPUs, `fit` on these waited forever.
            missing_devices_error=error_of(
                lambda: keras_attn.distribution.configure(
                    "data", devices=["gpu:0", "gpu:1"]
                )
            ),
        )


def worker_run(out_stem):
    distribution = keras_attn.distribution.configure("data")
    distribution.check_batch_size(GLOBAL_BATCH)
    # One global batch of 16 per step; the strategy gives each worker 8 rows.
    model, losses = train(distribution, make_dataset())
    save_result(
        out_stem,
        losses,
        weights(model),
        variables=variable_kinds(model),
        model_strategy=type(model.distribute_strategy).__name__,
        num_replicas=distribution.num_replicas,
        num_processes=distribution.num_processes,
        process_id=distribution.process_id,
    )


if __name__ == "__main__":
    if sys.argv[1] == "mirrored":
        mirrored_runs(sys.argv[2])
    else:
        worker_run(sys.argv[2])
