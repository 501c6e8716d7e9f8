"""`import keras_attn` in a fresh process, then a subpackage's first use.

One run for two tests, each reading its part: `tests/test_quiet_start.py`
(the import leaves TensorFlow's log level and the import system alone and,
on JAX and torch, prints nothing) and `tests/test_package.py` (the import
loads no subpackage beyond the root's and no TensorFlow on JAX and torch;
a subpackage loads on first use). One start of Python, Keras and the
backend instead of two (seconds each, most of both tests' time).
"""

import dataclasses
import functools
import json
import os
import subprocess
import sys
import textwrap

import keras

# Written to stderr (the program's argument) once `import keras_attn` has
# returned: what comes before it is what the import printed.
IMPORTED = "--- keras_attn imported ---"

PROGRAM = textwrap.dedent(
    """
    import json, os, sys

    # JAX itself sets TF_CPP_MIN_LOG_LEVEL=1 when unset: Keras is imported
    # first and the library compared with it.
    import keras

    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    meta_path = list(sys.meta_path)
    import keras_attn

    report = {
        "log_level_kept": os.environ.get("TF_CPP_MIN_LOG_LEVEL") == level,
        "meta_path_kept": sys.meta_path == meta_path,
        "loaded": {
            name: name in sys.modules
            for name in ("tensorflow", "keras_attn.text", "keras_attn.export")
        },
    }
    sys.stderr.flush()
    os.write(2, (sys.argv[1] + "\\n").encode())
    from keras_attn.text.translator import Translator

    report["text_translator_is_translator"] = keras_attn.text.Translator is Translator
    report["export_translator_module"] = keras_attn.export.export_translator.__module__
    report["dir"] = dir(keras_attn)
    print(json.dumps(report))
    """
)


@dataclasses.dataclass(frozen=True)
class Run:
    returncode: int
    stderr: str
    # What `import keras_attn` wrote to stderr (all of it if it failed).
    import_stderr: str
    # The program's report: `None` if it failed.
    report: dict


@functools.cache
def run_library_import():
    """The fresh process's `Run`, on the current backend, without
    TensorFlow's logging settings in its environment."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TF_CPP_", "TF_ENABLE_ONEDNN"))
    }
    env["KERAS_BACKEND"] = keras.backend.backend()
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, IMPORTED],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        timeout=300,
    )
    import_stderr = result.stderr.partition(IMPORTED)[0]
    report = None
    if result.returncode == 0:
        report = json.loads(result.stdout.splitlines()[-1])
    return Run(result.returncode, result.stderr, import_stderr, report)
