"""Hugging Face checkpoint files: where they are, their config, their tensors.

A checkpoint is a directory in the Hugging Face layout:

```
config.json                       # model_type and the architecture
model.safetensors                 # or model-0000i-of-0000n.safetensors
model.safetensors.index.json      #   with the index of a sharded one
tokenizer.json / tokenizer.model / spiece.model  # the tokenizer
```

`resolve_checkpoint` finds it (a local directory, or `hf://owner/name`
through the `huggingface_hub` cache), `read_config` and `read_weights`
read it, `take` hands a family's mapping one tensor with the shape it
expects, and the family registry says which mapping file turns a
`model_type` into our models. Only safetensors are read: pickle files
(`pytorch_model.bin`) can run code when loaded and are never opened.
"""

import importlib
import json
import os
import re
from pathlib import Path

import keras
import numpy as np

from keras_attn.file_safety import read_json

HF_SCHEME = "hf://"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
# What `hf://` downloads: the config, the weights, the tokenizer and the
# generation defaults; never pickles, ONNX exports or other frameworks'
# weights.
ALLOW_PATTERNS = [
    "*.json",
    "*.safetensors",
    "*.model",
    "*.spm",
    "*.txt",
    "*.tiktoken",
]
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# `from_preset` arguments that change nothing a checkpoint computes.
OVERRIDES = ("dtype", "name", "flash_attention")
# model_type -> the module (or its dotted name) that maps that family.
_FAMILIES = {
    "bert": "keras_attn.hf.bert",
    "llama": "keras_attn.hf.llama",
    "marian": "keras_attn.hf.marian",
    "mistral": "keras_attn.hf.llama",
    "qwen2": "keras_attn.hf.llama",
    "t5": "keras_attn.hf.t5",
}


def is_hf_checkpoint(source):
    """Whether `source` names a Hugging Face checkpoint rather than a preset.

    `True` for a `"hf://..."` string, and for a directory whose
    `config.json` declares a `model_type` and which has no keras-attn preset
    files (a keras-attn preset's `config.json` is a serialized Keras object
    with a `class_name`).
    """
    if isinstance(source, str) and source.startswith(HF_SCHEME):
        return True
    if not isinstance(source, (str, os.PathLike)) or not _is_path(source):
        return False
    directory = Path(source).expanduser()
    config_path = directory / CONFIG_FILE
    if not config_path.is_file() or (directory / "model.weights.h5").exists():
        return False
    try:
        config = read_json(config_path)
    except (OSError, ValueError):
        return False
    return (
        isinstance(config, dict)
        and "model_type" in config
        and "class_name" not in config
    )


def _is_path(source):
    """keras-hub's rule for presets: a path is an `os.PathLike`, or a string
    with a separator, starting with `.` or `~`, or absolute; a bare name
    (`"multi30k_en_de"`) names a registered preset, never a folder."""
    if isinstance(source, os.PathLike):
        return True
    separators = [os.sep] + ([os.altsep] if os.altsep else [])
    return (
        any(separator in source for separator in separators)
        or source.startswith((".", "~"))
        or os.path.isabs(source)
    )


def resolve_checkpoint(source):
    """The local directory of a checkpoint, downloading it where needed.

    Args:
        source: `"hf://owner/name"`, `"hf://owner/name@revision"` (a branch,
            tag or commit), or the path of a local checkpoint directory.
            `hf://` goes through `huggingface_hub.snapshot_download` and its
            cache (`HF_HUB_CACHE`); with `HF_HUB_OFFLINE=1` only the cache is
            used. Only the config, safetensors, tokenizer and generation
            files are fetched.

    Returns:
        A `pathlib.Path` to the checkpoint directory.

    Raises:
        ValueError: a malformed `hf://` address.
        FileNotFoundError: a local path that is not a directory, or a
            repository that is neither cached nor reachable (named).
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            "`source` must be 'hf://owner/name[@revision]' or a directory path. "
            f"Received: source={source!r:.100} of type {type(source).__name__}"
        )
    if isinstance(source, str) and source.startswith(HF_SCHEME):
        return _download(source)
    directory = Path(source).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(
            f"No checkpoint directory at {str(directory)!r}. Received: "
            f"source={str(source)!r}"
        )
    return directory


def _download(source):
    address = source[len(HF_SCHEME) :]
    repo_id, _, revision = address.partition("@")
    if not _REPO_ID.match(repo_id) or (not revision and "@" in address):
        raise ValueError(
            "`source` must be 'hf://owner/name' or 'hf://owner/name@revision'. "
            f"Received: source={source!r}"
        )
    try:
        import huggingface_hub
        from huggingface_hub import constants, errors
    except ImportError as error:
        raise ImportError(
            f"Loading {source!r} needs `huggingface_hub`: pip install 'keras-attn[hf]'."
        ) from error
    try:
        path = huggingface_hub.snapshot_download(
            repo_id, revision=revision or None, allow_patterns=ALLOW_PATTERNS
        )
    except errors.LocalEntryNotFoundError as error:
        offline = constants.HF_HUB_OFFLINE
        why = (
            "HF_HUB_OFFLINE is set"
            if offline
            else "the Hugging Face Hub cannot be reached"
        )
        raise FileNotFoundError(
            f"The repository {repo_id!r}"
            + (f" at revision {revision!r}" if revision else "")
            + f" is not in the Hugging Face cache and {why}. Download it once "
            "with network access (the same `from_preset` call, or "
            f"`hf download {repo_id}`), or set HF_HUB_CACHE to a cache that "
            f"holds it. Received: source={source!r}"
        ) from error
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError) as error:
        raise FileNotFoundError(
            f"The Hugging Face Hub has no repository {repo_id!r}"
            + (f" at revision {revision!r}" if revision else "")
            + f" (or it is private or gated: log in with `hf auth login`). "
            f"Received: source={source!r}"
        ) from error
    return Path(path)


def read_config(directory):
    """The checkpoint's `config.json` as a dict; a malformed one is named."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"The checkpoint directory {str(directory)!r} has no {CONFIG_FILE!r}."
        )
    config = read_json(path)
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ValueError(
            f"{str(path)!r} is not a Hugging Face model config: expected a JSON "
            f"object with a 'model_type' string. Received: {json.dumps(config)[:100]}"
        )
    return config


def weight_files(directory):
    """The safetensors files of a checkpoint, sharded or not, in order.

    Raises:
        FileNotFoundError: no safetensors in `directory`; where it holds a
            pickle file (`pytorch_model.bin`) instead, the error names it.
        ValueError: a malformed `model.safetensors.index.json`.
    """
    directory = Path(directory)
    if (directory / WEIGHTS_FILE).is_file():
        return [directory / WEIGHTS_FILE]
    index_path = directory / WEIGHTS_INDEX_FILE
    if index_path.is_file():
        index = read_json(index_path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(name, str) for name in weight_map.values()
        ):
            raise ValueError(
                f"{str(index_path)!r} is not a safetensors index: expected a "
                "'weight_map' object from tensor names to file names."
            )
        shards = sorted(set(weight_map.values()))
        return [_shard_path(directory, shard, index_path) for shard in shards]
    pickles = [name for name in PICKLE_FILES if (directory / name).exists()]
    pickles += sorted(path.name for path in directory.glob("pytorch_model-*.bin"))
    if pickles:
        raise FileNotFoundError(
            f"The checkpoint {str(directory)!r} has its weights only as "
            f"{pickles[0]!r}, a pickle file: loading a pickle can run arbitrary "
            "code, so keras-attn reads safetensors only. Use a revision of the "
            "repository that has model.safetensors (many have one on the "
            "'refs/pr/N' branch the Hub's conversion bot opened), or convert "
            "it yourself where you trust the file."
        )
    raise FileNotFoundError(
        f"The checkpoint {str(directory)!r} has no {WEIGHTS_FILE!r} and no "
        f"{WEIGHTS_INDEX_FILE!r}."
    )


def _shard_path(directory, name, index_path):
    """`directory / name` for a shard named by the index: a plain file name.

    The Hugging Face cache links each file of a snapshot to a blob outside
    the snapshot's folder, so links are followed; the name itself must not
    leave the folder.
    """
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(
            f"{str(index_path)!r} names a shard outside the checkpoint "
            f"directory: {name!r}. Expected a file name inside {str(directory)!r}."
        )
    path = directory / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(index_path)!r} lists the shard {name!r}, which is not in "
            f"{str(directory)!r}."
        )
    return path


def read_weights(directory):
    """Every tensor of a checkpoint, as float32 (or integer) NumPy arrays.

    Reads `model.safetensors`, or the shards that
    `model.safetensors.index.json` lists. bfloat16 and float16 tensors are
    converted to float32. Nothing is unpickled: a directory that has only
    pickle files is refused (`weight_files`).

    Returns:
        A dict from tensor name to `numpy.ndarray`.
    """
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError as error:
        raise ImportError(
            "Reading safetensors needs `safetensors`: pip install 'keras-attn[hf]'."
        ) from error
    weights = {}
    for path in weight_files(directory):
        try:
            with safe_open(str(path), framework="numpy") as file:
                names = list(file.keys())
                kinds = {name: file.get_slice(name).get_dtype() for name in names}
                for name in names:
                    if kinds[name] != "BF16":
                        weights[name] = _float32(file.get_tensor(name))
        except (SafetensorError, OSError) as error:
            raise ValueError(
                f"{str(path)!r} is not a readable safetensors file: {error}"
            ) from error
        bfloat16 = [name for name in names if kinds[name] == "BF16"]
        if bfloat16:
            weights.update(_read_bfloat16(path, bfloat16))
    return weights


def _float32(array):
    if np.issubdtype(array.dtype, np.floating) and array.dtype != np.float32:
        return array.astype(np.float32)
    return array


def _read_bfloat16(path, names):
    """bfloat16 tensors (which NumPy has no type for) widened to float32.

    safetensors has already checked the header when `path` was opened; its
    offsets give each tensor's bytes, whose 16 bits are float32's upper half.
    """
    with open(path, "rb") as file:
        header_size = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(header_size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    tensors = {}
    for name in names:
        start, end = header[name]["data_offsets"]
        half = np.frombuffer(data[start:end].tobytes(), dtype="<u2")
        widened = half.astype(np.uint32) << 16
        tensors[name] = widened.view(np.float32).reshape(header[name]["shape"])
    return tensors


def take(weights, name, shape, source="the checkpoint"):
    """The tensor `name` of `weights`, refused if missing or of another shape.

    Args:
        weights: dict from tensor name to array (`read_weights`).
        name: the tensor's name in the checkpoint.
        shape: the shape the mapping expects (a tuple of ints).
        source: what to call the checkpoint in errors. Defaults to
            `"the checkpoint"`.

    Returns:
        The array.

    Raises:
        KeyError: no tensor of that name (the error names it).
        ValueError: the tensor has another shape (the error names both).
    """
    if name not in weights:
        raise KeyError(
            f"{source} has no tensor {name!r}, which the config requires "
            f"(shape {tuple(shape)})."
        )
    array = weights[name]
    if tuple(array.shape) != tuple(shape):
        raise ValueError(
            f"The tensor {name!r} of {source} has shape {tuple(array.shape)}; "
            f"the config requires {tuple(shape)}."
        )
    return array


def refuse_config_field(family_name, field, value, why):
    """Raises: the config `field=value` of a `family_name` checkpoint maps
    to nothing keras-attn supports (`why` says what would be needed)."""
    raise ValueError(
        f"This {family_name} checkpoint cannot be loaded exactly: config field "
        f"{field}={value!r} {why}. keras-attn loads a checkpoint exactly or "
        "not at all."
    )


def check_token_ids(family_name, fields, names, vocabulary_size):
    """Refuses a config field of `names` (in `fields`, a dict) that is not
    one token id of a vocabulary of `vocabulary_size`."""
    for name in names:
        value = fields[name]
        if not isinstance(value, int) or isinstance(value, bool):
            refuse_config_field(family_name, name, value, "is not one token id")
        if not 0 <= value < vocabulary_size:
            refuse_config_field(
                family_name,
                name,
                value,
                f"is outside the vocabulary of {vocabulary_size}",
            )


def check_overrides(family_name, overrides, allowed):
    """Refuses `from_preset` arguments other than `allowed` (names)."""
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ValueError(
            f"A {family_name} checkpoint's architecture comes from its "
            f"config.json; only {', '.join(f'`{name}`' for name in allowed)} "
            "may be given. Received: "
            f"{', '.join(f'{k}={overrides[k]!r}' for k in unknown)}"
        )


def with_flash_attention(arguments, overrides):
    """`arguments` (a model's) updated with `overrides`; `flash_attention`
    goes into the `attention` settings."""
    overrides = dict(overrides)
    if "flash_attention" in overrides:
        arguments["attention"] = {
            **arguments["attention"],
            "flash_attention": overrides.pop("flash_attention"),
        }
    arguments.update(overrides)
    return arguments


def check_all_used(unused, family_name, source):
    """Refuses checkpoint tensors (`unused` names) no mapping reads: the
    checkpoint is another architecture than its config declares."""
    unused = sorted(unused)
    if unused:
        shown = ", ".join(unused[:5]) + (", ..." if len(unused) > 5 else "")
        raise ValueError(
            f"{source} holds tensors that a {family_name} config does not "
            f"account for ({shown}): it is not the architecture its "
            "config.json declares."
        )


def load_weights(
    model, weights, to_ours, family_name, source, accounted=(), left_fresh=()
):
    """Assigns a checkpoint's tensors to `model` through a family's mapping.

    Args:
        model: the model built from the mapped config.
        weights: the checkpoint's tensors (`read_weights`).
        to_ours: the family's load mapping, `to_ours(get)` returning our
            weights (path -> array), `get(name, shape)` giving a checkpoint
            tensor (`take`).
        family_name: the family, for messages.
        source: what to call the checkpoint in errors.
        accounted: names of tensors the mapping does not read but the
            family has checked (tied copies, buffers). Defaults to `()`.
        left_fresh: as for `assign_weights`. Defaults to `()`.

    Returns:
        `model`.

    Raises:
        ValueError: a tensor that is neither read nor accounted for
            (`check_all_used`), or a mapping that does not fit the model.
    """
    used = set(accounted)

    def get(name, shape):
        used.add(name)
        return take(weights, name, shape, source)

    ours = to_ours(get)
    check_all_used(set(weights) - used, family_name, source)
    assign_weights(model, ours, family_name, left_fresh=left_fresh)
    return model


def assign_weights(model, ours, family_name, left_fresh=()):
    """Assigns `ours` (weight path -> array) to `model`'s weights.

    Args:
        model: the model built from the mapped config.
        ours: dict of weight path -> NumPy array (emptied).
        family_name: the family, for messages.
        left_fresh: path prefixes of weights that keep their initial
            values (a new classification head). Defaults to `()`.

    Raises:
        ValueError: a weight with no value (outside `left_fresh`), or a
            value for no weight: a mapping that does not fit the model.
    """
    for variable in model.weights:
        if variable.path in ours:
            variable.assign(keras.ops.cast(ours.pop(variable.path), variable.dtype))
        elif not (left_fresh and variable.path.startswith(tuple(left_fresh))):
            raise ValueError(
                f"keras-attn's {family_name} mapping has no value for the weight "
                f"{variable.path!r}."
            )
    if ours:
        raise ValueError(
            f"keras-attn's {family_name} mapping made weights the model does "
            f"not have: {sorted(ours)[:5]}."
        )


def invert_mapping(model, to_ours, family_name):
    """A checkpoint's tensors (name -> float32 array) from `model`'s weights,
    by a family's load mapping run backwards.

    `to_ours(get)` is the mapping the family loads with, `get(name, shape)`
    giving a checkpoint tensor. Run on arrays of positions (each checkpoint
    tensor a distinct range of integers, starting at 1), it returns for each
    weight of ours the positions its values come from, through whatever
    transposes and reshapes the mapping applies; each weight's values are
    written back at those positions. A position below 1 is a value the
    mapping adds (our padding id's zero row or logit) and a weight that is
    not an integer array is a constant of the mapping: neither goes back.
    A checkpoint value that no weight of `model` gives is zero.

    Raises:
        ValueError: a weight of `model` the mapping has no place for.
    """
    shapes, starts, total = {}, {}, 1

    def positions(name, shape):
        nonlocal total
        shapes[name], starts[name] = tuple(shape), total
        total += int(np.prod(shape))
        return np.arange(starts[name], total, dtype=np.int64).reshape(shape)

    index = to_ours(positions)
    values = {
        variable.path: keras.ops.convert_to_numpy(keras.ops.cast(variable, "float32"))
        for variable in model.weights
    }
    unplaced = sorted(set(values) - set(index))
    if unplaced:
        raise ValueError(
            f"The model has weights a {family_name} checkpoint has no place "
            f"for: {unplaced[:5]}."
        )
    flat = np.zeros(total, np.float32)
    for path, where in index.items():
        where = np.asarray(where)
        if where.dtype != np.int64:
            continue  # a constant of the mapping
        kept = where.ravel() > 0
        flat[where.ravel()[kept]] = values[path].ravel()[kept]
    return {
        name: flat[starts[name] : starts[name] + int(np.prod(shape))].reshape(shape)
        for name, shape in shapes.items()
    }


def check_export_class(model, model_class, family_name):
    """Refuses a `model` that is not a `model_class`, the class a
    `family_name` checkpoint loads as."""
    if not isinstance(model, model_class):
        raise TypeError(
            f"A {family_name} export writes a keras_attn.models."
            f"{model_class.__name__}. Received: model of type {type(model).__name__}"
        )


def refuse_export(family_name, option, value, why):
    """Raises the `ValueError` of a model option a family cannot hold."""
    raise ValueError(
        f"A {family_name} checkpoint cannot hold this model exactly: {why}. "
        f"Received: {option}={value!r}"
    )


def write_exported_checkpoint(
    model, directory, family_name, config, arguments, to_ours
):
    """Writes `model` as a checkpoint of `config`; returns the directory.

    `arguments` are what the family's `model_arguments(config)` maps back
    to: a model of them must have `model`'s config (any option that differs
    is one the checkpoint cannot hold, refused naming it, before anything
    is written). Then `model.safetensors` (the load mapping `to_ours` run
    backwards, `invert_mapping`) and `config.json`.
    """
    expected = type(model)(**arguments).get_config()
    given = model.get_config()
    for option in sorted(set(expected) - {"name", "trainable", "dtype"}):
        if given.get(option) != expected[option]:
            refuse_export(
                family_name,
                option,
                given.get(option),
                f"{family_name}'s has {option}={expected[option]!r}",
            )
    tensors = invert_mapping(model, to_ours, family_name)
    return write_checkpoint(directory, tensors, config)


def write_checkpoint(directory, tensors, config):
    """Writes `model.safetensors` (`tensors`, name -> array) and
    `config.json` (`config`, a dict) in `directory`, created if missing.

    Returns:
        The directory as a `pathlib.Path`.
    """
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return directory


def register_family(model_type, module):
    """Registers the mapping of a `model_type`: a module or its dotted name.

    The module provides `load_model(directory, config, weights, **overrides)`
    (the model), and, where it supports them, `load_tokenizer(directory,
    config)` and `export(model, directory)`.
    """
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(
            f"`model_type` must be a non-empty string. Received: model_type={model_type!r}"
        )
    _FAMILIES[model_type] = module


def supported_model_types():
    """The `model_type` values a family is registered for, sorted."""
    return sorted(_FAMILIES)


def family(model_type):
    """The module that maps checkpoints of `model_type` onto our models.

    Raises:
        ValueError: no family is registered for `model_type` (the error
            names it and the supported ones).
    """
    if model_type not in _FAMILIES:
        raise ValueError(
            f"keras-attn has no mapping for model_type={model_type!r} (the "
            "'model_type' of config.json). Supported model types: "
            f"{', '.join(supported_model_types())}."
        )
    module = _FAMILIES[model_type]
    if isinstance(module, str):
        module = importlib.import_module(module)
        _FAMILIES[model_type] = module
    return module
