"""Export from the torch backend: the same export, run in a TensorFlow process.

Keras writes a SavedModel from torch only through `torch_xla`, and the
translator's SavedModel holds TensorFlow graphs (tokenization, the decoding
`while` loop) that a torch process cannot trace. Keras's `.keras` format is
the same on every backend, so on torch `export_translator` saves the model
and its tokenizer to a temporary directory and starts
`python -m keras_attn.export.tensorflow_child` with
`KERAS_BACKEND=tensorflow`: that process loads them and calls
`export_translator` there. The caller's process is left as it was.

This module is the parent's half and imports nothing of
`keras_attn.export`: the child is another process, named by its module.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import keras

# What the parent asks of the child, written beside the saved model.
REQUEST_FILE = "request.json"
CHILD_MODULE = "keras_attn.export.tensorflow_child"


def export_in_tensorflow_process(model, tokenizer, directory, **options):
    """Writes `model` + `tokenizer` and exports them with the TensorFlow backend.

    Args:
        model: a built `keras_attn.models.Transformer`.
        tokenizer: its `keras_attn.text.SubwordTokenizer`.
        directory: where the SavedModel goes.
        **options: `export_translator`'s other arguments (plain data).

    Returns:
        The `pathlib.Path` of the SavedModel.
    """
    directory = Path(directory).resolve()
    with tempfile.TemporaryDirectory(prefix="keras_attn_export_") as work:
        work = Path(work)
        model.save(work / "model.keras")
        tokenizer.save(work / "tokenizer")
        request = {
            "directory": str(directory),
            "options": options,
            "trained_on_backend": keras.backend.backend(),
        }
        (work / REQUEST_FILE).write_text(json.dumps(request))
        # The child must import this same keras_attn (a checkout, not only an
        # installed copy): put its parent directory first on the path.
        package_parent = str(Path(__file__).resolve().parents[2])
        python_path = os.pathsep.join(
            [package_parent] + [p for p in [os.environ.get("PYTHONPATH")] if p]
        )
        env = dict(os.environ, KERAS_BACKEND="tensorflow", PYTHONPATH=python_path)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        result = subprocess.run(
            [sys.executable, "-m", CHILD_MODULE, str(work)],
            env=env,
            capture_output=True,
            text=True,
        )
        if options.get("verbose", True) and result.stdout:
            print(result.stdout, end="")
        if result.returncode != 0:
            raise RuntimeError(
                "Exporting in a TensorFlow process failed (exit "
                f"{result.returncode}):\n{result.stderr[-4000:]}"
            )
    return directory
