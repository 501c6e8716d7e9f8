"""A Hugging Face checkpoint's tokenizer behind the interface our text tasks use.

`keras_attn.text.TextGenerator` reads a `SubwordTokenizer`: `tokenize`
(ragged ids, no special tokens), `detokenize` (stopping at the end id),
`start_id`, `end_id`, `pad_id`, `vocabulary_size`. `CheckpointTokenizer`
gives that interface over `keras_attn.hf.tokenizer.HFTokenizer`, which
runs the checkpoint's own files (`tokenizer.json` or `tokenizer.model`),
with the model's ids: its vocabulary (which may have more rows than the
tokenizer has pieces), its `pad_id` and, for an encoder-decoder whose
padding is also its decoder's start token (T5), the checkpoint's ids
shifted by `id_offset` to make room for a padding id of the model's own
(`keras_attn.hf.t5`).
"""

import numpy as np
import tensorflow as tf

from keras_attn.text.tokenizer import (
    SubwordTokenizer,
    _to_id_tensor,
    tokenize_in_python,
)
from keras_attn.validation import check_int


class CheckpointTokenizer(SubwordTokenizer):
    """A checkpoint's tokenizer with the ids of the model it belongs to.

    Eager only: the checkpoint's tokenizer runs in Python (not in
    `tf.data` graphs or an exported SavedModel).

    Args:
        tokenizer: a `keras_attn.hf.tokenizer.HFTokenizer`.
        vocabulary_size: the model's `vocabulary_size` (at least the
            tokenizer's).
        pad_id: the model's `pad_id`.
        name: the `tf.Module` name. Defaults to `"checkpoint_tokenizer"`.
        id_offset: int `>= 0`, the model's id of the checkpoint's id `i`
            is `i + id_offset`. Defaults to `0`.
        start_id: the model's id of the decoder's start token. Defaults to
            `None`, meaning the tokenizer's BOS (plus `id_offset`).
    """

    def __init__(
        self,
        tokenizer,
        vocabulary_size,
        pad_id,
        name="checkpoint_tokenizer",
        id_offset=0,
        start_id=None,
    ):
        # Not `SubwordTokenizer.__init__`: that one checks a SentencePiece
        # model's fixed special ids; a checkpoint has its own.
        tf.Module.__init__(self, name=name)
        self.id_offset = check_int(id_offset, "id_offset", min_value=0)
        if tokenizer.vocabulary_size + self.id_offset > vocabulary_size:
            raise ValueError(
                f"The checkpoint's tokenizer has {tokenizer.vocabulary_size} ids, "
                f"which from id_offset={self.id_offset} do not fit in the "
                f"model's vocabulary_size={vocabulary_size}."
            )
        self.tokenizer = tokenizer
        self._vocabulary_size = int(vocabulary_size)
        self._pad_id = int(pad_id)
        if start_id is None and tokenizer.start_id is not None:
            start_id = tokenizer.start_id + self.id_offset
        self._start_id = start_id

    @property
    def vocabulary_size(self):
        """The model's vocabulary size."""
        return self._vocabulary_size

    @property
    def pad_id(self):
        return self._pad_id

    @property
    def unk_id(self):
        return None

    @property
    def start_id(self):
        return self._start_id

    @property
    def end_id(self):
        if self.tokenizer.end_id is None:
            return None
        return self.tokenizer.end_id + self.id_offset

    def tokenize(self, strings):
        """Strings to ids, without special tokens (eager only).

        Returns:
            A `tf.RaggedTensor` `(batch, (tokens))` of int32 ids, or a 1-D
            int32 tensor for a single string.
        """
        offset = self.id_offset
        return tokenize_in_python(
            strings,
            lambda texts: [
                [i + offset for i in row] for row in self.tokenizer.tokenize(texts)
            ],
        )

    def detokenize(self, ids):
        """Ids back to text, stopping at the first end id; padding, the start
        id and special tokens left out.

        Returns:
            A `tf.string` tensor `(batch,)`, or a scalar for one sequence.
        """
        ids = _to_id_tensor(ids)
        if isinstance(ids, tf.RaggedTensor):
            rows = ids.to_list()
        else:
            rows = ids.numpy().tolist()
        if ids.shape.rank == 1:
            return self.detokenize([rows])[0]
        kept = []
        for row in rows:
            if self.end_id in row:
                row = row[: row.index(self.end_id)]
            kept.append(
                [
                    i - self.id_offset
                    for i in row
                    if i not in (self.pad_id, self.start_id)
                ]
            )
        return tf.constant(np.array(self.tokenizer.decode(kept), dtype=object))

    def save_to_preset(self, directory):
        raise NotImplementedError(
            "A checkpoint's tokenizer is kept in its checkpoint directory "
            "(tokenizer.json / tokenizer.model), not in a keras-attn preset. "
            f"Received: directory={str(directory)!r}"
        )

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "pad_id": self.pad_id,
            "start_id": self.start_id,
            "end_id": self.end_id,
            "id_offset": self.id_offset,
        }

    def __repr__(self):
        return (
            f"CheckpointTokenizer(vocabulary_size={self.vocabulary_size}, "
            f"start_id={self.start_id}, end_id={self.end_id}, pad_id={self.pad_id})"
        )
