"""Hostile arguments to the text API (tokenizer training, pipelines, the
text tasks): refused with TypeError/ValueError naming the argument the user
passed, never another exception, before any work is done."""

import math

import pytest
from hostile_values import (
    BOOLEANS,
    NOT_A_BOOL,
    NOT_A_NUMBER,
    NOT_A_POSITIVE_INT,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given
from hypothesis import strategies as st

import keras_attn
from keras_attn.text import (
    SubwordTokenizer,
    TextClassifier,
    TextGenerator,
    Translator,
    corpus_bleu,
    make_padded_dataset,
    make_translation_dataset,
)

# Arguments checked before any work, by code that is the same on every
# backend: side by side it runs on torch only (`split_backend`).
pytestmark = pytest.mark.split_backend("torch")

SENTENCES = [
    "a dog runs in the park",
    "two cats sleep on a red sofa",
    "the man rides a bike down the street",
    "children play football on the grass",
] * 4
NOT_A_SEED = st.one_of(
    NOT_A_NUMBER.filter(lambda x: x is not None),
    BOOLEANS,
    st.integers(max_value=-1),
    st.integers(min_value=2**32),
    st.just(1.5),
)
# Not a length of at least 2 (one piece and the start or end id).
NOT_A_LENGTH = st.one_of(NOT_A_POSITIVE_INT, st.just(1))
NOT_A_STRING_LIST = st.one_of(
    st.text(max_size=5),
    st.sampled_from([None, 3, b"a dog", ["a dog", 3], ["a dog", None], [b"x"]]),
)


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(SENTENCES, vocabulary_size=30)


@pytest.fixture(scope="module")
def models(tokenizer):
    size = tokenizer.vocabulary_size
    return {
        Translator: keras_attn.models.Transformer.from_preset(
            "transformer_tiny", vocabulary_size=size
        ),
        TextGenerator: keras_attn.models.TransformerLM.from_preset(
            "lm_tiny", vocabulary_size=size
        ),
        TextClassifier: keras_attn.models.TransformerEncoderClassifier.from_preset(
            "encoder_classifier_tiny", vocabulary_size=size, num_classes=2
        ),
    }


TRAIN_ARGUMENTS = [
    ("vocabulary_size", st.one_of(NOT_A_POSITIVE_INT, st.integers(1, 4))),
    ("model_type", st.one_of(NOT_A_NUMBER, st.just("wordpiece"))),
    (
        "character_coverage",
        st.one_of(
            NOT_A_NUMBER,
            BOOLEANS,
            st.sampled_from([0.0, -1.0, 1.5, math.nan, math.inf]),
        ),
    ),
    ("seed", NOT_A_SEED),
]


@PROPERTY_SETTINGS
@given(data=st.data(), case=st.sampled_from(TRAIN_ARGUMENTS))
def test_tokenizer_training_arguments_are_refused_by_name(data, case):
    name, values = case
    with pytest.raises((TypeError, ValueError)) as info:
        SubwordTokenizer.train(SENTENCES, **{name: data.draw(values)})
    assert_names_argument(info.value, name)


PIPELINE_ARGUMENTS = [
    (make_translation_dataset, "max_tokens_per_batch", NOT_A_POSITIVE_INT),
    (make_translation_dataset, "max_length", NOT_A_LENGTH),
    (make_translation_dataset, "seed", NOT_A_SEED),
    (make_translation_dataset, "shuffle", NOT_A_BOOL),
    (make_translation_dataset, "repeat", NOT_A_BOOL),
    (make_translation_dataset, "pad_remainder", NOT_A_BOOL),
    (
        make_translation_dataset,
        "bucket_boundaries",
        st.one_of(
            st.sampled_from([3, "8,16", [], [16, 8]]),
            st.lists(NOT_A_POSITIVE_INT, min_size=1, max_size=2),
        ),
    ),
    (make_padded_dataset, "sequence_length", NOT_A_LENGTH),
    (make_padded_dataset, "batch_size", NOT_A_POSITIVE_INT),
    (make_padded_dataset, "shuffle", NOT_A_BOOL),
]


@PROPERTY_SETTINGS
@given(data=st.data(), case=st.sampled_from(PIPELINE_ARGUMENTS))
def test_pipeline_arguments_are_refused_by_name(tokenizer, data, case):
    make, name, values = case
    with pytest.raises((TypeError, ValueError)) as info:
        make(SENTENCES, SENTENCES, tokenizer, **{name: data.draw(values)})
    assert_names_argument(info.value, name)


TASK_ARGUMENTS = [
    (Translator, "batch_size", NOT_A_POSITIVE_INT),
    (Translator, "length_multiple", NOT_A_POSITIVE_INT),
    (Translator, "max_source_length", NOT_A_LENGTH.filter(lambda x: x is not None)),
    (TextGenerator, "batch_size", NOT_A_POSITIVE_INT),
    (TextGenerator, "length_multiple", NOT_A_POSITIVE_INT),
    (
        TextGenerator,
        "max_length",
        st.one_of(NOT_A_LENGTH.filter(lambda x: x is not None), st.just(10_000)),
    ),
    (TextClassifier, "batch_size", NOT_A_POSITIVE_INT),
    (
        TextClassifier,
        "class_names",
        st.sampled_from(["ab", [1, 2], ["a"], 3, [b"a", b"b"]]),
    ),
    (
        TextClassifier,
        "sequence_length",
        st.one_of(NOT_A_LENGTH.filter(lambda x: x is not None), st.just(10_000)),
    ),
]


@PROPERTY_SETTINGS
@given(data=st.data(), case=st.sampled_from(TASK_ARGUMENTS))
def test_task_arguments_are_refused_by_name(tokenizer, models, data, case):
    task, name, values = case
    with pytest.raises((TypeError, ValueError)) as info:
        task(models[task], tokenizer, **{name: data.draw(values)})
    assert_names_argument(info.value, name)


@PROPERTY_SETTINGS
@given(
    texts=NOT_A_STRING_LIST,
    entry=st.sampled_from(["translate", "generate", "classify", "bleu", "pipeline"]),
)
def test_sentence_lists_are_refused_by_name(tokenizer, models, texts, entry):
    calls = {
        "translate": (
            "sentences",
            lambda: Translator(models[Translator], tokenizer).translate(texts),
        ),
        "generate": (
            "prompts",
            lambda: TextGenerator(models[TextGenerator], tokenizer).generate(texts),
        ),
        "classify": (
            "texts",
            lambda: TextClassifier(models[TextClassifier], tokenizer).predict(texts),
        ),
        "bleu": ("hypotheses", lambda: corpus_bleu(texts, ["a dog"])),
        "pipeline": (
            "sources",
            lambda: make_padded_dataset(texts, ["a dog"], tokenizer),
        ),
    }
    name, call = calls[entry]
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert_names_argument(info.value, name)
