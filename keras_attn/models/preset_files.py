"""The files of a preset folder: their names, and their JSON checked on read.

Every file a preset reads lies inside its folder (a symbolic link that
resolves inside it is followed, one that resolves outside is refused), and
each JSON file must have the shape its part of the preset needs: a JSON
object whose known fields have their types. A file that fails is named
with the field, the value and what was expected.
"""

from pathlib import Path

from keras_attn.file_safety import confined_path, read_json

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
TOKENIZER_CONFIG_FILE = "tokenizer.json"
TOKENIZER_ASSETS_DIR = "assets/tokenizer"


def preset_file(directory, file_name):
    """The path of `file_name` in a preset, refused if it leads outside it.

    A symbolic link that resolves inside the preset folder is followed; one
    that resolves outside it is refused, whatever the file (config,
    metadata, weights, tokenizer), so a preset reads only its own files.

    Raises:
        ValueError: the file resolves outside the preset folder.
    """
    return confined_path(
        directory,
        file_name,
        f"The preset {str(directory)!r}",
        what="preset file",
        folder="the preset",
    )


def read_preset_file(directory, file_name):
    """The checked JSON content of `directory/file_name`, a dict.

    Raises:
        FileNotFoundError: the file is missing, naming it.
        ValueError: the file resolves outside the preset, is not UTF-8 JSON,
            is nested too deeply, or does not have the shape its part of
            the preset needs (a JSON object; known fields of their types),
            naming the file, the field and what was expected.
    """
    path = preset_file(directory, file_name)
    if not path.is_file():
        raise FileNotFoundError(
            f"The preset directory {str(directory)!r} has no {file_name!r} "
            f"(expected at {str(Path(directory) / file_name)!r})."
        )
    content = read_json(path)
    check_preset_json(repr(str(path)), file_name, content)
    return content


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_string_list(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _optional(check):
    return lambda value: value is None or check(value)


# The fields a preset's JSON files must have (`required`) or may have, the
# check of each and what it expects: what keras-attn reads from them.
_PRESET_FIELDS = {
    CONFIG_FILE: {
        "class_name": (True, lambda v: isinstance(v, str), "a class name string"),
        "config": (True, lambda v: isinstance(v, dict), "a JSON object"),
        "registered_name": (
            False,
            _optional(lambda v: isinstance(v, str)),
            "a string or null",
        ),
        "module": (False, _optional(lambda v: isinstance(v, str)), "a string"),
    },
    METADATA_FILE: {
        "keras_attn_version": (False, lambda v: isinstance(v, str), "a string"),
        "model": (False, lambda v: isinstance(v, str), "a string"),
        "description": (False, lambda v: isinstance(v, str), "a string"),
        "weights_dtype": (False, lambda v: isinstance(v, str), "a string"),
        "tokenizer": (False, lambda v: isinstance(v, bool), "true or false"),
        "decoding": (False, lambda v: isinstance(v, dict), "a JSON object"),
        "class_names": (
            False,
            _optional(_is_string_list),
            "a list of strings or null",
        ),
        "sequence_length": (
            False,
            _optional(lambda v: _is_int(v) and v > 0),
            "a positive integer or null",
        ),
    },
    TOKENIZER_CONFIG_FILE: {
        "model_file": (True, lambda v: isinstance(v, str), "a file name string"),
        "vocabulary_size": (
            False,
            lambda v: _is_int(v) and v > 0,
            "a positive integer",
        ),
        **{
            name: (False, lambda v: _is_int(v) and v >= 0, "a non-negative integer")
            for name in ("pad_id", "unk_id", "start_id", "end_id")
        },
    },
}
_DECODING_FIELDS = {
    "beam_size": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "length_penalty_alpha": (_is_number, "a number"),
}


def check_preset_json(source, file_name, content):
    """Raises `ValueError` unless `content` has the shape of `file_name`."""
    fields = _PRESET_FIELDS.get(file_name, {})
    if not isinstance(content, dict):
        required = [name for name, (needed, _, _) in fields.items() if needed]
        wanted = f" with {', '.join(map(repr, required))}" if required else ""
        raise ValueError(
            f"{source} is not a valid preset {file_name}: it must hold a "
            f"JSON object{wanted}. Received: a JSON {_json_type(content)}"
        )
    for field, (required, check, expected) in fields.items():
        if field not in content:
            if required:
                raise ValueError(
                    f"{source} is not a valid preset {file_name}: it has no "
                    f"{field!r} field (expected {expected})."
                )
            continue
        if not check(content[field]):
            _invalid_field(source, file_name, field, content[field], expected)
    for field, (check, expected) in _DECODING_FIELDS.items():
        decoding = content.get("decoding") if file_name == METADATA_FILE else None
        if decoding and field in decoding and not check(decoding[field]):
            _invalid_field(
                source, file_name, f"decoding.{field}", decoding[field], expected
            )


def _invalid_field(source, file_name, field, value, expected):
    raise ValueError(
        f"{source} is not a valid preset {file_name}: `{field}` must be "
        f"{expected}. Received: {field}={value!r:.100} (a JSON "
        f"{_json_type(value)})"
    )


def _json_type(value):
    names = {dict: "object", list: "array", str: "string", bool: "boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "number")
