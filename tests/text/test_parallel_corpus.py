import gzip

import pytest

from keras_attn.text import (
    MULTI30K_DIR,
    load_multi30k,
    load_parallel_corpus,
    read_lines,
)


def _write(path, text, gzipped=False):
    data = text.encode("utf-8") if isinstance(text, str) else text
    if gzipped:
        data = gzip.compress(data)
    path.write_bytes(data)


@pytest.mark.parametrize(
    "split, count", [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)]
)
def test_vendored_multi30k_has_the_published_sizes(split, count):
    sources, targets = load_multi30k(split)
    assert len(sources) == len(targets) == count
    assert all(isinstance(s, str) and s and not s.endswith("\n") for s in sources)


def test_multi30k_keeps_case_and_punctuation():
    sources, targets = load_multi30k("train")
    assert sources[0] == "Two young, White males are outside near many bushes."
    assert targets[0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    )
    assert MULTI30K_DIR.joinpath("README.md").is_file()


def test_multi30k_languages_can_be_swapped():
    en, de = load_multi30k("val")
    de2, en2 = load_multi30k("val", source_language="de", target_language="en")
    assert (en, de) == (en2, de2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"split": "test"}, "Received: split='test'"),
        ({"split": "val", "source_language": "fr"}, "source_language='fr'"),
    ],
)
def test_load_multi30k_rejects_unknown_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_multi30k(**kwargs)


def test_reads_plain_and_gzipped_files(tmp_path):
    _write(tmp_path / "train.en", "A dog.\nTwo  cats ran \r\n")
    _write(tmp_path / "train.de.gz", "Ein Hund.\nZwei Katzen liefen\n", gzipped=True)
    sources, targets = load_parallel_corpus(tmp_path, "train")
    # Only the line terminators go; inner and trailing spaces stay.
    assert sources == ["A dog.", "Two  cats ran "]
    assert targets == ["Ein Hund.", "Zwei Katzen liefen"]


def test_plain_file_wins_over_gzipped(tmp_path):
    _write(tmp_path / "x.en", "plain\n")
    _write(tmp_path / "x.en.gz", "gzipped\n", gzipped=True)
    _write(tmp_path / "x.de", "b\n")
    assert load_parallel_corpus(tmp_path, "x")[0] == ["plain"]


def test_last_line_without_newline_and_unicode_separators(tmp_path):
    # U+2028 is a line boundary for str.splitlines, but not for corpus files.
    _write(tmp_path / "a.en", "one\ntwo\u2028half")
    _write(tmp_path / "a.de", "eins\nzwei")
    assert load_parallel_corpus(tmp_path, "a")[0] == ["one", "two\u2028half"]


def test_missing_directory_names_the_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_parallel_corpus(missing, "train")


def test_missing_file_names_the_path(tmp_path):
    _write(tmp_path / "train.en", "a\n")
    with pytest.raises(FileNotFoundError, match=r"train\.de"):
        load_parallel_corpus(tmp_path, "train")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_lines(tmp_path / "missing.txt")


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    _write(tmp_path / "train.en", "a\nb\nc\n")
    _write(tmp_path / "train.de.gz", "x\ny\n", gzipped=True)
    with pytest.raises(ValueError) as info:
        load_parallel_corpus(tmp_path, "train")
    message = str(info.value)
    assert "train.en'" in message and "train.de.gz'" in message
    assert "3 lines" in message and "2 lines" in message


@pytest.mark.parametrize("gzipped", [False, True])
def test_invalid_utf8_names_file_and_line(tmp_path, gzipped):
    name = "train.de.gz" if gzipped else "train.de"
    _write(tmp_path / "train.en", "a\nb\nc\n")
    _write(tmp_path / name, b"x\ny\nz \xff\xfe\n", gzipped=gzipped)
    with pytest.raises(ValueError, match=rf"{name}' is not valid UTF-8 at line 3"):
        load_parallel_corpus(tmp_path, "train")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"split": ""}, "Received: split=''"),
        ({"split": "../train"}, "split='../train'"),
        ({"split": "train", "target_language": "en"}, "must differ"),
    ],
)
def test_invalid_arguments_are_named(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_parallel_corpus(tmp_path, **kwargs)
