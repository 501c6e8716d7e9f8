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
"""

import json
import re
import warnings
from pathlib import Path

import keras

from keras_attn.models.presets import ARCHITECTURE_PRESETS, preset_config

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
TOKENIZER_CONFIG_FILE = "tokenizer.json"
TOKENIZER_ASSETS_DIR = "assets/tokenizer"
WEIGHTS_DTYPES = ("float32", "float16", "bfloat16")


def _version_tuple(version):
    return tuple(int(part) for part in re.findall(r"\d+", str(version))[:3])


def shipped_presets():
    """Names of the trained presets shipped in `keras_attn/presets/`."""
    if not PRESETS_DIR.is_dir():
        return []
    return sorted(
        path.name for path in PRESETS_DIR.iterdir() if (path / CONFIG_FILE).is_file()
    )


def read_preset_file(directory, file_name):
    """The JSON content of `directory/file_name`; a missing file is named."""
    path = Path(directory) / file_name
    if not path.is_file():
        raise FileNotFoundError(
            f"The preset directory {str(directory)!r} has no {file_name!r} "
            f"(expected at {str(path)!r})."
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{str(path)!r} is not valid JSON: {error}") from error


def preset_directory(preset, architecture_presets=()):
    """The directory of a trained preset: a shipped name or a local path.

    Args:
        preset: a shipped preset's name (`keras_attn.models.list_presets()`)
            or the path of a preset directory.
        architecture_presets: names that are also accepted (listed in the
            error). Defaults to `()`.

    Returns:
        A `pathlib.Path`.

    Raises:
        ValueError: `preset` is neither, naming the known presets.
        FileNotFoundError: the directory has no `config.json`.
    """
    if not isinstance(preset, (str, Path)):
        raise TypeError(
            "`preset` must be a preset name or a directory path. "
            f"Received: preset={preset!r}"
        )
    local = Path(preset).expanduser()
    if local.is_dir():
        directory = local
    elif str(preset) in shipped_presets():
        directory = PRESETS_DIR / str(preset)
    else:
        known = sorted(set(architecture_presets)) + [
            f"{name} (trained)" for name in shipped_presets()
        ]
        raise ValueError(
            f"Unknown preset. Received: preset={str(preset)!r}. Known presets: "
            f"{', '.join(known)}. A local preset directory (written by "
            "`save_to_preset`) is accepted by its path."
        )
    read_preset_file(directory, CONFIG_FILE)  # names the file if missing
    return directory


def check_preset_version(metadata, directory):
    """Warns when the preset was written by a newer keras-attn."""
    from keras_attn import __version__

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
        choose another.

        Args:
            preset: a preset name or a preset directory.
            load_weights: bool, whether to load a trained preset's weights.
                Defaults to `True`.
            **overrides: constructor arguments that replace the preset's.

        Returns:
            A model of this class.
        """
        if isinstance(preset, str) and preset in cls.presets:
            return cls._from_architecture_preset(preset, **overrides)
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
        config = {**config, "config": {**config["config"], **overrides}}
        config.pop("compile_config", None)  # See `save_to_preset`.
        model = keras.saving.deserialize_keras_object(config, safe_mode=True)
        if load_weights:
            weights_path = directory / WEIGHTS_FILE
            if not weights_path.is_file():
                raise FileNotFoundError(
                    f"The preset directory {str(directory)!r} has no "
                    f"{WEIGHTS_FILE!r}; pass `load_weights=False` for the "
                    "architecture alone."
                )
            try:
                model.load_weights(weights_path)
            except Exception as error:
                raise ValueError(
                    f"{str(weights_path)!r} cannot be loaded into the model of "
                    f"{CONFIG_FILE!r}: {type(error).__name__}: {error}"
                ) from error
        return model

    @classmethod
    def _from_architecture_preset(cls, preset, **overrides):
        given = {name: overrides.pop(name, None) for name in cls.preset_arguments}
        config = preset_config(cls.presets, preset, cls.preset_arguments, **given)
        config.update(overrides)
        return cls(**config)

    def save_to_preset(
        self, directory, tokenizer=None, metadata=None, weights_dtype=None
    ):
        """Writes this model (and its tokenizer) as a preset directory.

        Writes `config.json`, `model.weights.h5` and `metadata.json`, plus
        `tokenizer.json` and `assets/tokenizer/` when a tokenizer is given.
        `from_preset(directory)` loads it, on any backend.

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
            The directory, as a `pathlib.Path`.
        """
        _check_preset_arguments(tokenizer, metadata, weights_dtype)
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = keras.saving.serialize_keras_object(self)
        # A preset is an inference artefact: the training run's optimizer
        # and loss stay with the run (a compiled config would rebuild an
        # optimizer whose state the weights file does not hold).
        config.pop("compile_config", None)
        _write_json(directory / CONFIG_FILE, config)
        self._save_preset_weights(directory / WEIGHTS_FILE, weights_dtype)
        if tokenizer is not None:
            tokenizer.save_to_preset(directory)
        _write_json(
            directory / METADATA_FILE,
            self._preset_metadata(tokenizer, metadata, weights_dtype),
        )
        return directory

    def _preset_metadata(self, tokenizer, metadata, weights_dtype):
        """The facts of `metadata.json`: versions, model, and the caller's."""
        from keras_attn import __version__

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
