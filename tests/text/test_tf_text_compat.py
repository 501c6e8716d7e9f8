"""Fails loudly when tensorflow-text changes what
`keras_attn.text.tf_text_compat` relies on (see that module)."""

import keras
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from keras_attn.text import SubwordTokenizer
from keras_attn.text.tf_text_compat import SharedModelResource, share_model_resource


@pytest.fixture(scope="module")
def model_proto():
    sentences = ["a dog runs", "a cat sleeps", "the dog and the cat"] * 5
    return SubwordTokenizer.train(sentences, vocabulary_size=20).model_proto


def test_the_tokenizer_keeps_its_model_in_a_replaceable_resource(model_proto):
    tokenizer = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
    expected = tokenizer.tokenize(["a dog"]).to_list()
    share_model_resource(tokenizer, model_proto)
    assert isinstance(tokenizer._model_resource, SharedModelResource)
    keras.utils.set_random_seed(1)  # Clears the kernel cache.
    assert tokenizer.tokenize(["a dog"]).to_list() == expected
