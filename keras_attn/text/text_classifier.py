"""Text in, labels out: a tokenizer and a `TransformerEncoderClassifier`."""

import numpy as np
import tensorflow as tf

from keras_attn.text.task_checks import (
    check_texts,
    check_tokenizer_matches,
    load_preset,
)
from keras_attn.thread_safety import predict_lock
from keras_attn.validation import (
    check_bool,
    check_int,
    check_positive_int,
    check_string_list,
)


class TextClassifier:
    """Classifies raw strings with a trained `TransformerEncoderClassifier`.

    Each text becomes `[start] + its first pieces` (the start id serving as
    BERT's `[CLS]`), with `add_end` followed by the end id (BERT's
    `[SEP]`), cut to `sequence_length` and right-padded to it, so one
    compiled function serves every batch. A model with segments
    (`num_segments`) reads every text as segment 0, and may classify text
    pairs (`pairs=`): `[start] text [end] pair [end]`, segment 0 up to the
    first end id and 1 after it (BERT's `[CLS] A [SEP] B [SEP]`); pairs
    that do not fit are cut as the `tokenizers` library's `longest_first`
    truncation cuts them (the shorter text keeps up to half the room).

    Thread-safe: threads may share one `TextClassifier`, on every backend,
    first (compiling) call included; each call gives what it gives alone.
    On JAX the predict calls on the model are serialized
    (`keras_attn.thread_safety`: Keras's JAX predict donates the
    variables' buffers); TensorFlow and torch run them concurrently.

    Args:
        model: a trained `keras_attn.models.TransformerEncoderClassifier`.
        tokenizer: the `keras_attn.text.SubwordTokenizer` it was trained with.
        class_names: the name of each class, in label order. Defaults to
            `None`, meaning the labels `0 ... num_classes - 1`.
        sequence_length: pieces per text, the start id included. Defaults to
            `None`, meaning the model's `max_sequence_length`.
        batch_size: texts per batch. Defaults to `32`.
        add_end: bool, end every text with the tokenizer's end id, also
            when it is cut (BERT's `[CLS] text [SEP]`). Defaults to `False`.

    Example:

    >>> classifier = keras_attn.text.TextClassifier.from_preset("bbc_news_classifier")
    >>> classifier.predict(["The striker scored twice in the cup final."])
    ['sport']
    """

    def __init__(
        self,
        model,
        tokenizer,
        class_names=None,
        sequence_length=None,
        batch_size=32,
        add_end=False,
    ):
        check_tokenizer_matches(tokenizer, model)
        if class_names is not None:
            class_names = check_string_list(class_names, "class_names")
        if class_names is not None and len(class_names) != model.num_classes:
            raise ValueError(
                f"`class_names` must name the model's {model.num_classes} classes. "
                f"Received: class_names={list(class_names)!r}"
            )
        limit = model.max_sequence_length
        sequence_length = limit if sequence_length is None else sequence_length
        sequence_length = check_int(
            sequence_length, "sequence_length", min_value=2, max_value=limit
        )
        self.model = model
        self.tokenizer = tokenizer
        self.class_names = None if class_names is None else list(class_names)
        self.sequence_length = sequence_length
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.add_end = check_bool(add_end, "add_end")
        if self.add_end and tokenizer.end_id is None:
            raise ValueError(
                "`add_end=True` ends every text with the tokenizer's end id, "
                f"and this tokenizer has none. Received: tokenizer={tokenizer!r:.100}"
            )

    @classmethod
    def from_preset(cls, preset, dtype=None, **kwargs):
        """A `TextClassifier` from a trained classifier preset.

        The class names and the sequence length come from the preset's
        `metadata.json` (`"class_names"`, `"sequence_length"`). A Hugging
        Face `BertForSequenceClassification` checkpoint brings its
        WordPiece tokenizer and its `id2label` (`keras_attn.hf.bert`).

        Args:
            preset: the name of a shipped trained preset, such as
                `"bbc_news_classifier"`, a preset directory, or a Hugging
                Face checkpoint (`"hf://owner/name"` or its local
                directory).
            dtype: the model's dtype policy. Defaults to `None`, meaning the
                saved one.
            **kwargs: `TextClassifier` arguments that replace the preset's.

        Returns:
            A `TextClassifier`.
        """
        from keras_attn.hf import bert, files

        if files.is_hf_checkpoint(preset):  # "hf://owner/name" or its directory
            return bert.load_text_classifier(cls, preset, dtype=dtype, **kwargs)
        from keras_attn.models import TransformerEncoderClassifier
        from keras_attn.models.preset_files import METADATA_FILE, read_preset_file

        directory, model, tokenizer = load_preset(
            preset, TransformerEncoderClassifier, dtype
        )
        metadata = read_preset_file(directory, METADATA_FILE)
        kwargs.setdefault("class_names", metadata.get("class_names"))
        kwargs.setdefault("sequence_length", metadata.get("sequence_length"))
        return cls(model, tokenizer, **kwargs)

    def _check_pairs(self, texts, pairs):
        """`(texts, pairs)` checked: `pairs` a list as long as `texts`, for
        a model with two segments or more, or `None`."""
        texts = check_texts(texts, "texts")
        if pairs is None:
            return texts, None
        pairs = check_texts(pairs, "pairs")
        if len(pairs) != len(texts):
            raise ValueError(
                f"`pairs` must hold one text per text, {len(texts)}. "
                f"Received: {len(pairs)} pairs"
            )
        if (self.model.num_segments or 0) < 2:
            raise ValueError(
                "Text pairs need a model with two segments (BERT's token "
                "types). Received: pairs for a model with num_segments="
                f"{self.model.num_segments}"
            )
        return texts, pairs

    def _tokenize(self, texts):
        if not texts:
            return []
        return self.tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()

    def _encode(self, texts, pairs):
        """`(token_ids, segment_ids)` of checked texts and pairs."""
        ids = np.full(
            (len(texts), self.sequence_length), self.tokenizer.pad_id, "int32"
        )
        segments = np.zeros_like(ids)
        start, end = self.tokenizer.start_id, self.tokenizer.end_id
        if pairs is None:
            ends = [end] if self.add_end else []
            room = self.sequence_length - 1 - len(ends)
            for row, pieces in enumerate(self._tokenize(texts)):
                sequence = [start, *pieces[:room], *ends]
                ids[row, : len(sequence)] = sequence
            return ids, segments
        room = self.sequence_length - 3  # [start] first [end] second [end]
        for row, (first, second) in enumerate(
            zip(self._tokenize(texts), self._tokenize(pairs))
        ):
            if len(first) + len(second) > room:
                # The shorter (the first on a tie) keeps up to half the room,
                # the longer the rest (`tokenizers`' LongestFirst).
                if len(first) <= len(second):
                    first = first[: min(len(first), room // 2)]
                    second = second[: room - len(first)]
                else:
                    second = second[: min(len(second), room // 2)]
                    first = first[: room - len(second)]
            sequence = [start, *first, end, *second, end]
            ids[row, : len(sequence)] = sequence
            segments[row, len(first) + 2 : len(sequence)] = 1
        return ids, segments

    def encode(self, texts, pairs=None):
        """int32 `(len(texts), sequence_length)`: `[start] + pieces` (and
        the end id with `add_end`), padded; with `pairs`, `[start] text
        [end] pair [end]`."""
        return self._encode(*self._check_pairs(texts, pairs))[0]

    def predict_proba(self, texts, pairs=None):
        """Class probabilities, float32 `(len(texts), num_classes)`.

        Args:
            texts: a list of strings.
            pairs: a list of strings, the second text of each pair (a model
                with segments only). Defaults to `None`.
        """
        ids, segments = self._encode(*self._check_pairs(texts, pairs))
        if not len(ids):
            return np.zeros((0, self.model.num_classes), "float32")
        inputs = ids
        if self.model.num_segments is not None:
            inputs = {"token_ids": ids, "segment_ids": segments}
        with predict_lock(self.model):
            logits = self.model.predict(inputs, batch_size=self.batch_size, verbose=0)
        logits = np.asarray(logits, "float64")
        logits -= logits.max(axis=-1, keepdims=True)
        probabilities = np.exp(logits)
        return (probabilities / probabilities.sum(-1, keepdims=True)).astype("float32")

    def predict(self, texts, pairs=None):
        """The most likely class of each text (or pair): its name, or its
        label. The arguments are `predict_proba`'s."""
        labels = self.predict_proba(texts, pairs).argmax(axis=-1)
        if self.class_names is None:
            return [int(label) for label in labels]
        return [self.class_names[label] for label in labels]
