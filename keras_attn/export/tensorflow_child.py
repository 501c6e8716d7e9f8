"""The child half of `keras_attn.export.tensorflow_process`.

Run as `python -m keras_attn.export.tensorflow_child WORK_DIR` with
`KERAS_BACKEND=tensorflow`: loads the model and tokenizer that the parent
saved in `WORK_DIR`, exports them with `export_translator` and records the
parent's backend in the export's settings file.
"""

import json
import sys
from pathlib import Path

import keras

from keras_attn.export.tensorflow_process import REQUEST_FILE
from keras_attn.export.translator_export import CONFIG_FILE, export_translator
from keras_attn.saving import load_model
from keras_attn.text.tokenizer import SubwordTokenizer


def main(work):
    """Exports the request in the folder `work`; see the module docstring."""
    work = Path(work)
    request = json.loads((work / REQUEST_FILE).read_text())
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "keras_attn.export.tensorflow_child runs with KERAS_BACKEND="
            f"tensorflow. Received: {keras.backend.backend()}"
        )
    model = load_model(work / "model.keras", compile=False)
    tokenizer = SubwordTokenizer.load(work / "tokenizer")
    directory = export_translator(
        model, tokenizer, request["directory"], **request["options"]
    )
    config_path = directory / "assets.extra" / CONFIG_FILE
    settings = json.loads(config_path.read_text())
    settings["trained_on_backend"] = request["trained_on_backend"]
    config_path.write_text(json.dumps(settings, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
