"""Serves a translator written by `export_onnx_translator`: text in, text out.

Needs `numpy`, `onnxruntime` and `sentencepiece` only: no Keras, no
TensorFlow, no keras-attn. `export_onnx_translator` copies this file into
the export directory, so a client can run it from there:

    import sys
    sys.path.insert(0, "translator_onnx")
    from onnx_translator import OnnxTranslator

    print(OnnxTranslator("translator_onnx").translate(["A dog runs."]))

It tokenizes, batches and pads as `keras_attn.text.Translator` does
(sources sorted by length, end id appended, lengths padded to a multiple
of `length_multiple`, empty sentences answered without the model), runs
the exported decoding loop, and detokenizes up to the first end id.

The folder's files are untrusted input: each must be a regular file
inside the folder (a symbolic link may point to another file inside it,
never out of it; a FIFO or device is refused without being opened for
reading), and `translator.json` is checked field by field when the
translator loads, each error naming the file, the field, the value and
what was expected.
"""

import json
import math
import os
import stat
import warnings
from pathlib import Path

import numpy as np
import onnxruntime
import sentencepiece

MODEL_FILE = "translator.onnx"
TOKENIZER_FILE = "tokenizer.model"
CONFIG_FILE = "translator.json"
STRATEGIES = ("greedy", "beam")
# `translator.json` is a dozen lines; anything larger is not one.
MAX_CONFIG_BYTES = 1 << 20
# Ids, lengths and sizes become int32 arrays.
INT32_MAX = 2**31 - 1


class OnnxTranslator:
    """Translates strings with an exported translator in ONNX Runtime.

    Args:
        directory: the directory `export_onnx_translator` wrote.
        batch_size: sentences per call of the model. Defaults to `64`.
        providers: ONNX Runtime execution providers. Defaults to
            `("CPUExecutionProvider",)`.

    Example:

    >>> translator = OnnxTranslator("translator_onnx")  # doctest: +SKIP
    >>> translator.translate(["A dog runs.", ""])  # doctest: +SKIP
    ['Ein Hund rennt.', '']
    """

    def __init__(self, directory, batch_size=64, providers=("CPUExecutionProvider",)):
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(
                "`directory` must be a `str` or `pathlib.Path`. Received: "
                f"directory={directory!r:.100} of type {type(directory).__name__}"
            )
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or batch_size < 1
        ):
            raise ValueError(
                f"`batch_size` must be a positive int. Received: batch_size={batch_size!r}"
            )
        self.batch_size = batch_size
        directory = Path(directory)
        self.tokenizer = _load_tokenizer(directory)
        self.config = read_config(directory, self.tokenizer)
        self.session = _load_session(directory, providers)

    def encode_sources(self, sentences):
        """Ids per sentence, end id appended, truncated to `max_source_length`."""
        end_id = self.config["end_id"]
        limit = self.config["max_source_length"]
        ids = [self.tokenizer.encode(sentence) + [end_id] for sentence in sentences]
        too_long = sum(len(row) > limit for row in ids)
        if too_long:
            warnings.warn(
                f"{too_long} of {len(ids)} sentences are longer than "
                f"max_source_length={limit} tokens and were truncated.",
                stacklevel=3,
            )
            ids = [
                row[: limit - 1] + [end_id] if len(row) > limit else row for row in ids
            ]
        return ids

    def translate_ids(self, sentences):
        """Decodes `sentences`; returns `(token_ids, scores)` per sentence."""
        sentences = _check_texts(sentences)
        ids = self.encode_sources(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        outputs, scores = [[] for _ in ids], [0.0] * len(ids)
        multiple = self.config["length_multiple"]
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            # Empty sentences (just the end id) need no model.
            todo = [i for i in batch if sentences[i].strip()]
            if not todo:
                continue
            longest = max(len(ids[i]) for i in todo)
            length = min(
                self.config["max_source_length"],
                max(multiple, math.ceil(longest / multiple) * multiple),
            )
            # (batch, length), padded with pad_id.
            source = np.full((len(todo), length), self.config["pad_id"], np.int32)
            for row, i in enumerate(todo):
                source[row, : len(ids[i])] = ids[i]
            result = dict(
                zip(
                    [output.name for output in self.session.get_outputs()],
                    self.session.run(None, {"encoder_tokens": source}),
                )
            )
            for row, i in enumerate(todo):
                outputs[i] = result["tokens"][row].tolist()
                scores[i] = float(result["scores"][row])
        return outputs, scores

    def detokenize(self, ids):
        """Text of `ids` up to the first end id, without start and padding."""
        config = self.config
        kept = []
        for token in ids:
            if token == config["end_id"]:
                break
            if token not in (config["pad_id"], config["start_id"]):
                kept.append(int(token))
        return self.tokenizer.decode(kept)

    def translate(self, sentences):
        """Translates a list of strings; returns a list of strings."""
        outputs, _ = self.translate_ids(sentences)
        return [self.detokenize(ids) for ids in outputs]


def _check_texts(sentences):
    if isinstance(sentences, (str, bytes, dict)):
        raise TypeError(
            "`sentences` must be a list of str. Received: sentences of type "
            f"{type(sentences).__name__}"
        )
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(
                f"`sentences[{index}]` must be a str. Received: {sentence!r:.100} "
                f"of type {type(sentence).__name__}"
            )
    return sentences


def _read_file(directory, name, max_bytes=None):
    """The bytes of `directory / name`, a regular file inside `directory`.

    A symbolic link is followed only to a file inside the folder (as
    keras-attn's presets); a FIFO, device or folder is refused before
    anything is read from it (opened non-blocking, checked with `fstat`).
    """
    root = Path(directory).resolve()
    if not root.is_dir():
        raise FileNotFoundError(
            f"{directory} is not a folder written by export_onnx_translator "
            f"(expected {MODEL_FILE}, {TOKENIZER_FILE} and {CONFIG_FILE})."
        )
    path = Path(directory) / name
    resolved = (root / name).resolve()
    if root not in resolved.parents:
        raise ValueError(
            f"{path} resolves to {resolved}, outside the translator folder "
            f"{root} (through a symbolic link). Only files inside the folder "
            "are read."
        )
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(resolved, flags)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is missing: {directory} is not a complete folder written "
            f"by export_onnx_translator (expected {MODEL_FILE}, "
            f"{TOKENIZER_FILE} and {CONFIG_FILE})."
        ) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(
                f"{path} is not a regular file (a FIFO, device or folder); "
                "the translator reads only the files export_onnx_translator "
                "writes."
            )
        if max_bytes is not None and info.st_size > max_bytes:
            raise ValueError(
                f"{path} holds {info.st_size} bytes; expected a small JSON "
                f"file of at most {max_bytes} bytes."
            )
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(descriptor)


def _load_tokenizer(directory):
    path = Path(directory) / TOKENIZER_FILE
    data = _read_file(directory, TOKENIZER_FILE)
    tokenizer = sentencepiece.SentencePieceProcessor()
    try:
        tokenizer.LoadFromSerializedProto(data)
    except RuntimeError as error:
        raise ValueError(
            f"{path} is not a SentencePiece model ({error}); expected the "
            "tokenizer export_onnx_translator writes."
        ) from None
    return tokenizer


def _load_session(directory, providers):
    """An ONNX Runtime session of the graph, with the translator's interface."""
    path = Path(directory) / MODEL_FILE
    data = _read_file(directory, MODEL_FILE)
    try:
        session = onnxruntime.InferenceSession(data, providers=list(providers))
    except Exception as error:  # onnxruntime's own types (InvalidProtobuf, Fail)
        raise ValueError(
            f"{path} is not an ONNX model that ONNX Runtime loads "
            f"({type(error).__name__}: {str(error)[:300]})."
        ) from None
    inputs = {(i.name, i.type) for i in session.get_inputs()}
    outputs = {o.name for o in session.get_outputs()}
    if (
        inputs != {("encoder_tokens", "tensor(int32)")}
        or not {
            "tokens",
            "scores",
        }
        <= outputs
    ):
        raise ValueError(
            f"{path} is not a translator graph: expected the int32 input "
            "`encoder_tokens` and the outputs `tokens` and `scores`. "
            f"Received: inputs {sorted(inputs)}, outputs {sorted(outputs)}"
        )
    return session


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _refuse_duplicates(pairs):
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"the keys {duplicates} appear more than once")
    return dict(pairs)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def read_config(directory, tokenizer):
    """`translator.json` of `directory`, every field checked.

    Args:
        directory: the export folder.
        tokenizer: the loaded `sentencepiece.SentencePieceProcessor`; the
            special ids must be its own.

    Returns:
        The configuration as a `dict`.

    Raises:
        ValueError: the file is not UTF-8 JSON of a few levels, not an
            object, lacks a field or has an unknown one, or a field holds
            a value outside what the client can serve (the message names
            the file, the field, the value and what was expected).
    """
    path = Path(directory) / CONFIG_FILE
    data = _read_file(directory, CONFIG_FILE, MAX_CONFIG_BYTES)
    try:
        config = json.loads(
            data.decode("utf-8"),
            parse_constant=_refuse_constant,
            object_pairs_hook=_refuse_duplicates,
        )
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error}).") from None
    except RecursionError:
        raise ValueError(
            f"{path} is nested too deeply to be read; expected a JSON object "
            "of one level."
        ) from None
    except ValueError as error:  # json.JSONDecodeError included
        raise ValueError(f"{path} is not valid JSON: {error}.") from None
    if not isinstance(config, dict):
        raise ValueError(
            f"{path} must hold a JSON object. Received: a JSON {type(config).__name__}"
        )
    expected = list(_FIELD_CHECKS)
    missing = [key for key in expected if key not in config]
    unknown = sorted(key for key in config if key not in _FIELD_CHECKS)
    if missing or unknown:
        raise ValueError(
            f"{path} must hold the fields {expected}. Received: "
            + ", ".join(
                part
                for part in (
                    f"missing {missing}" if missing else "",
                    f"unknown {unknown}" if unknown else "",
                )
                if part
            )
        )
    for field, check in _FIELD_CHECKS.items():
        problem = check(config[field], config, tokenizer)
        if problem:
            raise ValueError(
                f"{path}: `{field}` must be {problem}. "
                f"Received: {field}={config[field]!r:.100}"
            )
    ids = {name: config[name] for name in ("start_id", "end_id", "pad_id")}
    if len(set(ids.values())) < len(ids):
        raise ValueError(
            f"{path}: `start_id`, `end_id` and `pad_id` must differ (decoding "
            "stops at the end id and drops the others). Received: "
            + ", ".join(f"{name}={value!r}" for name, value in ids.items())
        )
    return config


def _token_id(special):
    """Check of a special id: an id of the tokenizer, its `special` id if set."""

    def check(value, config, tokenizer):
        size = tokenizer.get_piece_size()
        if not _is_int(value) or not 0 <= value < size:
            return f"a token id in [0, {size}) of {TOKENIZER_FILE}"
        own = getattr(tokenizer, f"{special}_id")()
        if own >= 0 and value != own:
            return f"the {special} id of {TOKENIZER_FILE}, {own}"
        return None

    return check


def _int_in(low, high):
    def check(value, config, tokenizer):
        if not _is_int(value) or not low <= value <= high:
            return f"an integer in [{low}, {high}]"
        return None

    return check


def _strategy(value, config, tokenizer):
    if not isinstance(value, str) or value not in STRATEGIES:
        return f"one of {list(STRATEGIES)}"
    return None


def _beam_size(value, config, tokenizer):
    if config.get("strategy") != "beam":
        return None if value is None else "null with strategy 'greedy'"
    if not _is_int(value) or not 1 <= value <= INT32_MAX:
        return "a positive integer with strategy 'beam'"
    return None


def _length_penalty_alpha(value, config, tokenizer):
    if config.get("strategy") != "beam":
        return None if value is None else "null with strategy 'greedy'"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
    ):
        return "a finite number with strategy 'beam'"
    return None


def _string(value, config, tokenizer):
    return None if isinstance(value, str) else "a string"


# Field -> check(value, config, tokenizer), returning what was expected or
# None. The order is the file's (`export_onnx_translator` writes them).
_FIELD_CHECKS = {
    "start_id": _token_id("bos"),
    "end_id": _token_id("eos"),
    "pad_id": _token_id("pad"),
    # Two ids at least: one token and the end id.
    "max_source_length": _int_in(2, INT32_MAX),
    "length_multiple": _int_in(1, INT32_MAX),
    "strategy": _strategy,
    "beam_size": _beam_size,
    "length_penalty_alpha": _length_penalty_alpha,
    "keras_version": _string,
}
