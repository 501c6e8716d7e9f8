"""Reuse freed host memory across XLA:CPU executions (JAX on a CPU).

A launcher concern of the recipes and benchmarks, not a library entry
point: `reuse_freed_host_memory` restarts the running program, which a
library must never do to its user's process. The recipes and `bench/`
call it first thing; a program of your own can do the same, or set the
variables of `MALLOC_ENVIRONMENT` before starting Python.
"""

import os
import platform
import sys
import warnings

# glibc's malloc options, as the environment variables it reads when the
# process starts: every thread allocates from the main heap, large blocks
# come from the heap rather than from `mmap`, and up to 2 GiB (the largest
# value) of freed memory at the top of the heap is kept for reuse.
MALLOC_ENVIRONMENT = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1),
}


def reuse_freed_host_memory(backend=None):
    """Restarts the program so that XLA:CPU reuses its per-step buffers.

    On the CPU, JAX's XLA runtime allocates each compiled function's
    temporary buffer (about 200 MB for a training step of the
    `bench/train_throughput.py` model) when the function runs and frees it
    when it returns. glibc's `malloc` serves blocks that large with a fresh
    `mmap` and gives them back with `munmap`, so every step touches about
    50,000 new pages, each a page fault that the kernel must zero: about a
    fifth of the training step on a 2-core machine (`docs/performance.md`).

    With the options of `MALLOC_ENVIRONMENT` the next step reuses the pages
    of the last one; the process's resident memory then stays at its peak
    instead of shrinking between steps. glibc reads them reliably only when
    the process starts (set later with `mallopt`, they miss the threads
    that already allocated, so whether they help depends on timing). So if
    they are not set yet, this function re-executes the running program
    (`sys.orig_argv`, same interpreter and arguments) with them added to
    its environment: call it first thing in a script, before any work, as
    the recipes do. It returns only when there is nothing to restart.
    Keras is not imported here (the recipes choose the backend after).

    It applies only to the JAX backend on Linux with glibc. TensorFlow has
    its own allocator, which already reuses memory (and measured slower with
    these options). In an interactive session, where a restart would lose
    the session, it warns and changes nothing: set the variables before
    starting Python instead (`MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0
    MALLOC_TRIM_THRESHOLD_=2147483647 python ...`).

    Args:
        backend: str, the Keras backend the program uses. Defaults to
            `None`, meaning the `KERAS_BACKEND` environment variable, else
            `"jax"` (Keras's default).

    Returns:
        `True` if the options are in effect (the process started with
        them), `False` if nothing was changed (another backend or platform,
        or an interactive session).

    Example:

    >>> from keras_attn_recipes.host_memory import reuse_freed_host_memory
    >>> reuse_freed_host_memory(backend="tensorflow")
    False

    References:
        `mallopt(3)` (`M_ARENA_MAX`, `M_MMAP_MAX`, `M_TRIM_THRESHOLD`), the
        GNU C Library manual.
    """
    if backend is None:
        backend = os.environ.get("KERAS_BACKEND", "jax")
    if backend != "jax" or not sys.platform.startswith("linux"):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    if all(os.environ.get(name) == value for name, value in MALLOC_ENVIRONMENT.items()):
        return True
    if hasattr(sys, "ps1") or sys.flags.interactive or not sys.argv[0]:
        warnings.warn(
            "reuse_freed_host_memory() cannot restart an interactive session; "
            "set "
            + " ".join(f"{k}={v}" for k, v in MALLOC_ENVIRONMENT.items())
            + " before starting Python.",
            stacklevel=2,
        )
        return False
    os.environ.update(MALLOC_ENVIRONMENT)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)
