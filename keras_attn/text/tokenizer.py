"""A shared source/target subword tokenizer: SentencePiece run by tensorflow-text.

Why SentencePiece rather than WordPiece (the tokenizer of the TensorFlow
Transformer tutorial): SentencePiece treats the input as a raw character
stream and encodes whitespace as the piece `"▁"`, so detokenization is
lossless (up to NFKC normalization and collapsing runs of spaces):
`detokenize(tokenize(s)) == s`. The
model's detokenized output can go straight into cased, detokenized sacreBLEU,
with no Moses tokenizer before training and no Moses detokenizer after
decoding. WordPiece needs a pre-tokenizer, loses whitespace and (as the
tutorial uses it) lowercases. SentencePiece also trains from an in-memory
iterator in seconds (2-3 s for an 8,000-piece unigram model on the 58,000
English and German sentences of Multi30k with 2 CPU threads), where
tensorflow-text's WordPiece vocabulary builder runs a Beam/tf.data job.

The model is trained with the `sentencepiece` package and run inside
TensorFlow graphs by `tensorflow_text.SentencepieceTokenizer`, so that
`tokenize` and `detokenize` work eagerly, in `tf.data` pipelines, inside
`tf.function`, and in an exported SavedModel (the class is a `tf.Module`, so
the tokenizer's model resource is tracked when the object is attached to one).
Special ids are fixed: padding 0, unknown 1, start 2, end 3.
"""

import io
import json
import os
from pathlib import Path

import numpy as np
import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2

from keras_attn.text.tf_text_compat import share_model_resource
from keras_attn.validation import (
    check_choice,
    check_float,
    check_int,
    check_seed,
    check_string_list,
    check_token_id,
)

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
MODEL_TYPES = ("unigram", "bpe")
MODEL_FILE = "tokenizer.model"
CONFIG_FILE = "tokenizer.json"
# Where a preset directory keeps the model file (the keras-hub layout).
PRESET_ASSETS_DIR = "assets/tokenizer"


def _to_string_tensor(strings):
    """Converts `str`, a sequence of `str` or a string tensor to a tf.string tensor."""
    if isinstance(strings, (tf.Tensor, tf.RaggedTensor)):
        if strings.dtype != tf.string:
            raise TypeError(
                f"`strings` must have dtype tf.string. Received: dtype={strings.dtype}"
            )
        return strings
    try:
        return tf.constant(strings, dtype=tf.string)
    except (TypeError, ValueError) as error:
        raise TypeError(
            "`strings` must be a `str`, a (nested) list of `str` or a string "
            f"tensor. Received: strings={strings!r:.200}"
        ) from error


def tokenize_in_python(strings, encode_batch):
    """Strings to ids with a tokenizer that runs in Python, not in the graph.

    Args:
        strings: a `str`, a list of `str`, or a `tf.string` tensor.
        encode_batch: a function from a list of `str` to one list of int
            ids per string.

    Returns:
        A `tf.RaggedTensor` `(batch, (tokens))` of int32 ids, or a 1-D int32
        tensor for a single string.
    """
    strings = _to_string_tensor(strings)
    if strings.shape.rank == 0:
        return tokenize_in_python(strings[tf.newaxis], encode_batch)[0]
    rows = encode_batch([text.decode("utf-8") for text in strings.numpy().tolist()])
    return tf.ragged.constant(rows, dtype=tf.int32, row_splits_dtype=tf.int64)


def _to_id_tensor(ids):
    """Converts ids (tf, NumPy, JAX, lists; dense or ragged) to int32 tf tensors."""
    if not isinstance(ids, (tf.Tensor, tf.RaggedTensor)):
        ids = tf.convert_to_tensor(np.asarray(ids))
    if not ids.dtype.is_integer:
        raise TypeError(f"`ids` must be integers. Received: dtype={ids.dtype}")
    return tf.cast(ids, tf.int32)


def _train_model_proto(
    sentences, vocabulary_size, model_type, character_coverage, seed
):
    """Runs the SentencePiece trainer; returns the serialized model."""
    sentencepiece.set_random_generator_seed(int(seed))
    model_writer = io.BytesIO()
    with open(os.devnull, "w") as log:  # Training logs a page per run.
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model_writer,
                vocab_size=int(vocabulary_size),
                model_type=model_type,
                character_coverage=float(character_coverage),
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=START_ID,
                eos_id=END_ID,
                num_threads=min(16, os.cpu_count() or 1),
                logstream=log,
            )
        except RuntimeError as error:
            # E.g. a vocabulary larger than the text supports; the
            # message says which value would work.
            raise ValueError(
                f"SentencePiece training failed for vocabulary_size="
                f"{vocabulary_size}, model_type={model_type!r}: {error}"
            ) from error
    return model_writer.getvalue()


def sentencepiece_processor(model_proto, described):
    """A `sentencepiece.SentencePieceProcessor` of the serialized model
    `model_proto`; an invalid one is refused naming it as `described`."""
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(bytes(model_proto))
    except RuntimeError as error:
        raise ValueError(
            f"{described} is not a valid SentencePiece model: {error}"
        ) from error
    return processor


def preset_tokenizer_files(directory):
    """`(config, model_file)` of a preset's tokenizer: its `tokenizer.json`
    and the model file that names, refused if missing or outside the
    preset (no `../`, no absolute path, no symbolic link out of it)."""
    from keras_attn.file_safety import confined_path
    from keras_attn.models.preset_files import preset_file, read_preset_file

    if not preset_file(directory, CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"The preset directory {str(directory)!r} has no tokenizer: "
            f"{CONFIG_FILE!r} is missing."
        )
    config = read_preset_file(directory, CONFIG_FILE)
    model_file = confined_path(
        directory,
        config["model_file"],
        repr(str(directory / CONFIG_FILE)),
        what="tokenizer model file",
        folder="the preset",
    )
    if not model_file.is_file():
        raise FileNotFoundError(
            f"The preset directory {str(directory)!r} has no tokenizer "
            f"model: {str(model_file)!r} (named by {CONFIG_FILE!r}) is missing."
        )
    return config, model_file


def check_described(tokenizer, config, config_path, files):
    """Raises unless `config` (read from `config_path`) gives the vocabulary
    size and special ids `tokenizer` (read from `files`) has."""
    saved = {key: config.get(key) for key in ("vocabulary_size", "pad_id", "end_id")}
    actual = {key: tokenizer.get_config()[key] for key in saved}
    if saved != actual:
        raise ValueError(
            f"{str(config_path)!r} does not describe {str(files)!r}: the "
            f"config says {saved}, the tokenizer files have {actual}."
        )


class SubwordTokenizer(tf.Module):
    """Subword tokenizer shared by source and target languages.

    Wraps a SentencePiece model (unigram or BPE) with fixed special ids:
    padding `0`, unknown `1`, start (bos) `2`, end (eos) `3`. `tokenize` adds
    no start/end ids: the input pipeline adds them where the model needs them.
    Characters not seen in training map to the unknown id (no byte fallback).

    Create one with `SubwordTokenizer.train(...)` or `SubwordTokenizer.load(...)`.

    Args:
        model_proto: the serialized SentencePiece `ModelProto`, as `bytes`,
            with the special ids above.
        name: the `tf.Module` name. Defaults to `"subword_tokenizer"`.

    Example:

    >>> from keras_attn.text import SubwordTokenizer, load_multi30k
    >>> sources, targets = load_multi30k("val")
    >>> tokenizer = SubwordTokenizer.train(sources + targets, vocabulary_size=1000)
    >>> ids = tokenizer.tokenize(["A dog runs."])
    >>> tokenizer.detokenize(ids).numpy()
    array([b'A dog runs.'], dtype=object)

    References:
        - [Kudo and Richardson, 2018](https://arxiv.org/abs/1808.06226),
          SentencePiece: A simple and language independent subword tokenizer
          and detokenizer for Neural Text Processing.
    """

    def __init__(self, model_proto, name="subword_tokenizer"):
        super().__init__(name=name)
        if not isinstance(model_proto, (bytes, bytearray)) or not model_proto:
            raise TypeError(
                "`model_proto` must be the non-empty serialized SentencePiece "
                f"model as bytes. Received: model_proto={model_proto!r:.100}"
            )
        processor = sentencepiece_processor(model_proto, "`model_proto`")
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": START_ID, "eos": END_ID}
        received = {
            "pad": processor.pad_id(),
            "unk": processor.unk_id(),
            "bos": processor.bos_id(),
            "eos": processor.eos_id(),
        }
        if received != expected:
            raise ValueError(
                f"`model_proto` must use the special ids {expected}. "
                f"Received: {received}"
            )
        self._model_proto = bytes(model_proto)
        self._processor = processor
        # With a model resource that survives `keras.utils.set_random_seed`.
        self._tokenizer = share_model_resource(
            tf_text.SentencepieceTokenizer(model=self._model_proto, out_type=tf.int32),
            self._model_proto,
        )

    @classmethod
    def train(
        cls,
        sentences,
        vocabulary_size=8000,
        model_type="unigram",
        character_coverage=1.0,
        seed=0,
    ):
        """Trains a SentencePiece model on in-memory sentences.

        For a shared vocabulary, pass the source and the target sentences
        together, e.g. `sources + targets`. Text is NFKC-normalized and runs
        of whitespace are collapsed (SentencePiece's `nmt_nfkc` defaults).

        Args:
            sentences: an iterable of `str`, one sentence each.
            vocabulary_size: the number of pieces, special ids included.
                Defaults to `8000`.
            model_type: `"unigram"` or `"bpe"`. Defaults to `"unigram"`.
            character_coverage: the share of characters the vocabulary must
                cover; rarer characters become the unknown id. Defaults to
                `1.0` (every character of the training text).
            seed: seed of SentencePiece's random generator (set globally in
                the `sentencepiece` module). Defaults to `0`.

        Returns:
            A `SubwordTokenizer`.
        """
        sentences = check_string_list(sentences, "sentences", allow_empty=False)
        vocabulary_size = check_int(
            vocabulary_size, "vocabulary_size", min_value=END_ID + 2
        )
        model_type = check_choice(model_type, "model_type", MODEL_TYPES)
        character_coverage = check_float(
            character_coverage,
            "character_coverage",
            0.0,
            1.0,
            include_min=False,
        )
        seed = check_seed(seed, allow_none=False)
        return cls(
            _train_model_proto(
                sentences, vocabulary_size, model_type, character_coverage, seed
            )
        )

    def tokenize(self, strings):
        """Splits strings into subword ids, without start or end ids.

        Works eagerly, in `tf.data` and inside `tf.function`.

        Args:
            strings: a `str`, a list of `str`, or a `tf.string` tensor.

        Returns:
            For a batch of strings, a `tf.RaggedTensor` of int32 ids of shape
            `(batch, (tokens))`; for a single string, a 1-D int32 `tf.Tensor`.
            The empty string gives zero ids.
        """
        return self._tokenizer.tokenize(_to_string_tensor(strings))

    def nbest_tokenize(self, strings, nbest_size):
        """The `nbest_size` most likely segmentations of each string.

        The candidates of subword regularization (Kudo, 2018): the unigram
        model's best segmentations of each string, best first, each with
        its log-probability under the model. The first candidate is
        `tokenize`'s. A string with fewer segmentations than `nbest_size`
        gets all it has. Eager only (SentencePiece's own n-best search,
        about 10,000 sentences a second for `nbest_size=8`).

        Args:
            strings: a list of `str`.
            nbest_size: the most candidates per string, a positive integer.

        Returns:
            A tuple `(ids, scores)`: `ids`, an int32 `tf.RaggedTensor` of
            shape `(batch, (candidates), (tokens))`; `scores`, a float32
            `tf.RaggedTensor` of shape `(batch, (candidates))`, the
            candidates' log-probabilities in decreasing order.

        Raises:
            ValueError: for a BPE model, which has no n-best search.

        Example:

        >>> from keras_attn.text import SubwordTokenizer, load_multi30k
        >>> sources, targets = load_multi30k("val")
        >>> tokenizer = SubwordTokenizer.train(sources + targets, vocabulary_size=1000)
        >>> ids, scores = tokenizer.nbest_tokenize(["A dog runs."], nbest_size=4)
        >>> ids.row_lengths().numpy()  # candidates per string
        array([4])
        >>> tokenizer.detokenize(ids[0]).numpy()
        array([b'A dog runs.', b'A dog runs.', b'A dog runs.', b'A dog runs.'],
              dtype=object)
        """
        strings = check_string_list(strings, "strings")
        nbest_size = check_int(nbest_size, "nbest_size", min_value=1)
        model_type = self.get_config()["model_type"]  # Parses the model once.
        if model_type != "unigram":
            raise ValueError(
                "`nbest_tokenize` needs a unigram model (SentencePiece has no "
                f"n-best search for BPE). Received: model_type={model_type!r}"
            )
        # Flat lists, assembled into ragged tensors once: (strings, (k), (t)).
        ids, token_counts, candidate_counts, scores = [], [], [], []
        for string in strings:
            candidates = self._processor.nbest_encode_as_immutable_proto(
                string, nbest_size=nbest_size
            ).nbests
            if not candidates:  # The empty string: one empty segmentation.
                token_counts.append(0)
                candidate_counts.append(1)
                scores.append(0.0)
                continue
            for candidate in candidates:
                ids.extend(piece.id for piece in candidate.pieces)
                token_counts.append(len(candidate.pieces))
                scores.append(candidate.score)
            candidate_counts.append(len(candidates))
        candidate_ids = tf.RaggedTensor.from_row_lengths(
            tf.constant(ids, tf.int32, shape=[len(ids)]),
            tf.constant(token_counts, tf.int64, shape=[len(token_counts)]),
        )
        candidate_counts = tf.constant(candidate_counts, tf.int64, shape=[len(strings)])
        return (
            tf.RaggedTensor.from_row_lengths(candidate_ids, candidate_counts),
            tf.RaggedTensor.from_row_lengths(
                tf.constant(scores, tf.float32, shape=[len(scores)]), candidate_counts
            ),
        )

    def detokenize(self, ids):
        """Turns ids back into text, stopping at the first end id.

        Ids from the first end id on are removed, then padding and start ids,
        so model outputs (`[start] tokens [end] [pad] ...`) can be passed as
        they are.

        Args:
            ids: int ids, a dense `(batch, length)` or ragged
                `(batch, (length))` tensor (TensorFlow, NumPy, JAX or a nested
                list), or a single `(length,)` sequence.

        Returns:
            A `tf.string` tensor: shape `(batch,)`, or a scalar for a single
            sequence.
        """
        ids = _to_id_tensor(ids)
        if ids.shape.rank == 1:
            return self.detokenize(ids[tf.newaxis])[0]
        if ids.shape.rank != 2:
            raise ValueError(
                "`ids` must have shape (batch, length) or (length,). "
                f"Received: ids.shape={ids.shape}"
            )
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        # True before the first end id of each row.
        before_end = tf.cumsum(tf.cast(ids == END_ID, tf.int32), axis=1) == 0
        keep = before_end & (ids != PAD_ID) & (ids != START_ID)
        return self._tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))

    def id_to_piece(self, ids):
        """Returns the subword string of an id, or a list for a list of ids.

        Eager only (for plots and debugging), e.g. `"▁Hund"`.
        """
        if isinstance(ids, (int, np.integer)):
            return self._processor.id_to_piece(self._check_id(ids))
        return [self._processor.id_to_piece(self._check_id(i)) for i in ids]

    def _check_id(self, index):
        return check_token_id(index, "id", self.vocabulary_size)

    @property
    def model_proto(self):
        """The serialized SentencePiece model, as `bytes`."""
        return self._model_proto

    @property
    def vocabulary_size(self):
        """The number of ids, special ids included."""
        return self._processor.get_piece_size()

    @property
    def pad_id(self):
        """The padding id, `0`."""
        return PAD_ID

    @property
    def unk_id(self):
        """The id of unknown characters, `1`."""
        return UNK_ID

    @property
    def start_id(self):
        """The start-of-sequence (bos) id, `2`."""
        return START_ID

    @property
    def end_id(self):
        """The end-of-sequence (eos) id, `3`."""
        return END_ID

    def get_config(self):
        """Returns a JSON-serializable description of the model."""
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(self._model_proto)
        return {
            "model_file": MODEL_FILE,
            "vocabulary_size": self.vocabulary_size,
            "model_type": sentencepiece_model_pb2.TrainerSpec.ModelType.Name(
                proto.trainer_spec.model_type
            ).lower(),
            "normalization": proto.normalizer_spec.name,
            "pad_id": PAD_ID,
            "unk_id": UNK_ID,
            "start_id": START_ID,
            "end_id": END_ID,
        }

    def save(self, directory):
        """Writes `tokenizer.model` and `tokenizer.json` into `directory`.

        `tokenizer.model` is an ordinary SentencePiece model file (the
        `sentencepiece` command-line tools read it); `tokenizer.json` holds
        `get_config()`.

        Args:
            directory: a `str` or `pathlib.Path`; created if missing.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MODEL_FILE).write_bytes(self._model_proto)
        (directory / CONFIG_FILE).write_text(
            json.dumps(self.get_config(), indent=2) + "\n", encoding="utf-8"
        )

    def save_to_preset(self, directory):
        """Writes the tokenizer into a preset directory.

        `assets/tokenizer/tokenizer.model` is the SentencePiece model file;
        `tokenizer.json` (at the top of the preset) holds `get_config()`
        with the model file's path relative to the preset. A model's
        `save_to_preset(directory, tokenizer=...)` calls this.

        Args:
            directory: a `str` or `pathlib.Path`; created if missing.
        """
        directory = Path(directory)
        model_file = f"{PRESET_ASSETS_DIR}/{MODEL_FILE}"
        (directory / PRESET_ASSETS_DIR).mkdir(parents=True, exist_ok=True)
        (directory / model_file).write_bytes(self._model_proto)
        config = {"class_name": type(self).__name__, **self.get_config()}
        config["model_file"] = model_file
        (directory / CONFIG_FILE).write_text(
            json.dumps(config, indent=2) + "\n", encoding="utf-8"
        )

    @classmethod
    def from_preset(cls, preset):
        """Loads the tokenizer of a trained preset.

        Args:
            preset: the name of a shipped trained preset (see
                `keras_attn.models.list_presets()`) or the path of a
                directory written by a model's `save_to_preset` with a
                tokenizer.

        Returns:
            A `SubwordTokenizer`.
        """
        from keras_attn.models.preset_io import preset_directory

        directory = preset_directory(preset)
        config, model_file = preset_tokenizer_files(directory)
        return cls._checked(model_file, directory / CONFIG_FILE, config)

    @classmethod
    def load(cls, directory):
        """Loads a tokenizer written by `save`.

        Args:
            directory: a `str` or `pathlib.Path`.

        Returns:
            A `SubwordTokenizer`.
        """
        directory = Path(directory)
        for file_name in (MODEL_FILE, CONFIG_FILE):
            if not (directory / file_name).is_file():
                raise FileNotFoundError(
                    f"No tokenizer in {str(directory)!r}: "
                    f"{str(directory / file_name)!r} is missing."
                )
        from keras_attn.file_safety import read_json

        config = read_json(directory / CONFIG_FILE)
        if not isinstance(config, dict):
            raise ValueError(
                f"{str(directory / CONFIG_FILE)!r} must hold a JSON object (the "
                f"tokenizer's config). Received: {config!r:.100}"
            )
        return cls._checked(directory / MODEL_FILE, directory / CONFIG_FILE, config)

    @classmethod
    def _checked(cls, model_path, config_path, config):
        """The tokenizer of `model_path`, checked against its `config`."""
        try:
            tokenizer = cls(model_path.read_bytes())
        except (TypeError, ValueError) as error:
            # The constructor's message is about its argument; say which
            # file held the bytes, and what is wrong with them.
            problem = "is empty" if model_path.stat().st_size == 0 else "is corrupt"
            raise ValueError(
                f"{str(model_path)!r} is not a usable SentencePiece tokenizer "
                f"model: the file {problem} ({error}). Expected the "
                "`tokenizer.model` written by `SubwordTokenizer.save` or "
                "`save_to_preset`."
            ) from error
        check_described(tokenizer, config, config_path, model_path)
        return tokenizer

    def __repr__(self):
        config = self.get_config()
        return (
            f"SubwordTokenizer(vocabulary_size={config['vocabulary_size']}, "
            f"model_type={config['model_type']!r})"
        )
