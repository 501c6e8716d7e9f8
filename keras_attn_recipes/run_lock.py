"""One writer per run directory: a lock file that a second process respects.

Two `train` processes writing one `--output-dir` interleave `history.csv`,
overwrite each other's checkpoints and backup, and leave a directory that
neither can finish. Every command that writes into a run directory holds
its lock for as long as it runs:

- the lock is `fcntl.flock` on `<run>/.run.lock`, a file that records the
  owner's pid, host, command and start time. The kernel drops the lock when
  the owner exits, however it exits (SIGKILL included), so a lock left by a
  dead process is stale by construction and the next writer takes it over;
  the file itself stays (removing it would let a third process lock a
  file no longer in the directory).
- a second writer is refused at once with `RunDirectoryBusy`, naming the
  directory and the owner, before it writes or loads anything.
- the lock file is opened only as a regular file
  (`keras_attn.file_safety.open_regular_file`): a symbolic link in its
  place is never followed (a link to a file outside the run, or to the
  run's own `config.json`, would otherwise be truncated and overwritten
  with the owner's record; a dangling one would create its target), and a
  FIFO or device is never opened. Either is refused with a
  `RunDirectoryError` naming the path and what is there, and left as it is.

Readers (`translate`, `export`, `save-preset`) take no lock: every file
they read is replaced atomically by its writer (`keras_attn.file_safety`),
so they see the old file or the new one, never half of one.
"""

import atexit
import contextlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

from keras_attn_recipes.cli_io import CommandLineError, RunDirectoryError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks through fcntl.
    fcntl = None

LOCK_FILE = ".run.lock"


class RunDirectoryBusy(CommandLineError, RuntimeError):
    """Another live process holds the run directory's lock."""


def _owner_description(path):
    """What the lock file says about its owner, for the refusal message."""
    from keras_attn.file_safety import read_regular_file

    # The owner writes its record right after taking the lock: a reader can
    # come in between and find the file still empty.
    for _ in range(20):
        try:
            owner = json.loads(read_regular_file(path).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            owner = None
        if isinstance(owner, dict) and "pid" in owner:
            return (
                f"pid {owner.get('pid')} on host {owner.get('host', '?')}, "
                f"`{owner.get('command', '?')}` started {owner.get('started', '?')}"
            )
        time.sleep(0.05)
    return "a process that has not recorded itself yet"


def _record(command):
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def _lock_with_a_pid_file(path, command):
    """Where `fcntl` is missing: an exclusive-create pid file, stale if dead.

    The pid file is created with `O_EXCL` (which never follows a link) and
    read back only as a regular file: a link or special file in its place
    raises `NotARegularFileError` and is left alone.
    """
    from keras_attn.file_safety import open_regular_file, read_regular_file

    for _ in range(2):
        try:
            descriptor = open_regular_file(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            record = read_regular_file(path)  # a link or FIFO: refused
            try:
                pid = int(json.loads(record.decode("utf-8"))["pid"])
                os.kill(pid, 0)  # raises if no such process (a stale lock)
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
                continue
            raise RunDirectoryBusy(_busy_message(path, command)) from None
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(_record(command), file)
        return None
    raise RunDirectoryBusy(_busy_message(path, command))


def _busy_message(path, command):
    directory = path.parent
    return (
        f"The run directory {directory} is in use by another process "
        f"({_owner_description(path)}); `{command}` would overwrite its files. "
        "Wait for it to finish (or stop it), or choose another --output-dir. "
        f"The lock is released when that process exits ({path})."
    )


def remove_partial_files(directory):
    """Removes what writers killed mid-write left: hidden `.partial-*` files
    and folders of `keras_attn.file_safety` in `directory` and its
    `checkpoints/`. Only for the lock's holder (no other writer is at work).
    """
    directory = Path(directory)
    for folder in (directory, directory / "checkpoints"):
        if not folder.is_dir():
            continue
        for path in folder.glob(".partial-*"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@contextlib.contextmanager
def hold_run_directory(directory, command):
    """Holds `directory`'s lock for the `with` block; refuses a second holder.

    Args:
        directory: the run directory; it must exist.
        command: what the holder runs (`"train"`, ...), for the messages.

    Raises:
        RunDirectoryBusy: another live process holds the lock, named by pid,
            host and command.
    """
    path = Path(directory) / LOCK_FILE
    # The folder resolved, not the lock file: a link there is not followed.
    key = Path(directory).resolve() / LOCK_FILE
    if key in _held_here:
        # This process holds it already (a recipe's `main` called twice in
        # one process, as the tests do): one process is one writer.
        yield path
        return
    _held_here.add(key)
    try:
        with _lock(path, command):
            yield path
    finally:
        _held_here.discard(key)


@contextlib.contextmanager
def _lock(path, command):
    # Imported here: `keras_attn` loads Keras, which `--backend` must precede.
    from keras_attn.file_safety import NotARegularFileError, open_regular_file

    try:
        # Not truncated on open: the file holds the live owner's record.
        # A regular file only: never through a link, never a FIFO or device.
        descriptor = (
            None
            if fcntl is None
            else open_regular_file(path, os.O_RDWR | os.O_CREAT, 0o644)
        )
        if descriptor is not None:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                raise RunDirectoryBusy(_busy_message(path, command)) from None
            except OSError:  # a file system without flock (some NFS mounts)
                os.close(descriptor)
                descriptor = None
        if descriptor is None:
            _lock_with_a_pid_file(path, command)
    except NotARegularFileError as error:
        raise RunDirectoryError(
            f"The run directory {path.parent} cannot be locked: its lock file "
            f"{path} is {error.found}. Expected a regular file, or none (the "
            "lock creates it); a symbolic link there is never followed and a "
            "special file never opened, so it was left as it is. Remove it "
            "and run the command again."
        ) from None
    except OSError as error:
        raise RunDirectoryError(
            f"The run directory {path.parent} cannot be locked for writing "
            f"({error.strerror}: {path}). Expected a writable --output-dir."
        ) from None
    if descriptor is None:
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)
        return
    try:
        # Ours now, whatever a dead owner left in it.
        os.ftruncate(descriptor, 0)
        os.write(descriptor, json.dumps(_record(command)).encode("utf-8"))
        os.fsync(descriptor)
        yield path
    finally:
        # Closing the descriptor releases the lock (also done by the kernel
        # if this process dies first).
        os.close(descriptor)


# The lock files this process holds (resolved paths).
_held_here = set()
# The locks `lock_for_this_process` keeps until the process exits.
_kept = []


def lock_for_this_process(directory, command):
    """Takes `directory`'s lock until this process exits (for the recipes
    whose writes are spread over `main`).

    Raises:
        RunDirectoryBusy: as `hold_run_directory`.
    """
    context = hold_run_directory(directory, command)
    context.__enter__()
    if not _kept:
        # Released while the module still exists: a lock left to the
        # garbage collector at exit finds its globals already gone.
        atexit.register(_release_kept_locks)
    _kept.append(context)


def _release_kept_locks():
    while _kept:
        _kept.pop().__exit__(None, None, None)
