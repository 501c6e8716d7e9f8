"""Exports that a kill, a full disk or a failed write cannot half-do.

Every keras-attn exporter writes through one of these two: the artifact is
built beside its destination under a hidden `.partial-*` name, checked
(an ONNX file by the ONNX checker, a translator folder by loading it as a
client would), and only then swapped in by a rename
(`keras_attn.file_safety.write_atomically` for a file,
`keras_attn.file_safety.replace_directory` for a folder). A process killed
at any instant, a full disk, a converter that fails or writes a file the
check refuses: the previous export stays byte-identical (or there is
none), never a mix of old and new files or a truncated file.
"""

import os
from pathlib import Path

from keras_attn.file_safety import replace_directory, write_atomically


def check_file_destination(path, exporter):
    """`path` as a `Path`: a file an exporter may write or replace.

    Raises:
        TypeError: `path` is not a `str` or `os.PathLike`.
        FileExistsError: `path` is an existing folder (never replaced by a
            file).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"`path` must be a `str` or `pathlib.Path`. Received: path={path!r:.100} "
            f"of type {type(path).__name__}"
        )
    if Path(path).is_dir():
        raise FileExistsError(
            f"`path` is an existing folder; {exporter} writes a file and never "
            f"replaces a folder. Received: path={str(path)!r}"
        )
    return Path(path)


def export_file(path, write, check):
    """Writes the file `path` beside it, checks it, then renames it in place.

    Args:
        path: `str` or `os.PathLike`, the file to create or replace (its
            folder is created if missing).
        write: a function of the temporary path (same folder, same suffix,
            hidden name) that writes the whole file there.
        check: a function of the temporary path that raises if the file
            written is not a valid artifact.

    Returns:
        The `pathlib.Path` written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def build(temporary):
        temporary = Path(temporary)
        try:
            write(temporary)
            # A converter that puts data beside the file (ONNX external
            # data, `<file>.data`) would leave it under the hidden name.
            extra = sorted(temporary.parent.glob(f"{temporary.name}?*"))
            if extra:
                raise RuntimeError(
                    "The converter wrote more than one file "
                    f"({', '.join(p.name for p in extra)}); {path} must be "
                    "one self-contained file, so it was not replaced."
                )
            check(temporary)
        finally:
            for leftover in temporary.parent.glob(f"{temporary.name}?*"):
                leftover.unlink(missing_ok=True)

    write_atomically(path, build)
    return path


def export_directory(directory, write, check):
    """Builds the folder `directory` beside it, checks it, then swaps it in.

    Args:
        directory: `str` or `os.PathLike`, the folder to create or replace.
        write: a function of an empty temporary folder beside `directory`
            that writes the export's whole content there.
        check: a function of that folder that raises if the export is not
            complete and valid.

    Returns:
        The `pathlib.Path` of `directory`.
    """

    def build(partial):
        write(partial)
        check(partial)

    replace_directory(directory, build)
    return Path(directory)


def check_onnx_file(path, destination):
    """Raises `RuntimeError` unless `path` is a model the ONNX checker accepts.

    Args:
        path: the written file (the temporary one).
        destination: the file it will replace, for the message.
    """
    import onnx

    try:
        onnx.checker.check_model(os.fspath(path))
    except Exception as error:  # onnx's ValidationError, protobuf's DecodeError
        raise RuntimeError(
            "The ONNX converter wrote a file that the ONNX checker refuses, "
            f"so {destination} was not replaced: {type(error).__name__}: "
            f"{str(error)[:500]}"
        ) from error
