"""Test accuracy of the shipped classifier presets in LiteRT, float32 and int8.

    python bench/litert_accuracy.py
    python bench/litert_accuracy.py --limit 16        # a smoke run

`bbc_news_classifier` and `digits_vit` are exported with
`keras_attn.export.export_litert` (builtin ops; batch 1, the classifier at
its preset's 128 pieces) as float32 and as dynamic-range int8 (int8
weights, float activations), and each `.tflite` classifies the preset's
test split, one example at a time, in the `ai-edge-litert` interpreter in a
process that imports neither Keras nor TensorFlow. The test splits are the
recipes' (`docs/presets.md`): BBC News' stratified 10 % (213 articles,
`recipes/classify_text.py`), the digits' stratified 20 % (360 images,
`recipes/vit_digits.py`), both with the seed in the preset's metadata.
Printed: the accuracy of the Keras model (TensorFlow backend) and of each
file, how many predictions equal Keras's, the largest logit difference and
the file size.
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("bbc_news_classifier", "digits_vit")
QUANTIZATIONS = {"float32": None, "int8 (dynamic range)": "dynamic_range"}

# Runs one `.tflite` over `inputs.npz` row by row; saves the logits.
INTERPRETER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=sys.argv[1]).get_signature_runner("serving_default")
    inputs = np.load(sys.argv[2])
    name = inputs.files[0]
    logits = [
        next(iter(runner(**{name: inputs[name][i : i + 1]}).values()))[0]
        for i in range(len(inputs[name]))
    ]
    np.save(sys.argv[3], np.stack(logits))
    loaded = {m.split(".")[0] for m in sys.modules} & {"keras", "tensorflow", "jax"}
    assert not loaded, f"the interpreter process imported {sorted(loaded)}"
    """
)


def test_split(preset):
    """`(model, inputs, labels, export_options)` of a preset's test split."""
    sys.path.insert(0, str(ROOT / "recipes"))
    directory = ROOT / "keras_attn" / "presets" / preset
    seed = json.loads((directory / "metadata.json").read_text())["recipe"]["config"][
        "seed"
    ]
    if preset == "digits_vit":
        from vit_digits import load_digits_splits

        from keras_attn.models import VisionTransformer

        _, _, (images, labels) = load_digits_splits(seed)
        return VisionTransformer.from_preset(preset), images, labels, {}
    from classify_text import load_bbc_news, split

    from keras_attn.text import TextClassifier

    classifier = TextClassifier.from_preset(preset)
    texts, labels, _ = load_bbc_news()
    _, _, (test_texts, test_labels) = split(texts, labels, seed)
    options = {"sequence_length": classifier.sequence_length}
    return classifier.model, classifier.encode(test_texts), test_labels, options


def run_interpreter(path, name, inputs, work_dir):
    import numpy as np

    inputs_file, logits_file = work_dir / "inputs.npz", work_dir / "logits.npy"
    np.savez(inputs_file, **{name: inputs})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-c", INTERPRETER, path, inputs_file, logits_file]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"the interpreter failed on {path}:\n{result.stderr[-3000:]}")
    return np.load(logits_file)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work-dir", type=Path, default=Path("runs/litert_accuracy"))
    parser.add_argument("--limit", type=int, default=None, help="First N test rows.")
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = "tensorflow"  # LiteRT export needs it
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from keras_attn.export import export_litert

    work_dir = args.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for preset in PRESETS:
        model, inputs, labels, options = test_split(preset)
        inputs, labels = inputs[: args.limit], np.asarray(labels)[: args.limit]
        keras_logits = model.predict(inputs, batch_size=64, verbose=0)
        keras_predictions = keras_logits.argmax(axis=-1)
        row = {
            "preset": preset,
            "examples": len(labels),
            "keras": float(np.mean(keras_predictions == labels)),
        }
        for title, quantize in QUANTIZATIONS.items():
            path = work_dir / f"{preset}.{quantize or 'float32'}.tflite"
            export_litert(model, path, batch_size=1, quantize=quantize, **options)
            logits = run_interpreter(path, model.inputs[0].name, inputs, work_dir)
            predictions = logits.argmax(axis=-1)
            row[title] = {
                "accuracy": float(np.mean(predictions == labels)),
                "same_as_keras": int(np.sum(predictions == keras_predictions)),
                "max_logit_difference": float(np.abs(logits - keras_logits).max()),
                "megabytes": round(path.stat().st_size / 1e6, 2),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    (work_dir / "litert_accuracy.json").write_text(json.dumps(rows, indent=2))
    print(
        "\n| preset | test examples | Keras | LiteRT float32 | LiteRT int8 "
        "| predictions = Keras's (float32 / int8) | largest logit difference "
        "(float32 / int8) | file MB (float32 / int8) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        f32, int8 = row["float32"], row["int8 (dynamic range)"]
        print(
            f"| `{row['preset']}` | {row['examples']} | {row['keras']:.3f} | "
            f"{f32['accuracy']:.3f} | {int8['accuracy']:.3f} | "
            f"{f32['same_as_keras']} / {int8['same_as_keras']} | "
            f"{f32['max_logit_difference']:.2g} / {int8['max_logit_difference']:.2g} | "
            f"{f32['megabytes']} / {int8['megabytes']} |"
        )


if __name__ == "__main__":
    main()
