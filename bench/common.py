"""Shared helpers for the benchmarks: backend selection, timing, matmul peak.

Every benchmark measures a peer and keras-attn in one process, interleaved,
and reports medians over several timed windows: on a shared, noisy machine
the ratios are the result to read, not the absolute times.
"""

import os
import statistics
import time


def add_host_memory_flag(parser):
    """Adds `--system-malloc`: measure without `reuse_freed_host_memory`."""
    parser.add_argument(
        "--system-malloc",
        action="store_true",
        help="keep glibc's default malloc options (JAX then page-faults its "
        "per-step buffers; see keras_attn_recipes.host_memory)",
    )


def select_backend(backend, system_malloc=False):
    """Sets `KERAS_BACKEND`; call before the first `import keras`.

    Unless `system_malloc`, calls
    `keras_attn_recipes.host_memory.reuse_freed_host_memory`, as
    the recipes do: on JAX it restarts the script with the malloc options,
    for every model the script then measures.

    Returns:
        str, a line saying how host memory is allocated.
    """
    os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if system_malloc:
        return "host memory: glibc defaults (--system-malloc)"
    from keras_attn_recipes.host_memory import reuse_freed_host_memory

    if reuse_freed_host_memory(backend):
        return "host memory: reuse_freed_host_memory() applied"
    return f"host memory: allocator defaults ({backend} keeps its own)"


def block(value):
    """Waits for an asynchronously dispatched (JAX) result."""
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def interleaved_medians(functions, windows, steps_per_window, clock=None):
    """Times each callable in turn, `windows` times, rotating the order.

    Args:
        functions: dict name -> callable running one step (and blocking).
        windows: number of timed windows per callable.
        steps_per_window: calls per window.
        clock: the timer. Defaults to `time.perf_counter` (wall time);
            `time.process_time` counts this process's CPU time, all threads,
            which other jobs on a shared machine do not inflate.

    Returns:
        dict name -> median seconds per call over the windows.
    """
    clock = clock or time.perf_counter
    names = list(functions)
    samples = {name: [] for name in names}
    for window in range(windows):
        shift = window % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            for _ in range(steps_per_window):
                functions[name]()
            samples[name].append((clock() - start) / steps_per_window)
    return {name: statistics.median(values) for name, values in samples.items()}


def matmul_peak_flops(size=1024, repeats=5, dtype="float32"):
    """Measured matrix-multiply FLOP/s of this process's backend.

    Times a compiled `keras.ops.matmul` of two `(size, size)` matrices of
    `dtype` (JAX: `jax.jit`; TensorFlow: `tf.function(jit_compile=True)`)
    and returns the best (not the median) of `repeats` timings: the peak is
    what the hardware can do when it gets the cores.
    """
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    a = keras.ops.convert_to_tensor(rng.standard_normal((size, size)), dtype=dtype)
    b = keras.ops.convert_to_tensor(rng.standard_normal((size, size)), dtype=dtype)
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        matmul = jax.jit(keras.ops.matmul)
    elif backend == "tensorflow":
        import tensorflow as tf

        matmul = tf.function(keras.ops.matmul, jit_compile=True)
    else:
        matmul = keras.ops.matmul
    block(matmul(a, b))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = matmul(a, b)
        if backend == "tensorflow":
            out.numpy()
        block(out)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best
