"""Writes that a kill cannot half-do, and paths that stay in their folder.

One home for the file habits every writer and reader in keras-attn shares:

- `write_atomically` / `write_text_atomically`: a file is written beside
  its destination under a hidden temporary name, flushed to disk, and
  renamed over the destination. A process killed at any instant (or a full
  disk) leaves the old file or the new one, never a truncated one.
- `replace_directory`: the same for a whole folder (a preset): the new
  folder is built beside the old one and swapped in by renames.
- `confined_path`: a file name read from a file the user did not type (a
  backup's metadata, a preset's config) resolves inside its folder, or the
  read is refused with an error naming the file and the value.
- `read_json`: a JSON file that is not UTF-8, not JSON, or nested too
  deeply is refused with a `ValueError` naming the file.
- `read_error_reason`: why a weights file could not be read, in words
  (truncated, not HDF5), for messages that name the file.
- `open_regular_file` / `read_regular_file`: a file a program keeps for
  itself at a fixed name (a lock, a pid file) is opened only if it is a
  regular file: a symbolic link in its place is never followed and a FIFO
  or device never opened, so a planted link cannot make the program create,
  truncate or overwrite a file elsewhere.
"""

import ctypes
import errno
import json
import os
import re
import shutil
import stat
import sys
import uuid
from pathlib import Path


def _fsync_directory(directory):
    """Flushes a directory entry (a rename) to disk; a no-op where unsupported."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _fsync_file(path):
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def write_atomically(path, write):
    """Writes `path` through a temporary file that `os.replace` moves in place.

    Args:
        path: `str` or `os.PathLike`, the destination.
        write: a function of one argument, the temporary path (same folder,
            same suffix, hidden name), that writes the whole file there.

    A failure in `write` (a full disk, a crash of the writer) removes the
    temporary file and raises; the destination is untouched.
    """
    path = Path(path)
    # Same suffix (`save_weights` insists on `.weights.h5`), hidden name.
    temporary = path.with_name(f".partial-{uuid.uuid4().hex[:8]}.{path.name}")
    try:
        write(temporary)
        _fsync_file(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def write_text_atomically(path, text):
    """Writes the string `text` to `path` (UTF-8) with `write_atomically`."""
    write_atomically(
        path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8")
    )


def replace_directory(directory, build):
    """Builds a folder beside `directory`, then swaps it in by renames.

    Args:
        directory: `str` or `os.PathLike`, the folder to create or replace.
        build: a function of one argument, an empty temporary folder beside
            `directory`, that writes the folder's whole content there (and
            may check it). If it raises, the temporary folder is removed and
            `directory` is untouched.

    A kill during `build` leaves the old folder whole (and a hidden
    `.partial-*` folder beside it). On Linux the swap is one atomic
    exchange of the two folders (`renameat2(RENAME_EXCHANGE)`), so
    `directory` always names a complete folder, old or new; the old one is
    then deleted. Elsewhere (or on a file system without the exchange) it
    is two renames: the old folder moves aside to a hidden `.replaced-*`
    name, the new one moves in; a kill between the two leaves the old
    folder complete under its hidden name, never a half-written one under
    the real name.
    """
    directory = Path(directory)
    parent = directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    partial = parent / f".partial-{token}.{directory.name}"
    partial.mkdir()
    try:
        build(partial)
        for entry in partial.rglob("*"):
            if entry.is_file() and not entry.is_symlink():
                _fsync_file(entry)
        _fsync_directory(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    replaced = None
    if directory.exists() or directory.is_symlink():
        if _exchange(partial, directory):
            replaced = partial  # Now the old folder.
        else:
            replaced = parent / f".replaced-{token}.{directory.name}"
            os.replace(directory, replaced)
            os.replace(partial, directory)
    else:
        os.replace(partial, directory)
    _fsync_directory(parent)
    if replaced is not None:
        if replaced.is_dir() and not replaced.is_symlink():
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            replaced.unlink(missing_ok=True)


def _exchange(first, second):
    """Swaps two paths in one atomic step; `False` where that is not possible.

    Linux's `renameat2(..., RENAME_EXCHANGE)` (glibc 2.28+, most local file
    systems). Anywhere it is missing or refused, the caller falls back to
    two renames.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(
        at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange
    )
    return result == 0


def confined_path(directory, name, source, what="file name", folder="its folder"):
    """`directory / name`, refused unless it resolves inside `directory`.

    Args:
        directory: the folder the file must be in.
        name: the file name as read from `source` (untrusted).
        source: the file `name` was read from, for the error message.
        what: what `name` is, for the error message. Defaults to
            `"file name"`.
        folder: what `directory` is, for the error message (e.g.
            `"the preset"`). Defaults to `"its folder"`.

    Returns:
        The resolved `Path`. Symbolic links are followed: a link inside the
        folder that points out of it is refused like `../`; one that points
        to another file inside the folder is accepted.

    Raises:
        TypeError: `name` is not a string.
        ValueError: `name` is empty, absolute, or resolves outside `directory`.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"{source} must give the {what} as a string. "
            f"Received: {name!r} of type {type(name).__name__}"
        )
    if not name or os.path.isabs(name) or "\x00" in name:
        raise ValueError(
            f"{source} must give the {what} as a file name inside {folder} "
            f"{directory}. Received: {name!r}"
        )
    root = Path(directory).resolve()
    path = (root / name).resolve()
    if path != root and root not in path.parents:
        link = " (through a symbolic link)" if ".." not in Path(name).parts else ""
        raise ValueError(
            f"{source} names a {what} outside {folder} {root}: {name!r} "
            f"resolves to {path}{link}. Only files inside {folder} are read."
        )
    return path


def read_json(path):
    """The content of the JSON file `path`; a file that cannot be read is named.

    Args:
        path: `str` or `os.PathLike`, an existing file.

    Returns:
        The parsed JSON value (any JSON type: callers check its shape).

    Raises:
        ValueError: the file is not UTF-8 text, not valid JSON, or nested
            too deeply to parse (Python's parser recurses once per level).
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path} is not UTF-8 text ({error}); expected a JSON file."
        ) from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    except RecursionError as error:
        raise ValueError(
            f"{path} is nested too deeply to be read: expected a JSON "
            "file of a few levels."
        ) from error


_TRUNCATED = re.compile(r"truncated file: eof = (\d+).*stored_eof = (\d+)")


def read_error_reason(error):
    """Why a weights file failed to load, in words, for an error message.

    `h5py` reports a file cut short by a kill as `Unable to synchronously
    open file (truncated file: eof = 7800, ..., stored_eof = 15600)` and a
    file that is not HDF5 at all as `(file signature not found)`; this
    says which, in a sentence. Any other error is described by its type
    and message.
    """
    message = str(error)
    truncated = _TRUNCATED.search(message)
    if truncated:
        size, expected = truncated.groups()
        return (
            f"the file is truncated: it holds {size} of its {expected} bytes "
            "(a process may have been killed while writing it)"
        )
    if "file signature not found" in message:
        return "the file is not an HDF5 weights file (file signature not found)"
    return f"{type(error).__name__}: {message}"


class NotARegularFileError(OSError):
    """A path where a regular file belongs holds a symbolic link, a folder,
    a FIFO, a device or a socket (raised by `open_regular_file`).

    Attributes:
        path: the path, a `str`.
        found: what is there, in words (`"a symbolic link to '/etc/passwd'"`).
    """

    def __init__(self, path, found):
        super().__init__(f"{path} is {found}, not a regular file")
        self.path = str(path)
        self.found = found


def describe_path(path):
    """What is at `path`, in words, without following a symbolic link:
    `"a symbolic link to 'x'"`, `"a FIFO (named pipe)"`, `"a folder"`,
    `"a character device"`, `"a block device"`, `"a socket"`,
    `"a regular file"` or `"nothing"`."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link to {os.readlink(path)!r}"
        except OSError:
            return "a symbolic link"
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "a special file"


def open_regular_file(path, flags, mode=0o644):
    """`os.open(path, flags, mode)` that opens a regular file only.

    A symbolic link at `path` is never followed (`O_NOFOLLOW`: with
    `os.O_CREAT`, a dangling link does not create its target either), and a
    FIFO, device, socket or folder is refused before it is opened; the
    open itself is non-blocking (`O_NONBLOCK`), so a FIFO put in place
    between the check and the open cannot hang it, and the descriptor is
    checked again (`fstat`) before it is returned. Nothing is written,
    truncated or created unless `path` is (or becomes) a regular file.

    Args:
        path: `str` or `os.PathLike`.
        flags: `os.O_*` flags, e.g. `os.O_RDWR | os.O_CREAT` (do not pass
            `os.O_TRUNC`: truncate with `os.ftruncate` once this returns).
        mode: the permissions of a file it creates. Defaults to `0o644`.

    Returns:
        The descriptor (blocking), which the caller closes.

    Raises:
        NotARegularFileError: something other than a regular file is at
            `path`, named in words.
        OSError: the file cannot be opened (missing, no permission, ...).
    """
    path = os.fspath(path)
    found = describe_path(path)
    if found not in ("nothing", "a regular file"):
        raise NotARegularFileError(path, found)
    safe_flags = (
        flags
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        descriptor = os.open(path, safe_flags, mode)
    except OSError as error:
        # A link put in place since the check: ELOOP (Linux), EMLINK (BSD).
        if error.errno in (errno.ELOOP, errno.EMLINK) or os.path.islink(path):
            raise NotARegularFileError(path, describe_path(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotARegularFileError(path, describe_path(path))
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def read_regular_file(path):
    """The bytes of `path`, read with `open_regular_file` (a link or a
    special file there is refused with `NotARegularFileError`)."""
    descriptor = open_regular_file(path, os.O_RDONLY)
    with os.fdopen(descriptor, "rb") as file:
        return file.read()
