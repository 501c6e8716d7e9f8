"""Shared pytest setup: backend default, seeds, dtype policy, import path."""

import os
import sys
import tempfile

# Must happen before Keras is imported anywhere.
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The tests compile hundreds of tiny XLA programs (JAX runs eager ops one
# compiled program each); LLVM's optimisations cost far more than they save.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# Many tests build the same tiny models, and a new model is a new function
# to JAX's in-memory cache: JAX's persistent cache, keyed by the compiled
# program, lets them (and the recipes' subprocesses, which inherit the
# variable) reuse each other's compilations. One directory per machine
# user; JAX keys entries by its version and flags.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(tempfile.gettempdir(), f"keras-attn-tests-jax-cache-{os.getuid()}"),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
# `tests/` has no `__init__.py`: put it on the path so that test files can
# `from layer_harness import run_layer_test`, and the repository root so that
# `pytest tests` finds `keras_attn` without an install.
for path in (TESTS_DIR, REPO_ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

import keras  # noqa: E402
import pytest  # noqa: E402

if keras.backend.backend() == "torch":
    import torch

    # CI runs the backends side by side on 2 cores. torch's intra-op thread
    # pool waits for all of its threads at every op, which on a busy machine
    # costs far more than it gains on tiny tensors: a transformer_tiny train
    # step took 2.1 s with 2 threads and 0.28 s with 1 (load average 18).
    torch.set_num_threads(1)

    # The tests compare outputs with NumPy references through `np.asarray`,
    # as they do on JAX and TensorFlow. On torch an eager output of a layer
    # with weights requires grad, and `torch.Tensor.__array__` refuses those;
    # `keras.ops.convert_to_numpy` detaches first. Do the same here, for the
    # tests only (the library never converts tensors to NumPy itself).
    _tensor_to_array = torch.Tensor.__array__

    def _detached_array(self, *args, **kwargs):
        return _tensor_to_array(self.detach(), *args, **kwargs)

    torch.Tensor.__array__ = _detached_array


def pytest_report_header(config):
    return f"keras {keras.__version__}, KERAS_BACKEND={keras.backend.backend()}"


def pytest_collection_modifyitems(config, items):
    """Shares tests out among backends run side by side.

    `scripts/test.sh` lists the backends it runs side by side in
    KERAS_ATTN_SPLIT_BACKENDS. Then a `split_backend(name)` test runs on
    `name` only (on the first listed when `name` is not among them: torch
    could not be installed), and the cases of a `split_cases` test are dealt
    out in turn: its i-th case runs on the (i mod n)-th listed backend, so
    each case runs once and each backend runs some. A one-backend run, e.g.
    `KERAS_BACKEND=tensorflow pytest tests`, runs all.
    """
    side_by_side = os.environ.get("KERAS_ATTN_SPLIT_BACKENDS", "").split()
    if len(side_by_side) < 2:
        return
    backend = keras.backend.backend()
    cases_seen = {}
    for item in items:
        split = item.get_closest_marker("split_backend")
        if split is not None:
            runs_on = split.args[0] if split.args[0] in side_by_side else side_by_side[0]
            reason = f"split_backend: runs on {runs_on}"
        elif item.get_closest_marker("split_cases") is not None:
            function = (item.path, getattr(item, "originalname", item.name))
            index = cases_seen.get(function, 0)
            cases_seen[function] = index + 1
            runs_on = side_by_side[index % len(side_by_side)]
            reason = f"split_cases: this case runs on {runs_on}"
        else:
            continue
        if runs_on != backend:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{reason} when the backends run side by side"
                )
            )


@pytest.fixture(autouse=True)
def _fixed_seed():
    """Every test starts from the same global seed."""
    keras.utils.set_random_seed(0)


@pytest.fixture(autouse=True)
def _float32_policy():
    """A test that changes the global dtype policy cannot leak it."""
    yield
    keras.mixed_precision.set_dtype_policy("float32")


@pytest.fixture
def no_collection_per_deleted_variable(monkeypatch):
    """Makes `gc.collect()` a no-op for one test.

    Keras's `Layer.__delattr__` runs a full collection for every variable
    it deletes, to free device memory at once; `model.quantize` deletes
    each kernel it replaces: 0.5 s or more per kernel in a test process
    (33 for the tiny Transformer, most of its quantization test's time).
    For tests that check values and files, not memory.
    """
    import gc

    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)


@pytest.fixture(autouse=True, scope="session")
def _full_float32_matmul_precision():
    """Reference comparisons run at full float32 matmul precision.

    On a GPU, JAX multiplies float32 matrices in TF32 by default and
    TensorFlow does too on Ampere and later: about 1e-3 relative error,
    which the float32 tolerances of the reference tests (1e-5) do not
    allow. Pinned to full precision for the whole session; on a CPU it
    changes nothing. The bfloat16/float16 tests keep their own tolerances.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
    yield
