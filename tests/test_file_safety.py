"""keras_attn.file_safety: atomic writes, folder swaps, confined paths, JSON."""

import os

import keras
import pytest

from keras_attn import file_safety
from keras_attn.file_safety import (
    NotARegularFileError,
    confined_path,
    open_regular_file,
    read_error_reason,
    read_json,
    read_regular_file,
    replace_directory,
    write_atomically,
    write_text_atomically,
)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")

    def write_half_then_fail(temporary):
        temporary.write_text("ne")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, write_half_then_fail)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["state.json"]
    write_text_atomically(path, "new é")
    assert path.read_text(encoding="utf-8") == "new é"
    assert os.listdir(tmp_path) == ["state.json"]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "renames"])
def test_replace_directory_swaps_whole_folders(tmp_path, monkeypatch, exchange):
    if not exchange:  # The two-rename fallback of systems without the exchange.
        monkeypatch.setattr(file_safety, "_exchange", lambda first, second: False)
    directory = tmp_path / "preset"
    replace_directory(directory, lambda f: (f / "a.txt").write_text("1"))
    assert os.listdir(directory) == ["a.txt"]
    replace_directory(directory, lambda f: (f / "b.txt").write_text("2"))
    assert os.listdir(directory) == ["b.txt"]
    assert os.listdir(tmp_path) == ["preset"]  # No hidden folder is left.

    def build_then_fail(folder):
        (folder / "c.txt").write_text("half")
        raise RuntimeError("the check failed")

    with pytest.raises(RuntimeError, match="the check failed"):
        replace_directory(directory, build_then_fail)
    assert os.listdir(directory) == ["b.txt"]
    assert os.listdir(tmp_path) == ["preset"]


def test_confined_path_refuses_every_way_out(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "inside.txt").write_text("in")
    (tmp_path / "victim.txt").write_text("secret")
    (folder / "link_in").symlink_to(folder / "inside.txt")
    (folder / "link_out").symlink_to(tmp_path / "victim.txt")
    source = "'meta.json'"
    assert confined_path(folder, "inside.txt", source) == folder / "inside.txt"
    assert confined_path(folder, "link_in", source) == folder / "inside.txt"
    for name in ("../victim.txt", "sub/../../victim.txt", "link_out"):
        with pytest.raises(ValueError, match="outside its folder") as info:
            confined_path(folder, name, source)
        assert repr(name) in str(info.value) and source in str(info.value)
    with pytest.raises(ValueError, match="symbolic link"):
        confined_path(folder, "link_out", source, what="weights file")
    for name in (str(tmp_path / "victim.txt"), "", "a\x00b"):
        with pytest.raises(ValueError, match="as a file name inside"):
            confined_path(folder, name, source)
    with pytest.raises(TypeError, match="Received: 3 of type int"):
        confined_path(folder, 3, source)
    with pytest.raises(ValueError, match="inside the preset"):
        confined_path(folder, "../victim.txt", source, folder="the preset")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (b"{not json", "is not valid JSON"),
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    ],
    ids=["not-utf8", "not-json", "deep"],
)
def test_read_json_names_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as info:
        read_json(path)
    assert str(path) in str(info.value)
    path.write_text('{"a": [1, 2]}')
    assert read_json(path) == {"a": [1, 2]}


def test_read_error_reason_says_truncated(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = tmp_path / "model.weights.h5"
    model.save_weights(path)
    data = path.read_bytes()
    for content, reason in [
        (data[: len(data) // 2], f"holds {len(data) // 2} of its {len(data)} bytes"),
        (b"garbage" * 10, "not an HDF5 weights file"),
    ]:
        path.write_bytes(content)
        with pytest.raises(OSError) as info:
            model.load_weights(path)
        assert reason in read_error_reason(info.value)
    assert read_error_reason(KeyError("x")) == "KeyError: 'x'"


def test_open_regular_file_never_follows_a_link_nor_opens_a_special_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"secret")
    (tmp_path / "to_victim").symlink_to(victim)
    (tmp_path / "dangling").symlink_to(tmp_path / "absent.txt")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    create = os.O_RDWR | os.O_CREAT
    for name, found in [
        ("to_victim", f"a symbolic link to {str(victim)!r}"),
        ("dangling", f"a symbolic link to {str(tmp_path / 'absent.txt')!r}"),
        ("fifo", "a FIFO (named pipe)"),  # opened, this would wait for a writer
        ("folder", "a folder"),
    ]:
        for flags in (create, os.O_RDONLY, os.O_CREAT | os.O_EXCL | os.O_WRONLY):
            with pytest.raises(NotARegularFileError) as info:
                open_regular_file(tmp_path / name, flags)
            assert (
                str(info.value) == f"{tmp_path / name} is {found}, not a regular file"
            )
            assert info.value.found == found
    with pytest.raises(NotARegularFileError, match="FIFO"):
        read_regular_file(tmp_path / "fifo")
    assert victim.read_bytes() == b"secret"
    assert not (tmp_path / "absent.txt").exists()
    # A regular file, or none with O_CREAT, opens as usual.
    descriptor = open_regular_file(tmp_path / "new.txt", create)
    os.write(descriptor, b"mine")
    os.close(descriptor)
    assert read_regular_file(tmp_path / "new.txt") == b"mine"
    with pytest.raises(FileNotFoundError):
        open_regular_file(tmp_path / "missing.txt", os.O_RDONLY)
