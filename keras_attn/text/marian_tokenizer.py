"""Marian's tokenizer (OPUS-MT) on our tokenizer stack.

A Marian checkpoint tokenizes with two SentencePiece models, `source.spm`
for the source language and `target.spm` for the target, whose pieces are
looked up in one shared id map, `vocab.json` (a piece missing from it is
`<unk>`); `</s>` ends every source sentence. `MarianTokenizer` does what
`transformers.MarianTokenizer` does (language codes such as `>>de<<` at
the start of a sentence are one token of their own), with our ids.

Our ids are Marian's plus one. Marian's `<pad>` id is both the padding and
the decoder's start token (its embedding row is zero); our models keep the
two apart (a padding key is masked, and generation refuses a start id equal
to `pad_id`), and our text tasks pad with id `0`. So id `0` is a padding
id of our own, and Marian id `m` is our id `m + 1`: the start id is
Marian's `<pad>` plus one, the end id Marian's `</s>` plus one.
`keras_attn.hf.marian` lays the model's weights out the same way and
`keras_attn.hf.export_to_transformers` takes the extra id back out.
"""

import json
import re
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_attn.file_safety import read_json
from keras_attn.text.tokenizer import CONFIG_FILE as PRESET_CONFIG_FILE
from keras_attn.text.tokenizer import (
    PRESET_ASSETS_DIR,
    SubwordTokenizer,
    _to_id_tensor,
    check_described,
    preset_tokenizer_files,
    sentencepiece_processor,
    tokenize_in_python,
)

SOURCE_MODEL_FILE = "source.spm"
TARGET_MODEL_FILE = "target.spm"
VOCABULARY_FILE = "vocab.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# Our ids are Marian's plus this; 0 is padding.
ID_OFFSET = 1
_SPIECE_UNDERLINE = "\u2581"


class MarianTokenizer(SubwordTokenizer):
    """The tokenizer of a Marian (OPUS-MT) checkpoint, with our ids.

    Eager only: `tokenize` and `detokenize` run SentencePiece in Python
    (not in `tf.data` graphs or an exported SavedModel). Our id of a
    Marian id `m` is `m + 1`; id `0` is padding (see the module docstring).

    Args:
        source_model_proto: bytes, the serialized `source.spm`.
        target_model_proto: bytes, the serialized `target.spm`.
        vocabulary: dict from piece to Marian id (`vocab.json`), ids
            `0 ... n - 1` each once.
        unk_token: str. Defaults to `"<unk>"`.
        eos_token: str. Defaults to `"</s>"`.
        pad_token: str, Marian's padding and decoder start token. Defaults
            to `"<pad>"`.
        name: the `tf.Module` name. Defaults to `"marian_tokenizer"`.

    Example:

    >>> from keras_attn.hf.files import resolve_checkpoint
    >>> from keras_attn.text.marian_tokenizer import MarianTokenizer
    >>> directory = resolve_checkpoint("hf://Helsinki-NLP/opus-mt-en-de")
    >>> tokenizer = MarianTokenizer.load(directory)
    >>> ids = tokenizer.tokenize(["A dog runs."])  # Marian's ids plus one
    """

    def __init__(
        self,
        source_model_proto,
        target_model_proto,
        vocabulary,
        unk_token="<unk>",
        eos_token="</s>",
        pad_token="<pad>",
        name="marian_tokenizer",
    ):
        # Not `SubwordTokenizer.__init__`: that one checks one model's
        # fixed special ids; a Marian vocabulary has its own.
        tf.Module.__init__(self, name=name)
        self._source = sentencepiece_processor(
            source_model_proto, repr(SOURCE_MODEL_FILE)
        )
        self._target = sentencepiece_processor(
            target_model_proto, repr(TARGET_MODEL_FILE)
        )
        self._source_proto = bytes(source_model_proto)
        self._target_proto = bytes(target_model_proto)
        if not isinstance(vocabulary, dict) or sorted(vocabulary.values()) != list(
            range(len(vocabulary))
        ):
            raise ValueError(
                f"`vocabulary` ({VOCABULARY_FILE}) must map pieces to the ids "
                "0 ... n - 1, each once. Received: a "
                f"{type(vocabulary).__name__} of {len(vocabulary)} entries"
            )
        for token_name, token in (
            ("unk_token", unk_token),
            ("eos_token", eos_token),
            ("pad_token", pad_token),
        ):
            if token not in vocabulary:
                raise ValueError(
                    f"The vocabulary has no `{token_name}`. Received: "
                    f"{token_name}={token!r}"
                )
        self.vocabulary = dict(vocabulary)
        self.unk_token, self.eos_token, self.pad_token = unk_token, eos_token, pad_token
        self._pieces = [None] * len(vocabulary)
        for piece, index in vocabulary.items():
            self._pieces[index] = piece
        self._special_tokens = (unk_token, eos_token, pad_token)
        self._special_ids = {vocabulary[t] for t in self._special_tokens}
        # Longest first, as `transformers`' trie matches them.
        self._special_pattern = re.compile(
            "("
            + "|".join(
                re.escape(t)
                for t in sorted(self._special_tokens, key=len, reverse=True)
            )
            + ")"
        )

    # === Ids ===

    @property
    def vocabulary_size(self):
        """Marian's vocabulary plus our padding id."""
        return len(self.vocabulary) + ID_OFFSET

    @property
    def pad_id(self):
        """Our padding id, `0` (Marian has none of its own)."""
        return 0

    @property
    def unk_id(self):
        return self.vocabulary[self.unk_token] + ID_OFFSET

    @property
    def start_id(self):
        """The decoder's start id: Marian's `<pad>`, plus one."""
        return self.vocabulary[self.pad_token] + ID_OFFSET

    @property
    def end_id(self):
        """Marian's `</s>`, plus one."""
        return self.vocabulary[self.eos_token] + ID_OFFSET

    # === Text ===

    def _encode(self, text):
        """Marian ids of one source sentence, without `</s>`.

        As `transformers` does: the special tokens written in the text
        (`</s>`, `<unk>`, `<pad>`) are split out first and are ids of their
        own; each piece of text between them loses a leading language code
        (`>>de<<`, a token of its own) and goes through `source.spm`.
        """
        ids = []
        unk = self.vocabulary[self.unk_token]
        for chunk in self._special_pattern.split(text):
            if not chunk:
                continue
            if chunk in self._special_tokens:
                ids.append(self.vocabulary[chunk])
                continue
            pieces = []
            if chunk.startswith(">>") and (end := chunk.find("<<")) != -1:
                pieces.append(chunk[: end + 2])
                chunk = chunk[end + 2 :]
            pieces += self._source.encode(chunk, out_type=str)
            ids += [self.vocabulary.get(piece, unk) for piece in pieces]
        return ids

    def tokenize(self, strings):
        """Source sentences to our ids, without the end id (eager only).

        Args:
            strings: a `str`, a list of `str`, or a `tf.string` tensor.

        Returns:
            A `tf.RaggedTensor` `(batch, (tokens))` of int32 ids, or a 1-D
            int32 tensor for a single string.
        """
        return tokenize_in_python(
            strings,
            lambda texts: [[i + ID_OFFSET for i in self._encode(t)] for t in texts],
        )

    def detokenize(self, ids):
        """Our ids back to target text, stopping at the first end id.

        Padding, the start id and Marian's special tokens are left out, as
        `transformers`' `decode(ids, skip_special_tokens=True)` does; the
        pieces are decoded by `target.spm`.

        Returns:
            A `tf.string` tensor `(batch,)`, or a scalar for one sequence.
        """
        ids = _to_id_tensor(ids)
        if ids.shape.rank == 1:
            return self.detokenize(ids[tf.newaxis])[0]
        if isinstance(ids, tf.RaggedTensor):
            rows = ids.to_list()
        else:
            rows = ids.numpy().tolist()
        texts = []
        for row in rows:
            pieces = []
            for our_id in row:
                if our_id == self.end_id:
                    break
                marian_id = our_id - ID_OFFSET
                if 0 <= marian_id < len(self._pieces) and (
                    marian_id not in self._special_ids
                ):
                    pieces.append(self._pieces[marian_id])
            text = self._target.decode_pieces(pieces)
            texts.append(text.replace(_SPIECE_UNDERLINE, " ").strip())
        return tf.constant(texts, dtype=tf.string, shape=[len(texts)])

    def nbest_tokenize(self, strings, nbest_size):
        raise NotImplementedError(
            "MarianTokenizer has no n-best segmentation (its pieces go "
            "through vocab.json). Received: nbest_size="
            f"{nbest_size}"
        )

    def id_to_piece(self, ids):
        """The piece of our id (or of each of a list), e.g. `"▁Hund"`."""
        if isinstance(ids, (int, np.integer)):
            self._check_id(ids)
            return "" if ids == 0 else self._pieces[ids - ID_OFFSET]
        return [self.id_to_piece(i) for i in ids]

    @property
    def model_proto(self):
        """The serialized `source.spm`."""
        return self._source_proto

    # === Files ===

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "start_id": self.start_id,
            "end_id": self.end_id,
            "id_offset": ID_OFFSET,
        }

    def save(self, directory):
        """Writes Marian's tokenizer files (what `load` and `transformers` read).

        `source.spm`, `target.spm`, `vocab.json` (Marian's ids) and
        `tokenizer_config.json`.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / SOURCE_MODEL_FILE).write_bytes(self._source_proto)
        (directory / TARGET_MODEL_FILE).write_bytes(self._target_proto)
        (directory / VOCABULARY_FILE).write_text(
            json.dumps(self.vocabulary, ensure_ascii=False, indent=2) + "\n",
            encoding="utf-8",
        )
        config = {
            "tokenizer_class": "MarianTokenizer",
            "unk_token": self.unk_token,
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
            "model_max_length": 512,
            "separate_vocabs": False,
        }
        (directory / TOKENIZER_CONFIG_FILE).write_text(
            json.dumps(config, indent=2) + "\n", encoding="utf-8"
        )

    def save_to_preset(self, directory):
        """Writes the tokenizer into a preset directory.

        Marian's files (`save`) go to `assets/tokenizer/`; `tokenizer.json`
        at the top of the preset holds `get_config()`, the class name and
        the path of `source.spm` there (`model_file`, as a
        `SubwordTokenizer` preset names its model file). A model's
        `save_to_preset(directory, tokenizer=...)` calls this, and
        `Translator.from_preset(directory)` reads it back (`from_preset`).

        Args:
            directory: a `str` or `pathlib.Path`; created if missing.
        """
        directory = Path(directory)
        self.save(directory / PRESET_ASSETS_DIR)
        config = {
            "class_name": type(self).__name__,
            **self.get_config(),
            "model_file": f"{PRESET_ASSETS_DIR}/{SOURCE_MODEL_FILE}",
        }
        (directory / PRESET_CONFIG_FILE).write_text(
            json.dumps(config, indent=2) + "\n", encoding="utf-8"
        )

    @classmethod
    def from_preset(cls, preset):
        """Loads the tokenizer that `save_to_preset` wrote into a preset.

        Args:
            preset: the path of a preset directory.

        Returns:
            A `MarianTokenizer`.
        """
        from keras_attn.models.preset_files import preset_file
        from keras_attn.models.preset_io import preset_directory

        directory = preset_directory(preset)
        config, source_model = preset_tokenizer_files(directory)
        folder = source_model.parent
        for name in (TARGET_MODEL_FILE, VOCABULARY_FILE):  # inside the preset too
            preset_file(directory, str(folder.relative_to(directory) / name))
        tokenizer = cls.load(folder)
        check_described(tokenizer, config, directory / PRESET_CONFIG_FILE, folder)
        return tokenizer

    @classmethod
    def load(cls, directory):
        """Reads `source.spm`, `target.spm`, `vocab.json` and, if present,
        `tokenizer_config.json` (the special tokens) from `directory`.

        A checkpoint with a separate target vocabulary
        (`target_vocab.json`, `separate_vocabs`) is refused: our models
        share one vocabulary.
        """
        directory = Path(directory)
        for file_name in (SOURCE_MODEL_FILE, TARGET_MODEL_FILE, VOCABULARY_FILE):
            if not (directory / file_name).is_file():
                raise FileNotFoundError(
                    f"The Marian checkpoint {str(directory)!r} has no "
                    f"{file_name!r} (Marian's tokenizer is source.spm, "
                    "target.spm and vocab.json)."
                )
        config = {}
        if (directory / TOKENIZER_CONFIG_FILE).is_file():
            config = read_json(directory / TOKENIZER_CONFIG_FILE)
        if config.get("separate_vocabs") or (directory / "target_vocab.json").exists():
            raise ValueError(
                f"The Marian checkpoint {str(directory)!r} has a separate target "
                "vocabulary (target_vocab.json); keras-attn's Transformer shares "
                "one vocabulary. Received: separate_vocabs="
                f"{config.get('separate_vocabs', True)}"
            )
        tokens = {
            key: _token_string(config.get(key, default), key)
            for key, default in (
                ("unk_token", "<unk>"),
                ("eos_token", "</s>"),
                ("pad_token", "<pad>"),
            )
        }
        return cls(
            (directory / SOURCE_MODEL_FILE).read_bytes(),
            (directory / TARGET_MODEL_FILE).read_bytes(),
            read_json(directory / VOCABULARY_FILE),
            **tokens,
        )

    def __repr__(self):
        return f"MarianTokenizer(vocabulary_size={self.vocabulary_size})"


def _token_string(value, key):
    """A special token of `tokenizer_config.json`: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str):
        raise ValueError(
            f"`{key}` of {TOKENIZER_CONFIG_FILE} must be a string. "
            f"Received: {key}={value!r:.100}"
        )
    return value
