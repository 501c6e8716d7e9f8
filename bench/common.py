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


def add_torch_threads_flag(parser):
    """Adds `--torch-threads N`: torch's intra-op (OpenMP) thread count."""
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch only: torch.set_num_threads(N) before building the models "
        "(default: torch's, one per core). On a machine shared with other "
        "jobs, 2 threads on 2 cores spin at every parallel op's barrier; 1 "
        "thread times the work (bench/README.md, 'torch builds')",
    )


def check_torch_threads_flag(parser, args):
    """Refuses `--torch-threads` off torch or below 1 (`parser.error`)."""
    if args.torch_threads is not None and args.backend != "torch":
        parser.error(
            "--torch-threads applies to --backend torch only. "
            f"Received: --backend {args.backend}"
        )
    if args.torch_threads is not None and args.torch_threads < 1:
        parser.error(
            f"--torch-threads must be >= 1. Received: --torch-threads={args.torch_threads}"
        )


def configure_torch(threads=None):
    """On torch, applies `threads`; returns a line naming the build.

    The line gives `torch.__version__`, `torch.version.cuda` (`None` on the
    CPU-only `+cpu` wheels), the intra-op thread count, `OMP_WAIT_POLICY`
    and whether denormals are flushed in this thread (no getter exists: a
    float32 subnormal multiplied by 2 reads back as 0 when they are).
    Returns `None` on other backends; imports torch only on torch.

    Args:
        threads: int or `None`, `torch.set_num_threads(threads)` when given.
    """
    import keras

    if keras.backend.backend() != "torch":
        return None
    import torch

    if threads is not None:
        if threads < 1:
            raise ValueError(
                f"`--torch-threads` must be >= 1. Received: --torch-threads={threads}"
            )
        torch.set_num_threads(threads)
    cuda = torch.version.cuda
    build = "CPU-only (+cpu) build" if cuda is None else f"CUDA {cuda} build"
    subnormal = torch.tensor([1e-39], dtype=torch.float32) * 2.0
    flushed = bool(subnormal[0] == 0)
    return (
        f"torch {torch.__version__} ({build}), "
        f"intra-op threads: {torch.get_num_threads()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
        f"flush denormal {'on' if flushed else 'off'}"
    )


def load_line(when):
    """`when`'s system load average against the CPU count, as a line.

    Benchmarks run on shared machines: a load above the CPU count means
    other jobs competed for the cores, and eager torch with one OpenMP
    thread per core then loses whole scheduler slices at its barriers.
    """
    try:
        one, five, _ = os.getloadavg()
    except OSError:  # not every platform has it
        return f"load average {when}: unknown"
    cpus = os.cpu_count() or 1
    line = f"load average {when}: {one:.1f} (1 min), {five:.1f} (5 min) on {cpus} CPUs"
    if one > cpus:
        line += " -- other jobs competed for the cores: timings are noisy"
    return line


def block(value):
    """Waits for an asynchronously dispatched (JAX) result."""
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def interleaved_medians(
    functions, windows, steps_per_window, clock=None, on_window=None
):
    """Times each callable in turn, `windows` times, rotating the order.

    Args:
        functions: dict name -> callable running one step (and blocking).
        windows: number of timed windows per callable.
        steps_per_window: calls per window.
        clock: the timer. Defaults to `time.perf_counter` (wall time);
            `time.process_time` counts this process's CPU time, all threads,
            which other jobs on a shared machine do not inflate.
        on_window: optional callable `(window, name, seconds_per_call)`,
            called as each window ends (progress that survives a run cut
            off by a time limit, such as a GPU lease's).

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
            if on_window is not None:
                on_window(window, name, samples[name][-1])
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
