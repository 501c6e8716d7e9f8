"""The argument check that every translator exporter shares.

`export_translator` (SavedModel) and `export_onnx_translator` (ONNX
Runtime) take the same model, tokenizer, search and destination
arguments; `check_translator_export` checks them all, before any work, so
that both refuse the same things with the same messages. Each exporter
then checks its own few extra arguments (buckets, `length_multiple`).
"""

import dataclasses
import os
from pathlib import Path

from keras_attn.generation.samplers import check_length_penalty_alpha
from keras_attn.models.transformer import Transformer
from keras_attn.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_int,
)

STRATEGIES = ("beam", "greedy")
TOKENIZER_IDS = ("start_id", "end_id", "pad_id")


@dataclasses.dataclass(frozen=True)
class Destination:
    """What an exporter writes, for `check_destination` and its messages.

    Attributes:
        exporter: the exporter's name, e.g. `"export_translator"`.
        writes: what it writes, e.g. `"a SavedModel folder"`.
        marker: the file that every export of this kind holds (a folder
            without it is not a previous export and is never replaced).
    """

    exporter: str
    writes: str
    marker: str


@dataclasses.dataclass(frozen=True)
class TranslatorExportArguments:
    """The shared arguments of a translator export, checked and resolved."""

    strategy: str
    # Beam search's `beam_size` and `length_penalty_alpha`; empty for greedy.
    search_options: dict
    max_source_length: int
    directory: Path


def check_translator_export(destination, arguments):
    """Checks the arguments every translator exporter takes; writes nothing.

    Called first in an exporter, as
    `check_translator_export(DESTINATION, locals())`, so that the exporters'
    shared arguments are named once, here.

    Args:
        destination: the exporter's `Destination`.
        arguments: dict from the exporter's argument names to their values
            (its `locals()`), of which these are read: `model`, `tokenizer`,
            `directory`, `strategy`, `beam_size`, `length_penalty_alpha`,
            `max_source_length` and `overwrite`.

    Returns:
        A `TranslatorExportArguments`.

    Raises:
        TypeError: a wrong type (a model that is not a `Transformer`, a
            tokenizer without integer `vocabulary_size` and special ids, a
            `directory` that is not a path, ...).
        ValueError: a wrong value (a tokenizer of another vocabulary, an
            unknown strategy, a `max_source_length` beyond the model's
            learned positions, ...).
        FileExistsError: a `directory` the export must not replace.
    """
    model, directory = arguments["model"], arguments["directory"]
    check_model_and_tokenizer(model, arguments["tokenizer"])
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            "`directory` must be a `str` or `pathlib.Path`. Received: "
            f"directory={directory!r} of type {type(directory).__name__}"
        )
    strategy, search_options = check_search(
        arguments["strategy"],
        arguments["beam_size"],
        arguments["length_penalty_alpha"],
    )
    max_source_length = check_max_source_length(model, arguments["max_source_length"])
    check_destination(directory, arguments["overwrite"], destination)
    return TranslatorExportArguments(
        strategy, search_options, max_source_length, Path(directory)
    )


def check_model_and_tokenizer(model, tokenizer):
    """Refuses a model that is not a `Transformer` or a tokenizer not its own."""
    if not isinstance(model, Transformer):
        raise TypeError(
            "`model` must be a `keras_attn.models.Transformer`. Received: "
            f"model={model!r:.100} of type {type(model).__name__}"
        )
    for name in ("vocabulary_size", *TOKENIZER_IDS):
        value = getattr(tokenizer, name, None)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                "`tokenizer` must be a `keras_attn.text.SubwordTokenizer` "
                f"(its integer `{name}` is read). Received: "
                f"tokenizer={tokenizer!r:.100} with {name}={value!r:.100}"
            )
    if tokenizer.vocabulary_size != model.vocabulary_size:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: tokenizer.vocabulary_size={tokenizer.vocabulary_size}, "
            f"model.vocabulary_size={model.vocabulary_size}"
        )
    if tokenizer.pad_id != model.pad_id:
        raise ValueError(
            "The tokenizer and the model disagree on the padding id: the "
            "export pads sources with the tokenizer's, the model masks the "
            f"model's. Received: tokenizer.pad_id={tokenizer.pad_id}, "
            f"model.pad_id={model.pad_id}"
        )
    ids = {name: getattr(tokenizer, name) for name in TOKENIZER_IDS}
    for name, value in ids.items():
        if not 0 <= value < model.vocabulary_size:
            raise ValueError(
                f"`tokenizer.{name}` must be a token id in [0, "
                f"vocabulary_size={model.vocabulary_size}). Received: "
                f"tokenizer.{name}={value}"
            )
    if len(set(ids.values())) < len(ids):
        raise ValueError(
            "The tokenizer's start, end and padding ids must differ (decoding "
            "stops at the end id and drops the others). Received: "
            + ", ".join(f"tokenizer.{name}={value}" for name, value in ids.items())
        )


def check_search(strategy, beam_size, length_penalty_alpha):
    """`(strategy, search_options)`; the options are beam search's, or none."""
    strategy = check_choice(strategy, "strategy", STRATEGIES)
    if strategy != "beam":
        return strategy, {}
    return strategy, {
        "beam_size": check_positive_int(beam_size, "beam_size"),
        "length_penalty_alpha": check_length_penalty_alpha(length_penalty_alpha),
    }


def check_max_source_length(model, max_source_length):
    """`max_source_length`, at least 2 and within the model's positions.

    `None` means the model's `max_sequence_length`.
    """
    if max_source_length is None:
        return int(model.max_sequence_length)
    # Two ids at least: one token and the end id.
    max_source_length = check_int(max_source_length, "max_source_length", min_value=2)
    position_limit = model.position_scheme.max_length
    if position_limit is not None and max_source_length > position_limit:
        raise ValueError(
            "`max_source_length` must be at most the model's "
            f"max_sequence_length={model.max_sequence_length} with "
            f"{model.position_scheme.name} positions. "
            f"Received: max_source_length={max_source_length}"
        )
    return max_source_length


def check_destination(directory, overwrite, destination):
    """Refuses a `directory` that an export must not replace.

    An existing file is never replaced, nor a folder that holds files but not
    `destination.marker` (a run directory given by mistake); a previous
    export or an empty folder is replaced when `overwrite` is true.
    """
    overwrite = check_bool(overwrite, "overwrite")
    path = Path(directory)
    if not (path.exists() or path.is_symlink()):
        return overwrite
    if not path.is_dir():
        raise FileExistsError(
            f"`directory` is an existing file, not a folder; "
            f"{destination.exporter} writes {destination.writes}. "
            f"Received: directory={str(directory)!r}"
        )
    if not overwrite:
        raise FileExistsError(
            "`directory` already exists; pass overwrite=True to replace it. "
            f"Received: directory={str(directory)!r}, overwrite=False"
        )
    if any(path.iterdir()) and not (path / destination.marker).exists():
        raise FileExistsError(
            f"`directory` is a folder that holds files but no "
            f"{destination.marker}: {destination.exporter} replaces only a "
            "previous export or an empty folder, never other files. Choose "
            f"another folder. Received: directory={str(directory)!r}"
        )
    return overwrite
