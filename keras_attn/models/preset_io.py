"""Preset directories: a model's config and weights, its tokenizer, metadata.

A preset is either a name from a model's table of shapes
(`Transformer.presets`: architecture only, random weights) or a directory
in the keras-hub layout, which also holds trained weights:

```
multi30k_en_de/
    config.json          # keras.saving.serialize_keras_object(model)
    model.weights.h5     # model.save_weights(...)
    tokenizer.json       # the tokenizer's config (where there is one)
    assets/tokenizer/    # the tokenizer's files (the SentencePiece model)
    metadata.json        # versions, backend, recipe, data, scores, ...
```

Trained presets shipped with keras-attn live in `keras_attn/presets/<name>/`
(package data); any other directory can be passed by its path. Loading
reads JSON and HDF5 only: `safe_mode` stays on, so no code is executed.

Names and paths (keras-hub's rule): a bare name (`"multi30k_en_de"`) means
a registered preset only, never a folder of that name in the working
directory; a directory is used when it is given as a path: an
`os.PathLike`, or a string that contains a path separator, starts with
`.` or `~`, or is absolute (`"./multi30k_en_de"`). Every file a preset
reads lies inside its folder: a symbolic link that resolves inside the
folder is followed, one that resolves outside is refused, for every file
(config, metadata, weights, tokenizer).
"""

import json
import os
import re
import warnings
from pathlib import Path

import keras

from keras_attn.file_safety import read_error_reason, replace_directory
from keras_attn.hf import checkpoints as hf_checkpoints
from keras_attn.hf.files import is_hf_checkpoint
from keras_attn.layers.legacy_config import migrate_model_config
from keras_attn.models.preset_files import (
    CONFIG_FILE,
    METADATA_FILE,
    TOKENIZER_ASSETS_DIR,
    TOKENIZER_CONFIG_FILE,
    WEIGHTS_FILE,
    check_preset_json,
    preset_file,
    read_preset_file,
)
from keras_attn.models.presets import (
    ARCHITECTURE_PRESETS,
    preset_config,
    with_overrides,
)
from keras_attn.version import __version__

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"
WEIGHTS_DTYPES = ("float32", "float16", "bfloat16")


def _version_tuple(version):
    return tuple(int(part) for part in re.findall(r"\d+", str(version))[:3])


def shipped_presets():
    """Names of the trained presets shipped in `keras_attn/presets/`."""
    if not PRESETS_DIR.is_dir():
        return []
    # Hidden folders are a save's temporaries (`.partial-*`), not presets.
    return sorted(
        path.name
        for path in PRESETS_DIR.iterdir()
        if not path.name.startswith(".") and (path / CONFIG_FILE).is_file()
    )


def is_preset_path(preset):
    """Whether `preset` is given as a path rather than as a registered name.

    keras-hub's rule: an `os.PathLike`, or a string that contains a path
    separator, starts with `.` or `~`, or is absolute. A bare name such as
    `"multi30k_en_de"` is a name, even where a folder of that name exists.
    """
    if isinstance(preset, os.PathLike):
        return True
    separators = [os.sep] + ([os.altsep] if os.altsep else [])
    return (
        any(separator in preset for separator in separators)
        or preset.startswith((".", "~"))
        or os.path.isabs(preset)
    )


def preset_directory(preset, architecture_presets=()):
    """The directory of a trained preset: a shipped name or a local path.

    A bare name (no path separator, not starting with `.` or `~`, not
    absolute) means a shipped preset only; a directory must be given as a
    path (`"./my_preset"`, `pathlib.Path("my_preset")`), so a folder in the
    working directory never stands in for a registered preset.

    Args:
        preset: a shipped preset's name (`keras_attn.models.list_presets()`)
            or the path of a preset directory.
        architecture_presets: names that are also accepted (listed in the
            error). Defaults to `()`.

    Returns:
        A `pathlib.Path`.

    Raises:
        TypeError: `preset` is not a `str` or `os.PathLike`.
        ValueError: `preset` is an unknown name, naming the known presets
            (and, where a folder of that name exists, saying to pass
            `"./<name>"`).
        FileNotFoundError: a path that is not a directory, or a directory
            without `config.json`.
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise TypeError(
            "`preset` must be a preset name or a directory path. "
            f"Received: preset={preset!r:.100} of type {type(preset).__name__}"
        )
    if isinstance(preset, str) and not preset:
        raise ValueError(
            "`preset` must be a preset name or a directory path. Received: preset=''"
        )
    if is_preset_path(preset):
        directory = Path(preset).expanduser()
        if not directory.is_dir():
            raise FileNotFoundError(
                f"No preset directory at {str(directory)!r}. Received: "
                f"preset={str(preset)!r}. Known preset names: "
                f"{', '.join(_known_presets(architecture_presets))}."
            )
    elif preset in shipped_presets():
        directory = PRESETS_DIR / preset
    else:
        if Path(preset).is_dir():
            how = (
                f"A folder {preset!r} exists in the working directory, but a "
                "bare name only means a registered preset: to load that "
                f"folder, pass its path, `{'./' + preset!r}`."
            )
        else:
            how = (
                "A local preset directory (written by `save_to_preset`) is "
                "accepted by its path, e.g. `'./my_preset'`."
            )
        raise ValueError(
            f"Unknown preset. Received: preset={preset!r}. Known presets: "
            f"{', '.join(_known_presets(architecture_presets))}. {how}"
        )
    read_preset_file(directory, CONFIG_FILE)  # names the file if missing
    return directory


def _known_presets(architecture_presets):
    return sorted(set(architecture_presets)) + [
        f"{name} (trained)" for name in shipped_presets()
    ]


def check_preset_version(metadata, directory):
    """Warns when the preset was written by a newer keras-attn."""
    saved = metadata.get("keras_attn_version")
    if saved and _version_tuple(saved) > _version_tuple(__version__):
        warnings.warn(
            f"The preset {str(directory)!r} was saved by keras-attn {saved}, "
            f"newer than this keras-attn {__version__}; it may not load "
            "correctly. Upgrade keras-attn.",
            stacklevel=3,
        )


class PresetMixin:
    """`from_preset` and `save_to_preset` for the models of the zoo.

    A class that mixes this in sets `presets` (its table of architecture
    presets) and `preset_arguments` (constructor arguments that an
    architecture preset may leave to the caller, such as `vocabulary_size`).
    """

    presets = {}
    preset_arguments = ()

    @classmethod
    def from_preset(cls, preset, load_weights=True, **overrides):
        """Builds a model from a preset: a named shape or a trained preset.

        A name from `presets` (e.g. `"transformer_base"`) gives a model with
        random weights, its missing arguments (`vocabulary_size`,
        `num_classes`) passed as keyword arguments. The name of a shipped
        trained preset (see `keras_attn.models.list_presets()`) or the path
        of a directory written by `save_to_preset` gives the saved model,
        with its weights unless `load_weights=False`. Weights stored in
        float16 load into the saved (float32) model; pass `dtype=...` to
        choose another. A Hugging Face checkpoint, `"hf://owner/name"` or a
        local folder with its `config.json` and safetensors, loads through
        its family's mapping (`keras_attn.hf`, `docs/bring_a_checkpoint.md`).

        Args:
            preset: a preset name, a preset directory, `"hf://owner/name"`
                (`"hf://owner/name@revision"`) or a checkpoint directory.
            load_weights: bool, whether to load a trained preset's weights.
                Defaults to `True`.
            **overrides: constructor arguments that replace the preset's.

        Returns:
            A model of this class.
        """
        if isinstance(preset, str) and preset in cls.presets:
            return cls._from_architecture_preset(preset, **overrides)
        if is_hf_checkpoint(preset):  # "hf://owner/name" or its local folder
            return hf_checkpoints.load_model(preset, cls, load_weights, **overrides)
        directory = preset_directory(preset, cls.presets)
        config = read_preset_file(directory, CONFIG_FILE)
        metadata = read_preset_file(directory, METADATA_FILE)
        check_preset_version(metadata, directory)
        expected = keras.saving.get_registered_name(cls)
        received = config.get("registered_name") or config.get("class_name")
        if received != expected:
            raise ValueError(
                f"The preset {str(directory)!r} holds a {received}, not a "
                f"{expected}: load it with that class's `from_preset`."
            )
        config_path = directory / CONFIG_FILE
        # The saved arguments under today's names (an older file's flat
        # attention settings as `attention`), then the caller's overrides.
        arguments = migrate_model_config(config["config"])
        config = {**config, "config": with_overrides(arguments, overrides)}
        config.pop("compile_config", None)  # See `save_to_preset`.
        try:
            model = keras.saving.deserialize_keras_object(config, safe_mode=True)
        except (TypeError, ValueError, KeyError) as error:
            given = f" with the overrides {overrides}" if overrides else ""
            kind = TypeError if isinstance(error, TypeError) else ValueError
            raise kind(
                f"{str(config_path)!r}{given} does not describe a valid "
                f"{expected}: {type(error).__name__}: {error}"
            ) from error
        if load_weights:
            # Checked to resolve inside the preset, then loaded by its own
            # name: Keras picks the format from the suffix, and the target
            # of a link (a content-addressed store) may have another.
            weights_path = directory / WEIGHTS_FILE
            if not preset_file(directory, WEIGHTS_FILE).is_file():
                raise FileNotFoundError(
                    f"The preset directory {str(directory)!r} has no "
                    f"{WEIGHTS_FILE!r}; pass `load_weights=False` for the "
                    "architecture alone."
                )
            try:
                model.load_weights(weights_path)
            except Exception as error:
                raise ValueError(
                    f"{str(weights_path)!r} cannot be loaded into "
                    f"the model of {CONFIG_FILE!r}: {read_error_reason(error)}"
                ) from error
        return model

    @classmethod
    def _from_architecture_preset(cls, preset, **overrides):
        given = {name: overrides.pop(name, None) for name in cls.preset_arguments}
        config = preset_config(cls.presets, preset, cls.preset_arguments, **given)
        return cls(**with_overrides(config, overrides))

    def save_to_preset(
        self, directory, tokenizer=None, metadata=None, weights_dtype=None
    ):
        """Writes this model (and its tokenizer) as a preset directory.

        Writes `config.json`, `model.weights.h5` and `metadata.json`, plus
        `tokenizer.json` and `assets/tokenizer/` when a tokenizer is given.
        `from_preset(directory)` loads it, on any backend.

        The preset is built in a hidden folder beside `directory` and moved
        in by renames, so saving over an existing preset is atomic: a kill
        or a failure at any instant leaves the old preset whole. The whole
        folder is replaced, so `directory` must be new, empty, or a preset;
        a folder holding anything else (a run directory) is refused.

        Args:
            directory: `str` or `pathlib.Path`; created if missing.
            tokenizer: an object with a `save_to_preset(directory)` method,
                such as `keras_attn.text.SubwordTokenizer`. Defaults to
                `None` (no tokenizer).
            metadata: dict of JSON-serializable facts to record (the recipe
                command, the data and its licence, scores, ...). Defaults to
                `None`.
            weights_dtype: `"float16"` or `"bfloat16"` stores the float
                weights at half size; loading casts them back to the
                model's dtype. Defaults to `None`, meaning the variables'
                own dtype.

        Returns:
            The directory, as an absolute `pathlib.Path`.

        Raises:
            ValueError: `directory` is a file, or a folder that holds files
                that are not part of a preset; `metadata` has a known field
                of the wrong type (e.g. `"decoding"` not a dict).
        """
        _check_preset_arguments(tokenizer, metadata, weights_dtype)
        if not isinstance(directory, (str, os.PathLike)) or not str(directory):
            raise TypeError(
                "`directory` must be a `str` or `pathlib.Path` path. Received: "
                f"directory={directory!r:.100}"
            )
        directory = Path(directory).expanduser().absolute()
        _check_preset_destination(directory)
        record = self._preset_metadata(tokenizer, metadata, weights_dtype)
        check_preset_json(
            "`metadata`", METADATA_FILE, _json_round_trip(record, "metadata")
        )

        def build(folder):
            config = keras.saving.serialize_keras_object(self)
            # A preset is an inference artefact: the training run's optimizer
            # and loss stay with the run (a compiled config would rebuild an
            # optimizer whose state the weights file does not hold).
            config.pop("compile_config", None)
            _write_json(folder / CONFIG_FILE, config)
            self._save_preset_weights(folder / WEIGHTS_FILE, weights_dtype)
            if tokenizer is not None:
                tokenizer.save_to_preset(folder)
            _write_json(folder / METADATA_FILE, record)

        # Built beside `directory` and swapped in by renames: a kill or a
        # failure at any point leaves the old preset whole (or nothing).
        replace_directory(directory, build)
        return directory

    def _preset_metadata(self, tokenizer, metadata, weights_dtype):
        """The facts of `metadata.json`: versions, model, and the caller's."""
        return {
            "keras_attn_version": __version__,
            "keras_version": keras.version(),
            "backend": keras.backend.backend(),
            "model": type(self).__name__,
            "parameters": int(self.count_params()),
            "weights_dtype": weights_dtype or self._float_weights_dtype(),
            "tokenizer": tokenizer is not None,
            **(metadata or {}),
        }

    def _float_weights_dtype(self):
        dtypes = sorted({v.dtype for v in self.weights if "float" in str(v.dtype)})
        return dtypes[0] if len(dtypes) == 1 else "mixed"

    def _save_preset_weights(self, path, weights_dtype):
        if weights_dtype is None or weights_dtype == self._float_weights_dtype():
            self.save_weights(path)
            return
        # A twin built in `weights_dtype` holds the cast weights, so the
        # file has this model's layout with half-size float arrays.
        config = {**self.get_config(), "dtype": weights_dtype}
        twin = type(self).from_config(config)
        twin.set_weights(
            [
                keras.ops.convert_to_numpy(mine).astype(theirs.dtype)
                for mine, theirs in zip(self.weights, twin.weights)
            ]
        )
        twin.save_weights(path)


def _check_preset_arguments(tokenizer, metadata, weights_dtype):
    """The checks of `save_to_preset`, before anything is written."""
    if weights_dtype is not None and weights_dtype not in WEIGHTS_DTYPES:
        raise ValueError(
            f"`weights_dtype` must be one of {WEIGHTS_DTYPES} or None. "
            f"Received: weights_dtype={weights_dtype!r}"
        )
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(
            f"`metadata` must be a dict. Received: metadata={metadata!r:.100}"
        )
    if tokenizer is not None and not hasattr(tokenizer, "save_to_preset"):
        raise TypeError(
            "`tokenizer` must have a `save_to_preset(directory)` method "
            "(e.g. `keras_attn.text.SubwordTokenizer`). Received: "
            f"tokenizer={tokenizer!r:.100}"
        )


# What a preset folder may hold: `save_to_preset` replaces such a folder.
_PRESET_ENTRIES = {
    CONFIG_FILE,
    WEIGHTS_FILE,
    METADATA_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_ASSETS_DIR.split("/")[0],
}


def _check_preset_destination(directory):
    """Refuses a destination whose replacement would lose other files."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(
            "`directory` must be a folder path (new, empty or a preset). "
            f"Received: directory={str(directory)!r}, which is a file"
        )
    if not directory.is_dir():
        return
    working = Path.cwd().resolve()
    if directory.resolve() in (working, *working.parents):
        raise ValueError(
            "`directory` must not be the working directory or one above it: "
            "`save_to_preset` replaces the whole folder. Received: "
            f"directory={str(directory)!r}"
        )
    foreign = sorted(
        entry.name for entry in directory.iterdir() if entry.name not in _PRESET_ENTRIES
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(
            "`save_to_preset` replaces the whole folder, and "
            f"{str(directory)!r} holds files that are not part of a preset "
            f"({shown}). Pass a new or empty directory, or an existing "
            f"preset. Received: directory={str(directory)!r}"
        )


def _json_round_trip(content, name):
    """`content` as it reads back from JSON (tuples become lists)."""
    try:
        return json.loads(json.dumps(content))
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"`{name}` must hold JSON values only (str, numbers, bool, None, "
            f"lists, dicts): {error}. Received: {name}={content!r:.100}"
        ) from error


def _write_json(path, content):
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def list_presets():
    """The presets of every zoo model: architecture shapes and trained ones.

    Returns:
        A dict from preset name to a dict with `"model"` (the class name),
        `"weights"` (`True` for a trained preset, whose `from_preset` loads
        weights; `False` for a shape with random weights) and, for trained
        presets, `"description"`.

    Example:

    >>> presets = keras_attn.models.list_presets()
    >>> presets["transformer_base"]
    {'model': 'Transformer', 'weights': False}
    """
    listing = {}
    for model, presets in ARCHITECTURE_PRESETS.items():
        for name in presets:
            listing[name] = {"model": model, "weights": False}
    for name in shipped_presets():
        directory = PRESETS_DIR / name
        metadata = read_preset_file(directory, METADATA_FILE)
        listing[name] = {
            "model": metadata.get("model", "?"),
            "weights": (directory / WEIGHTS_FILE).is_file(),
            "description": metadata.get("description", ""),
        }
    return dict(sorted(listing.items()))
