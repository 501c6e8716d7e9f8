"""A quiet start for the command lines: no CUDA or oneDNN notices on a CPU.

On a machine without a GPU, TensorFlow 2.21 writes its first lines before
anything a user asked for:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 ... port.cc:153] oneDNN custom operations are on. ...
    I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 ... cuda_platform.cc:52] failed call to cuInit: ... UNKNOWN ERROR (303)

`TF_CPP_MIN_LOG_LEVEL` hides TensorFlow's later notices, but not these: the
first three are logged while its libraries load, before it reads the
variable (twice: two of its libraries log them), and the last is an
error-level line that says again that there is no GPU driver.

`quiet_start` is for the entry points (the console script, the recipes'
`__main__`), never for library code: `keras_attn` leaves a user's logging
as it is. It sets `TF_CPP_MIN_LOG_LEVEL=2` unless the user set it, then,
when TensorFlow is first imported (if ever: a JAX run that needs no tf.data
never imports it), filters standard error for that import and TensorFlow's
first device query only, dropping lines below the level TensorFlow would
show, absl's line about `InitializeLog`, and the `cuInit` error when the
same import said there is no CUDA driver. On the JAX and torch backends,
where TensorFlow only feeds the model, it also turns off TensorFlow's
oneDNN rewrites (`TF_ENABLE_ONEDNN_OPTS=0`, unless set): they log an
error-level int64 notice from the tf.data graphs. Everything else passes
unchanged, as it is written, and nothing is filtered after that import: a
real error still shows. `TF_CPP_MIN_LOG_LEVEL=0` shows everything.
"""

import contextlib
import importlib.abc
import os
import re
import subprocess
import sys

# absl's header: severity letter, date (MMDD), time, thread id, file:line].
# Before `absl::InitializeLog()` the date is 0000 and the seconds the Unix
# time: `I0000 00:00:1795715070.829925    5286 port.cc:153] `.
_LOG_LINE = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]]*\] ")
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_ABSL_PREAMBLE = b"before absl::InitializeLog() is called are written to STDERR"
_NO_CUDA_DRIVER = b"Could not find cuda drivers on your machine"
_CUINIT_FAILED = b"failed call to cuInit"


def quiet_start():
    """Quiets TensorFlow's start-up notices for this process's command line.

    Call it first in an entry point, before Keras or TensorFlow is imported.
    A user's own `TF_CPP_MIN_LOG_LEVEL` wins.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules or _min_log_level() < 1:
        return  # Too late to filter its import, or the user asked for notices.
    if not any(isinstance(finder, _QuietImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())


def _min_log_level():
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0  # TensorFlow reads a value it cannot parse as 0 too.


class _StartupFilter:
    """Decides, line by line, what of TensorFlow's import output to keep."""

    def __init__(self, min_log_level):
        self.min_log_level = min_log_level
        self.no_cuda_driver = False

    def keep(self, line):
        if _ABSL_PREAMBLE in line:
            return False
        if _NO_CUDA_DRIVER in line:
            self.no_cuda_driver = True
        if self.no_cuda_driver and _CUINIT_FAILED in line:
            return False  # Says again that there is no driver; a CPU run.
        match = _LOG_LINE.match(line)
        if match is None:
            return True  # Not an absl log line: a traceback, a warning.
        return _SEVERITY[match.group(1)] >= self.min_log_level


@contextlib.contextmanager
def _filtered_stderr(min_log_level):
    """Passes file descriptor 2 through `_StartupFilter` while the block runs.

    At the descriptor, not `sys.stderr`: TensorFlow's C++ code writes there.
    The filter is a child process that forwards each kept line as it
    arrives: if the import aborts (TensorFlow's fatal "compiled to use AVX
    instructions" on an older CPU), it still forwards the last lines before
    it sees the pipe close. Its own session keeps Ctrl-C for the program.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield  # No standard error to filter.
        return
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    program = (
        f"import sys; sys.path.insert(0, {package_parent!r}); "
        f"from {__name__} import _filter_stdin; _filter_stdin({min_log_level})"
    )
    try:
        # -I -S: the standard library alone, started fast.
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", program],
            stdin=subprocess.PIPE,
            stdout=saved,
            stderr=saved,
            start_new_session=True,
        )
    except OSError:
        os.close(saved)
        yield  # No interpreter to start (an embedded Python): unfiltered.
        return
    os.dup2(child.stdin.fileno(), 2)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        child.stdin.close()  # The pipe's last write end: the filter ends.
        # A process started meanwhile may hold the pipe open; the filter
        # then goes on forwarding what it writes, and the program goes on.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)


def _filter_stdin(min_log_level):
    """The filter process: standard input to output, line by line."""
    line_filter = _StartupFilter(min_log_level)
    pending = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        _write(1, b"".join(line + b"\n" for line in lines if line_filter.keep(line)))
    if pending and line_filter.keep(pending):
        _write(1, pending)


def _write(fd, data):
    while data:
        data = data[os.write(fd, data) :]


class _QuietImport(importlib.abc.MetaPathFinder):
    """Runs the first `import tensorflow` under `_filtered_stderr`."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        # The other finders' spec. Not `importlib.util.find_spec`, which
        # would ask this finder again; and this finder stays in place until
        # the module runs: a `find_spec` that only asks whether TensorFlow
        # is installed (torch does, for every module it knows) imports
        # nothing.
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        min_log_level = _min_log_level()

        def quiet_exec_module(module):
            with contextlib.suppress(ValueError):  # Once.
                sys.meta_path.remove(self)
            _input_pipeline_only_onednn()
            try:
                with _filtered_stderr(min_log_level):
                    exec_module(module)
                    _query_devices(module)
            finally:
                del loader.exec_module  # The loader's own method again.

        # On this loader object only (one per spec): `module.__loader__` is
        # TensorFlow's own loader, as it would be.
        loader.exec_module = quiet_exec_module
        return spec


def _input_pipeline_only_onednn():
    """No oneDNN graph rewrites where TensorFlow runs only the input pipeline.

    On the JAX and torch backends TensorFlow runs tf.data and the
    tokenizers, never the model; its oneDNN rewrite of their int64 graphs
    logs `E0000 ... util.cc] oneDNN supports DT_INT64 only on platforms
    with AVX-512`, an error-level line for no error, and speeds up nothing
    that runs there. Read when TensorFlow loads (the backend is chosen by
    then); a user's own `TF_ENABLE_ONEDNN_OPTS` wins, and the TensorFlow
    backend keeps TensorFlow's default.
    """
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def _query_devices(tensorflow):
    # The cuInit error comes with TensorFlow's first device query, which
    # would otherwise come later, unfiltered, at the first op.
    # If it fails, that is not this function's to report: the same query
    # fails again, with its message, where the program first uses a device.
    with contextlib.suppress(Exception):
        tensorflow.config.list_physical_devices()


__all__ = ["quiet_start"]
