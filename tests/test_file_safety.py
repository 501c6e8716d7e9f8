"""keras_attn.file_safety: atomic writes, folder swaps, confined paths, JSON."""

import os

import keras
import pytest

from keras_attn import file_safety
from keras_attn.file_safety import (
    confined_path,
    read_error_reason,
    read_json,
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
