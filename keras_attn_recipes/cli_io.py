"""Sentences in and translations out for the recipe's command line.

Everything here is checked before any model loads: a bad input file or an
output that cannot be written fails in a second, naming the path, not after
a translation that took minutes.

Failures the command line expects (`EXPECTED_FAILURES`: its own
`CommandLineError`s, and `OSError`, the operating system's refusals: a
missing file, a full disk, a read-only folder) are printed by the recipe's
`main` as one `error: ...` line (`failure_message`), exit status 1, no
traceback; any other exception is a bug and keeps its traceback.

Outputs that are symbolic links (`output_target`): an output named on the
command line (`translate --output`, `export --output`, `save-preset
--preset-dir`) is written through a symbolic link to the link's final
target, as a shell's `>` does: the target is created or replaced (a file
atomically, a folder by a swap) and the link stays. A dangling link
creates its target, whose folder must exist; a link loop is refused.
Nothing is created at any other path, and checking an output creates
nothing there.
"""

import os
import sys
import tempfile
from pathlib import Path


class CommandLineError(Exception):
    """A failure the command line expects: an `error: ...` line, exit 1."""


class InputError(CommandLineError, ValueError):
    """An input or output path the command line cannot use."""


class RunDirectoryError(CommandLineError, ValueError):
    """A run directory (`--output-dir`) or a file in it that cannot be used."""


class PresetError(CommandLineError, ValueError):
    """A `--preset` that cannot be used, or a flag a preset cannot take."""


# What `main` reports as an `error: ...` line without a traceback.
EXPECTED_FAILURES = (CommandLineError, OSError)


def failure_message(error):
    """The text of an expected failure's `error: ...` line.

    An `OSError` raised by the operating system names its reason and file
    (`Permission denied: '/data/out'`); one raised with a sentence of its
    own (`No trained model at ...`) is that sentence.
    """
    if isinstance(error, OSError) and error.strerror and error.filename:
        files = f"{str(error.filename)!r}"
        if error.filename2:
            files += f" -> {str(error.filename2)!r}"
        return f"{error.strerror}: {files}"
    return str(error)


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


def output_target(path, flag):
    """Where an output named by `flag` is written: `path`, or the final
    target of the symbolic link(s) at `path` (the module's rule for links).

    Raises:
        InputError: `path` is a link loop (it never reaches a target).
    """
    path = Path(path)
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # `realpath` stops where links loop
        raise InputError(
            f"{flag} is a symbolic link that loops and never reaches a file "
            f"or folder to write. Received: {flag} {str(path)!r}"
        )
    return target


def _check_can_create_in(folder, flag, path):
    """Fails unless a file can be created in `folder` (where the output's
    atomic write puts its temporary file). The probe is a hidden temporary
    file, removed at once: nothing is left, nothing else is created."""
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".partial-check-", dir=folder)
    except OSError as error:
        raise InputError(
            f"{flag} cannot be written: {error.strerror or error} ({folder}). "
            f"Received: {flag} {str(path)!r}"
        ) from None
    os.close(descriptor)
    os.unlink(probe)


def check_output_writable(path, flag="--output"):
    """Fails now if the output file `path` cannot be written later; changes
    and creates nothing at `path` or at a link's target.

    A regular file (or none) at the target is replaced atomically later, so
    its folder must take a new file; a device or pipe (`/dev/stdout`) is
    written as it is, and only its permission is checked (opening a pipe
    to check it would end its reader's input).
    """
    target = output_target(path, flag)
    if target.is_dir():
        raise InputError(
            f"{flag} must be a file path. Received: {flag} {str(path)!r} (a directory)"
        )
    if target.exists() and not target.is_file():
        if not os.access(target, os.W_OK):
            raise InputError(
                f"{flag} cannot be written: Permission denied. "
                f"Received: {flag} {str(path)!r}"
            )
        return
    _check_can_create_in(target.parent, flag, path)


def check_output_folder(path, flag="--output"):
    """Fails now if the output folder `path` (a SavedModel, a preset) cannot
    be created or replaced later; creates nothing there.

    The target (through links) must be a folder or absent; its nearest
    existing parent must take new entries (the folder is built beside its
    destination and swapped in).
    """
    target = output_target(path, flag)
    if target.exists() and not target.is_dir():
        raise InputError(
            f"{flag} must be a folder path (it is written as a folder). "
            f"Received: {flag} {str(path)!r}, which is a file"
        )
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(
            f"{flag} cannot be created: {parent} is a file, not a folder. "
            f"Received: {flag} {str(path)!r}"
        )
    _check_can_create_in(parent, flag, path)


def write_output(path, text, flag="--output"):
    """Writes `text` (UTF-8) to the output file `path`, following the
    module's rule for links: a regular file (or none) at the target is
    replaced atomically (a kill or a full disk leaves the old file); a
    device or pipe (`/dev/stdout`) is written as it is.

    Raises:
        InputError: the write failed (a full disk, a read-only folder),
            naming `flag` and `path`; a regular file is left unchanged.
    """
    from keras_attn.file_safety import write_text_atomically

    target = output_target(path, flag)
    try:
        if target.exists() and not target.is_file():
            with open(target, "w", encoding="utf-8") as file:
                file.write(text)
        else:
            write_text_atomically(target, text)
    except OSError as error:
        special = target.exists() and not target.is_file()
        kept = "" if special else "; a file that was there is unchanged"
        raise InputError(
            f"{flag} cannot be written: {error.strerror or error}{kept}. "
            f"Received: {flag} {str(path)!r}"
        ) from None


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


def check_trained_run(output_dir, command, average_last=None):
    """Refuses an `--output-dir` that holds no trained model for `command`
    (`evaluate`, `translate`, `export`, `save-preset`) before a model
    loads: a folder that does not exist, a run whose `train` has not
    finished (no `model.keras` yet), or `--average-last N` with fewer than
    N epoch checkpoints."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise RunDirectoryError(
            f"--output-dir {str(output_dir)!r} does not exist: there is no "
            f"trained run to {command}. Run `train` with this --output-dir "
            "first."
        )
    model_path = output_dir / "model.keras"
    checkpoints = sorted((output_dir / "checkpoints").glob("epoch_*.keras"))
    if not model_path.exists():
        if (output_dir / "config.json").exists() or checkpoints:
            # `train` writes config.json first and model.keras last.
            reason = (
                f"the run has not finished training ({len(checkpoints)} epoch "
                "checkpoint(s) so far; `train` writes model.keras at its end). "
                "Wait for `train` to finish, or run `train` again to resume it."
            )
        else:
            reason = "run the `train` subcommand with this --output-dir first."
        raise RunDirectoryError(f"No trained model at {model_path}: {reason}")
    if average_last is not None and average_last > len(checkpoints):
        raise RunDirectoryError(
            f"--average-last {average_last} averages the last {average_last} "
            f"epoch checkpoints, but {output_dir / 'checkpoints'} holds "
            f"{len(checkpoints)}. Received: --average-last {average_last}"
        )


def check_split(data_dir, split):
    """Refuses a `--split` that `evaluate` could not score, before a model
    loads: a split without both files in the data folder (the message
    lists the splits there), files that do not pair up, or no pairs."""
    from keras_attn.text import MULTI30K_DIR, load_parallel_corpus

    directory = Path(data_dir or MULTI30K_DIR)
    where = f"--data-dir {str(directory)!r}" if data_dir else "the vendored Multi30k"
    try:
        sources, _ = load_parallel_corpus(directory, split)
    except (FileNotFoundError, ValueError) as error:
        names = sorted(
            {p.name.split(".")[0] for p in directory.glob("*.en*")}
            if directory.is_dir()
            else ()
        )
        known = f" Splits in {where}: {', '.join(names)}." if names else ""
        raise InputError(f"--split {split!r}: {error}{known}") from None
    if not sources:
        raise InputError(
            f"--split {split!r} holds no sentence pairs in {where}: its files "
            "are empty. Expected one sentence per line in "
            f"{split}.en and {split}.de. Received: --split {split!r}"
        )
