"""The one place keras-attn reaches into tensorflow-text's internals.

`tensorflow_text.SentencepieceTokenizer` creates its model resource private
to the kernel that made it, and TensorFlow deletes that resource when it
clears its eager kernel cache, which `tf.random.set_seed` and hence
`keras.utils.set_random_seed` do: every later call then fails with
"Resource ..._SentencepieceOp... does not exist". No public argument
names the resource (`FastSentencepieceTokenizer` has no BPE models), so
the tokenizer's resource is replaced by one created with a `shared_name`
(the model's hash, so equal models share it): the op finds it again after
the cache is cleared. The cost: each distinct model stays in memory until
the process ends (about 0.4 MB for 8,000 pieces).

`tests/text/test_tf_text_compat.py` fails loudly if tensorflow-text moves
the op or the attribute.
"""

import hashlib

import tensorflow as tf
from tensorflow_text.python.ops.sentencepiece_tokenizer import (
    gen_sentencepiece_tokenizer,
)


class SharedModelResource(tf.saved_model.experimental.TrackableResource):
    """The SentencePiece model resource, kept in TensorFlow's resource manager."""

    def __init__(self, model_proto):
        super().__init__()
        self._model_proto = model_proto
        digest = hashlib.sha256(model_proto).hexdigest()
        self._shared_name = f"keras_attn_sentencepiece_{digest}"
        _ = self.resource_handle  # Creates the resource now, eagerly.

    def _create_resource(self):
        return gen_sentencepiece_tokenizer.sentencepiece_op(
            model=self._model_proto, shared_name=self._shared_name
        )


def share_model_resource(tokenizer, model_proto):
    """Gives a `tf_text.SentencepieceTokenizer` a resource that survives seeding."""
    if not hasattr(tokenizer, "_model_resource"):
        raise RuntimeError(
            "tensorflow_text.SentencepieceTokenizer no longer keeps its model "
            "in `_model_resource`; see keras_attn/text/tf_text_compat.py."
        )
    tokenizer._model_resource = SharedModelResource(model_proto)
    return tokenizer
