"""One tiny training run, the same on every device layout, and its launchers.

Imported by the tests (single-device reference, in the pytest process) and by
the worker scripts beside it (the distributed runs, in subprocesses whose
device settings must precede the jax/tensorflow import).
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]

VOCABULARY_SIZE = 48  # divisible by the model axis (vocabulary-sharded embedding)
GLOBAL_BATCH = 16
STEPS = 3
LENGTH = 6
LEARNING_RATE = 1e-2


def make_model():
    import keras_attn

    return keras_attn.models.Transformer(
        vocabulary_size=VOCABULARY_SIZE,
        num_layers=1,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        max_sequence_length=16,
    )


def set_initial_weights(model):
    """Weights from NumPy, so every run starts equal whatever its RNG layout."""
    variables = model.trainable_variables
    values = initial_weights({v.path: v.shape for v in variables})
    for variable in variables:
        variable.assign(values[variable.path])


def compile_model(model):
    import keras

    import keras_attn

    # Adam with epsilon 1e-6: with the paper's 1e-9, gradients that are zero
    # in exact arithmetic (the key bias cancels in the softmax) leave rounding
    # noise whose sign becomes a full learning-rate step on every layout.
    model.compile(
        optimizer=keras.optimizers.Adam(LEARNING_RATE, epsilon=1e-6),
        loss=keras_attn.training.MaskedSparseCategoricalCrossentropy(
            label_smoothing=0.1
        ),
        metrics=[keras_attn.training.MaskedAccuracy()],
    )


def make_data(balanced=True):
    """A copy task with padding, `STEPS` batches of `GLOBAL_BATCH` rows.

    `balanced=True`: rows alternate 6 and 3 real tokens, so every even-sized
    run of rows, hence every replica's share of a batch, holds as many real
    tokens. TensorFlow averages the loss over each replica's real tokens and
    then over replicas, which equals the global token mean only then (JAX
    computes the global mean directly). `balanced=False`: the first half of
    every batch has 6 real tokens per row, the second half 1.
    """
    rng = np.random.default_rng(1)
    rows = GLOBAL_BATCH * STEPS
    tokens = rng.integers(4, VOCABULARY_SIZE, size=(rows, LENGTH)).astype("int32")
    if balanced:
        lengths = np.where(np.arange(rows) % 2 == 0, LENGTH, LENGTH // 2)
    else:
        first_half = np.arange(rows) % GLOBAL_BATCH < GLOBAL_BATCH // 2
        lengths = np.where(first_half, LENGTH, 1)
    tokens[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    start = np.full((rows, 1), 2, "int32")
    decoder_tokens = np.concatenate([start, tokens[:, :-1]], axis=1)
    decoder_tokens[tokens == 0] = 0
    return {"encoder_tokens": tokens, "decoder_tokens": decoder_tokens}, tokens


def make_dataset(balanced=True):
    import tensorflow as tf

    inputs, labels = make_data(balanced)
    return tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(GLOBAL_BATCH)


def fit(model, data=None, balanced=True):
    """Trains `STEPS` steps (on `make_data(balanced)` unless `data` is given);
    returns the running mean loss logged after each step."""
    import keras

    losses = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"]))
    )
    if data is None:
        inputs, labels = make_data(balanced)
        model.fit(
            inputs,
            labels,
            batch_size=GLOBAL_BATCH,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[record],
        )
    else:
        model.fit(data, epochs=1, verbose=0, callbacks=[record])
    return losses


def weights(model):
    import keras

    return {
        v.path: keras.ops.convert_to_numpy(v.value) for v in model.trainable_variables
    }


def initial_weights(named_shapes):
    """What `set_initial_weights` assigns, by path, for `{path: shape}` in order."""
    rng = np.random.default_rng(0)
    return {
        path: 0.2 * rng.standard_normal(shape).astype("float32")
        for path, shape in named_shapes.items()
    }


def save_result(stem, losses, named_weights, **extra):
    """Writes `stem.npz` (weights by path) and `stem.json` (losses, extras)."""
    np.savez(f"{stem}.npz", **named_weights)
    Path(f"{stem}.json").write_text(json.dumps({"losses": losses, **extra}))


def load_result(stem):
    with np.load(f"{stem}.npz") as arrays:
        named = {key: arrays[key] for key in arrays.files}
    return json.loads(Path(f"{stem}.json").read_text()), named


def free_ports(count):
    """`count` distinct free TCP ports on 127.0.0.1."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def subprocess_env(**overrides):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), str(HERE), env.get("PYTHONPATH", "")]
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.update(overrides)
    return env


def run_workers(commands, envs, timeout=120):
    """Starts processes together; waits for all; always kills what is left.

    Returns the list of `(returncode, output)`; fails with every output on a
    timeout.
    """
    processes = []
    try:
        for command, env in zip(commands, envs):
            processes.append(
                subprocess.Popen(
                    [sys.executable, *command],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=REPO_ROOT,
                )
            )
        deadline = time.monotonic() + timeout
        results = []
        for process in processes:
            remaining = max(deadline - time.monotonic(), 1)
            try:
                output, _ = process.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                for other in processes:
                    other.kill()
                outputs = [p.communicate()[0] for p in processes]
                raise AssertionError(
                    f"workers did not finish in {timeout} s:\n"
                    + "\n---\n".join(o[-3000:] for o in outputs)
                ) from None
            results.append((process.returncode, output))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
