"""Sentences in and translations out for the recipe's command line.

Everything here is checked before any model loads: a bad input file or an
output that cannot be written fails in a second, naming the path, not after
a translation that took minutes.
"""

import os
import sys
from pathlib import Path


class InputError(ValueError):
    """An input or output path the command line cannot use."""


class RunDirectoryError(ValueError):
    """A run directory (`--output-dir`) or a file in it that cannot be used."""


class PresetError(ValueError):
    """A `--preset` that cannot be used, or a flag a preset cannot take."""


def split_lines(text):
    """Lines split on newline only (`\\n` or `\\r\\n`), so outputs align.

    `str.splitlines` also breaks at form feed, U+2028 and other separators
    that may stand inside a sentence; one input line is one translation.
    A final newline does not start another line.
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def decode_utf8(data, name):
    """`data` decoded as UTF-8; an invalid byte is reported with its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InputError(
            f"{name}: line {line} is not valid UTF-8 (byte "
            f"{data[error.start : error.start + 1]!r} at offset {error.start}). "
            "Expected UTF-8 text, one sentence per line."
        ) from None


def read_input_file(path):
    """The lines of `--input`, which must be a readable UTF-8 text file."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"--input: no such file. Received: --input {str(path)!r}")
    if not path.is_file():
        raise InputError(
            f"--input must be a file with one sentence per line. "
            f"Received: --input {str(path)!r} (a directory or special file)"
        )
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"--input: cannot read {path}: {error.strerror}") from None
    return split_lines(decode_utf8(data, str(path)))


def read_stdin():
    """The lines of standard input (UTF-8)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream put in place of stdin
        return split_lines(sys.stdin.read())
    return split_lines(decode_utf8(stream.read(), "<stdin>"))


def check_output_writable(path):
    """Fails now if `--output` cannot be written later; changes nothing.

    Opening in append mode creates no content and truncates nothing; a file
    created only for the check is removed again.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(
            f"--output must be a file path. Received: --output {str(path)!r} "
            "(a directory)"
        )
    existed = path.exists()
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as error:
        raise InputError(
            f"--output cannot be written: {error.strerror}. "
            f"Received: --output {str(path)!r}"
        ) from None
    if not existed:
        path.unlink()


def _same_file(first, second):
    """Whether two paths name one file (through links too), if both exist."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet)
        return Path(first).absolute() == Path(second).absolute()


def check_output_is_not_input(output_path, input_path):
    """Refuses `--output` naming the `--input` file (the translation would
    replace the sentences it translates)."""
    if output_path is not None and input_path is not None:
        if _same_file(output_path, input_path):
            raise InputError(
                "--output must not be the --input file (its sentences would be "
                f"replaced by their translations). Received: --input "
                f"{str(input_path)!r}, --output {str(output_path)!r}"
            )


def _inside(path, directory):
    """Whether `path` is `directory` or inside it (both resolved)."""
    path, directory = Path(path).resolve(), Path(directory).resolve()
    return path == directory or directory in path.parents


def check_preset_dir_apart(preset_dir, output_dir, run_flag="--output-dir"):
    """Refuses a `--preset-dir` that is, holds or lies in the run directory:
    writing the preset would replace the run's `config.json` (or the preset
    swap would move the run away)."""
    if _inside(preset_dir, output_dir) or _inside(output_dir, preset_dir):
        raise InputError(
            f"--preset-dir must be a directory apart from {run_flag} (the run "
            "directory), neither inside nor around it: the preset's config.json "
            "and weights would replace or move the run's files. Received: "
            f"--preset-dir {str(preset_dir)!r}, {run_flag} {str(output_dir)!r}"
        )


def check_export_apart_from_preset(output, preset_dir):
    """Refuses an export `--output` that is, holds or lies in the `--preset`
    directory: a preset is only read, and the export would replace or move
    its files."""
    if _inside(output, preset_dir) or _inside(preset_dir, output):
        raise PresetError(
            "--output must be a directory apart from the --preset directory, "
            "neither inside nor around it: a preset is only read, and the "
            f"SavedModel would replace its files. Received: --output "
            f"{str(output)!r}, --preset directory {str(preset_dir)!r}"
        )


def check_output_dir(path, create=False):
    """`--output-dir` must be a directory; with `create`, made if missing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunDirectoryError(
            "--output-dir must be a directory (the run directory). Received: "
            f"--output-dir {str(path)!r}, which is a file"
        )
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RunDirectoryError(
                f"--output-dir cannot be created: {error.strerror} ({error.filename})."
                f" Received: --output-dir {str(path)!r}"
            ) from None


def collect_sentences(sentences, input_path, stdin_is_terminal):
    """Sentences from the arguments, then `--input`; stdin only if neither.

    Standard input is read only when no sentence and no `--input` were
    given (an empty `--input` file is an empty job, not a cue to wait on
    an open pipe).
    """
    sentences = list(sentences)
    if input_path is not None:
        sentences += read_input_file(input_path)
    elif not sentences and not stdin_is_terminal:
        sentences = read_stdin()
    return sentences
