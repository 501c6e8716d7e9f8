"""Parallel text corpora: sentence-aligned files, one sentence per line.

A parallel corpus is a pair of files `{split}.{language}` (optionally gzipped,
`{split}.{language}.gz`) in one directory, where line `i` of the source file
translates line `i` of the target file. This is the layout of the Multi30k
repository (`data/task1/raw`), of which the English-German task is vendored in
`keras_attn/text/data/multi30k/` (package data), and the layout your own data can use.
"""

import gzip
from pathlib import Path

from keras_attn.validation import check_choice

MULTI30K_DIR = Path(__file__).resolve().parent / "data" / "multi30k"
"""Directory of the vendored Multi30k task 1 (English-German) raw text."""

MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGUAGES = ("en", "de")


def _find_file(directory, split, language):
    """Returns the path of `{split}.{language}`, else `{split}.{language}.gz`."""
    plain = directory / f"{split}.{language}"
    gzipped = directory / f"{split}.{language}.gz"
    if plain.is_file():
        return plain
    if gzipped.is_file():
        return gzipped
    raise FileNotFoundError(
        f"No {language!r} file for split {split!r}: neither {str(plain)!r} "
        f"nor {str(gzipped)!r} exists."
    )


def read_lines(path):
    """Reads a UTF-8 text file (gzipped if its name ends in `.gz`) into lines.

    Only the line terminator (`"\\n"` or `"\\r\\n"`) is removed: case,
    punctuation and inner whitespace are kept. Lines are split on `"\\n"` only,
    not on the other Unicode line boundaries of `str.splitlines`, which can
    occur inside a sentence.

    Args:
        path: path of the file, a `str` or `pathlib.Path`.

    Returns:
        A list of `str`, one per line.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if a line is not valid UTF-8 (the message names the file
            and the 1-based line number).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"File not found: {str(path)!r}")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        content = f.read()
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        line_number = content.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{str(path)!r} is not valid UTF-8 at line {line_number} "
            f"(byte {error.start}): {error.reason}."
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # The newline that ends the last line starts no new line.
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def load_parallel_corpus(directory, split, source_language="en", target_language="de"):
    """Loads one split of a sentence-aligned parallel corpus.

    Reads `{directory}/{split}.{source_language}` and
    `{directory}/{split}.{target_language}`, each either plain or gzipped
    (`.gz` appended; the plain file wins when both exist), UTF-8, one sentence
    per line. Only line terminators are stripped.

    Args:
        directory: the directory holding the files, a `str` or `pathlib.Path`.
        split: the file name stem, e.g. `"train"`, `"val"`.
        source_language: the source file's suffix. Defaults to `"en"`.
        target_language: the target file's suffix. Defaults to `"de"`.

    Returns:
        A tuple `(sources, targets)` of two lists of `str` of equal length.

    Raises:
        FileNotFoundError: if the directory or a file is missing.
        ValueError: if the two files have different line counts (the message
            names both files and both counts), or a line is not UTF-8.

    Example:

    >>> from keras_attn.text import MULTI30K_DIR, load_parallel_corpus
    >>> sources, targets = load_parallel_corpus(MULTI30K_DIR, "val")
    >>> len(sources), len(targets)
    (1014, 1014)
    """
    for name, value in (
        ("split", split),
        ("source_language", source_language),
        ("target_language", target_language),
    ):
        if not isinstance(value, str) or not value or "/" in value:
            raise ValueError(
                f"`{name}` must be a non-empty file name part without '/'. "
                f"Received: {name}={value!r}"
            )
    if source_language == target_language:
        raise ValueError(
            "`source_language` and `target_language` must differ. Received: "
            f"source_language={source_language!r}, "
            f"target_language={target_language!r}"
        )
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"Corpus directory not found: {str(directory)!r}")
    source_path = _find_file(directory, split, source_language)
    target_path = _find_file(directory, split, target_language)
    sources = read_lines(source_path)
    targets = read_lines(target_path)
    if len(sources) != len(targets):
        raise ValueError(
            "A parallel corpus needs one target line per source line, but "
            f"{str(source_path)!r} has {len(sources)} lines and "
            f"{str(target_path)!r} has {len(targets)} lines."
        )
    return sources, targets


def load_multi30k(split, source_language="en", target_language="de"):
    """Loads a split of the vendored Multi30k task 1 (English-German) data.

    Multi30k (Elliott et al., 2016) is provided for non-commercial research and
    educational use; see `keras_attn/text/data/multi30k/README.md`.

    Args:
        split: one of `"train"` (29,000 pairs), `"val"` (1,014) or
            `"test_2016_flickr"` (1,000).
        source_language: `"en"` or `"de"`. Defaults to `"en"`.
        target_language: `"de"` or `"en"`. Defaults to `"de"`.

    Returns:
        A tuple `(sources, targets)` of two lists of `str`.

    Example:

    >>> from keras_attn.text import load_multi30k
    >>> sources, targets = load_multi30k("test_2016_flickr")
    >>> len(sources)
    1000

    References:
        - [Elliott et al., 2016](https://aclanthology.org/W16-3210/),
          Multi30K: Multilingual English-German Image Descriptions.
    """
    check_choice(split, "split", MULTI30K_SPLITS)
    check_choice(source_language, "source_language", MULTI30K_LANGUAGES)
    check_choice(target_language, "target_language", MULTI30K_LANGUAGES)
    return load_parallel_corpus(MULTI30K_DIR, split, source_language, target_language)
