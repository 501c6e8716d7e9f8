"""`save-preset`: a trained translation run as a preset directory.

Reads a run directory of `translate_multi30k.py train` (`model.keras`,
`tokenizer/`, `config.json`, `checkpoints/epoch_*.keras`, `training.json`,
`*.bleu.json`) and writes the model, its tokenizer and `metadata.json`
(versions, backend, recipe, data and its licence, scores with their
sacreBLEU signatures, parameter count) in the layout
`keras_attn.text.Translator.from_preset` loads. Its `"check"` is the
preset's score as loaded back (float16 weights included) on a few val pairs,
which `tests/zoo/test_shipped_presets.py` recomputes on every backend.
"""

import dataclasses
import json
from pathlib import Path

import keras

from keras_attn.file_safety import replace_directory, write_text_atomically
from keras_attn_recipes.cli_io import RunDirectoryError, check_preset_dir_apart
from keras_attn_recipes.translation_config import SETTINGS
from keras_attn_recipes.translation_steps import load_translator

# What a shipped preset may weigh (the wheel carries it).
MAX_WEIGHTS_MEGABYTES = 12
# Val pairs of the `"check"` score (the first ones of the split).
CHECK_PAIRS = 64

DATA = {
    "name": "Multi30k task 1, English-German (train 29,000 pairs)",
    "citation": "Elliott et al., 2016, Multi30K: Multilingual English-German "
    "Image Descriptions, https://aclanthology.org/W16-3210/",
    "source": "https://github.com/multi30k/dataset (data/task1/raw)",
    "license": "Multi30K is provided for non-commercial research and "
    "educational use only (partly derived from Flickr30K); see "
    "keras_attn/text/data/multi30k/README.md",
}


def _setting_name(config):
    """The name of the setting `config` is, unchanged, or `None`."""
    for name, setting in SETTINGS.items():
        if dataclasses.asdict(setting) == dataclasses.asdict(config):
            return name
    return None


def _scores(output_dir):
    """Every `{split}.{strategy}[.avgN].bleu.json` of the run, by file stem."""
    scores = {}
    for path in sorted(Path(output_dir).glob("*.bleu.json")):
        scores[path.name[: -len(".bleu.json")]] = _read_json(path)
    return scores


def _read_json(path):
    """A JSON file of the run, or a `RunDirectoryError` naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunDirectoryError(
            f"{path} is not a readable JSON file of the run ({error}). Run the "
            "step that writes it again (`train` or `evaluate`), or remove it."
        ) from None


def save_preset(
    output_dir,
    preset_dir,
    average_last=None,
    dtype=None,
    trained_on=None,
    description=None,
    command=None,
):
    """Writes the trained run in `output_dir` as a preset in `preset_dir`.

    Args:
        output_dir: the run directory.
        preset_dir: the preset directory to write (created if missing).
        average_last: int, average the last N epoch checkpoints. Defaults to
            `None`, meaning the run's setting (`average_checkpoints`).
        dtype: `"float16"` stores the weights at half size (they load as
            float32). Defaults to `None` (float32).
        trained_on: the backend the run trained on. Defaults to `None`,
            meaning the run's `training.json` `"backend"`, else this one.
        description: one line for `list_presets()`. Defaults to `None`, a
            description made from the run.
        command: the command line that wrote the preset, for the record.

    Returns:
        The preset directory, as a `pathlib.Path`.
    """
    output_dir, preset_dir = Path(output_dir), Path(preset_dir)
    check_preset_dir_apart(preset_dir, output_dir)
    translator, config = load_translator(output_dir, "beam", average_last)
    if average_last is None:
        average_last = config.average_checkpoints
    metadata = _metadata(
        translator.model, config, output_dir, average_last, trained_on, command
    )
    if description:  # else the one made from the run
        metadata["description"] = description

    def build(folder):
        # The whole preset, its check included, is written and loaded back
        # in a folder beside `preset_dir`, then swapped in: a kill or a full
        # disk at any point leaves the old preset whole.
        translator.model.save_to_preset(
            folder,
            tokenizer=translator.tokenizer,
            metadata=metadata,
            weights_dtype=dtype,
        )
        metadata_path = folder / "metadata.json"
        record = json.loads(metadata_path.read_text(encoding="utf-8"))
        record["check"] = _check(folder.resolve())
        write_text_atomically(metadata_path, json.dumps(record, indent=2) + "\n")

    replace_directory(preset_dir, build)
    _report(preset_dir, output_dir, metadata, _scores_stem(average_last))
    return preset_dir


def _check(preset_dir):
    """Per-piece perplexity of the preset, as it loads, on the first val pairs.

    Teacher forcing: the model reads `[start] target` and predicts
    `target [end]`; padding is neither read as a real token nor scored.
    """
    import numpy as np

    from keras_attn.text import Translator, load_multi30k

    translator = Translator.from_preset(preset_dir)
    tokenizer, model = translator.tokenizer, translator.model
    sources, targets = (side[:CHECK_PAIRS] for side in load_multi30k("val"))
    source_ids = tokenizer.tokenize(sources).to_list()
    target_ids = tokenizer.tokenize(targets).to_list()

    def padded(rows):
        return keras.utils.pad_sequences(
            rows, padding="post", value=tokenizer.pad_id, dtype="int32"
        )

    encoder_tokens = padded([ids + [tokenizer.end_id] for ids in source_ids])
    decoder_tokens = padded([[tokenizer.start_id] + ids for ids in target_ids])
    labels = padded([ids + [tokenizer.end_id] for ids in target_ids])
    logits = model.predict_on_batch(
        {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}
    )
    log_probs = keras.ops.convert_to_numpy(
        keras.ops.log_softmax(keras.ops.cast(logits, "float32"), axis=-1)
    )  # (pairs, target_length, vocabulary)
    picked = np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    real = labels != tokenizer.pad_id
    return {
        "what": f"per-piece perplexity of the first {CHECK_PAIRS} Multi30k val "
        "pairs, teacher-forced (`[start] target` in, `target [end]` scored)",
        "pairs": CHECK_PAIRS,
        "score": float(np.exp(-picked[real].sum() / real.sum())),
        "backend": keras.backend.backend(),
    }


def _scores_stem(average_last):
    """The scores of exactly these weights (beam search, the same averaging)."""
    return "test_2016_flickr.beam" + (f".avg{average_last}" if average_last > 1 else "")


def _description(model, setting, average_last):
    averaged = (
        f", mean of the last {average_last} checkpoints" if average_last > 1 else ""
    )
    return (
        f"English-to-German Transformer ({model.count_params():,} parameters) "
        f"trained on Multi30k with keras-attn's `{setting or 'custom'}` setting"
        + averaged
    )


def _metadata(model, config, output_dir, average_last, trained_on, command):
    """`metadata.json`: versions, recipe, data, decoding and scores."""
    training_path = output_dir / "training.json"
    training = _read_json(training_path) if training_path.exists() else {}
    setting = _setting_name(config)
    scores = _scores(output_dir)
    stem = _scores_stem(average_last)
    return {
        "description": _description(model, setting, average_last),
        "task": "translation",
        "source_language": "en",
        "target_language": "de",
        "trained_on_backend": training.get("backend", trained_on)
        or keras.backend.backend(),
        "recipe": {
            "train_command": (
                f"keras-attn-translate train --setting {setting}"
                if setting
                else "keras-attn-translate train with `recipe_config` below"
            ),
            "save_command": command,
            "average_last": average_last,
            "training": training,
        },
        "recipe_config": dataclasses.asdict(config),
        "data": DATA,
        "decoding": {
            "beam_size": config.beam_size,
            "length_penalty_alpha": config.length_penalty_alpha,
        },
        "scores": scores,
        "scores_of_these_weights": stem if stem in scores else None,
    }


def _report(preset_dir, output_dir, metadata, stem):
    """Prints the weights' size, and warns where the preset falls short."""
    megabytes = (preset_dir / "model.weights.h5").stat().st_size / 2**20
    print(f"Saved the preset to {preset_dir} ({megabytes:.1f} MB of weights).")
    if megabytes > MAX_WEIGHTS_MEGABYTES:
        print(
            f"Warning: more than the {MAX_WEIGHTS_MEGABYTES} MB a shipped preset "
            "may weigh; pass --dtype float16 to halve it."
        )
    if metadata["scores_of_these_weights"] is None:
        print(
            f"Warning: no {stem}.bleu.json in {output_dir}: "
            "the preset records no score of these weights. Run `evaluate` (with "
            "the same --average-last) first."
        )
