"""Text input and text tasks: Multi30k, a SentencePiece tokenizer, tf.data, BLEU,
and the task objects that map strings to strings or labels (`Translator`,
`TextGenerator`, `TextClassifier`).

This subpackage needs TensorFlow, tensorflow-text, sentencepiece and sacrebleu
(`pip install keras-attn[text]`) on every Keras backend: `tf.data` feeds
`model.fit` on JAX too.
"""

from keras_attn.text.batch_repeat import repeat_batches
from keras_attn.text.bleu import BleuReport, corpus_bleu
from keras_attn.text.epoch_seeded_shuffle import EpochSeededShuffle
from keras_attn.text.minimum_bayes_risk import minimum_bayes_risk
from keras_attn.text.parallel_corpus import (
    MULTI30K_DIR,
    load_multi30k,
    load_parallel_corpus,
    read_lines,
)
from keras_attn.text.pipeline import (
    make_padded_dataset,
    make_translation_dataset,
    padding_statistics,
)
from keras_attn.text.text_classifier import TextClassifier
from keras_attn.text.text_generator import TextGenerator
from keras_attn.text.tokenizer import SubwordTokenizer
from keras_attn.text.translator import Translator

__all__ = [
    "MULTI30K_DIR",
    "BleuReport",
    "EpochSeededShuffle",
    "SubwordTokenizer",
    "TextClassifier",
    "TextGenerator",
    "Translator",
    "corpus_bleu",
    "load_multi30k",
    "load_parallel_corpus",
    "make_padded_dataset",
    "make_translation_dataset",
    "minimum_bayes_risk",
    "padding_statistics",
    "read_lines",
    "repeat_batches",
]
