"""Task objects shared between threads give what calls one at a time give.

Every test starts its threads together (a `threading.Barrier`) on a task
object that has not compiled yet, so the first, compiling calls race too.
On JAX, before `keras_attn.thread_safety`, every one of these failed with
"Buffer has been deleted or donated" (Keras's JAX predict donates the
variables' buffers to its compiled function).
"""

import concurrent.futures
import threading

import keras
import numpy as np
import pytest

from keras_attn.generation import SequenceGenerator, TopKSampler
from keras_attn.models import (
    Transformer,
    TransformerEncoderClassifier,
    TransformerLM,
)
from keras_attn.text import (
    SubwordTokenizer,
    TextClassifier,
    TextGenerator,
    Translator,
    load_multi30k,
)
from keras_attn.thread_safety import model_lock, predict_lock

THREADS, CALLS = 4, 3
# The models have one layer: sharing is the point, and every layer is more
# to compile.
# One list of texts per thread, each a different batch of the same shape
# (two texts to decode, at most 15 pieces: one compiled program).
TEXTS = [
    ["A dog runs.", "Two men are talking."],
    ["A woman rides a bike.", "", "A cat."],
    ["Children play.", "A man sings."],
    ["People walk.", "A dog"],
]
PROMPTS = [["A dog", "Two men"], ["A man", ""], ["The girl", "Two"], ["People", "A"]]


@pytest.fixture(scope="module")
def tokenizer():
    captions, _ = load_multi30k("val")
    return SubwordTokenizer.train(captions[:200], 120)


def run_together(call, arguments):
    """`call(argument)` `CALLS` times in each of `len(arguments)` threads.

    The threads start their first calls together. Returns each thread's
    results, in call order; an exception in any thread is raised here.
    """
    barrier = threading.Barrier(len(arguments), timeout=300)

    def work(argument):
        barrier.wait()
        return [call(argument) for _ in range(CALLS)]

    with concurrent.futures.ThreadPoolExecutor(len(arguments)) as pool:
        futures = [pool.submit(work, argument) for argument in arguments]
        return [future.result() for future in futures]


def test_threads_sharing_a_translator_get_the_sequential_translations(tokenizer):
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=tokenizer.vocabulary_size, num_layers=1
    )
    translator = Translator(
        model, tokenizer, strategy="greedy", max_length=6, length_multiple=16
    )
    results = run_together(translator.translate, TEXTS)
    expected = [translator.translate(texts) for texts in TEXTS]
    assert results == [[texts] * CALLS for texts in expected]
    assert all(len(texts) == len(given) for texts, given in zip(expected, TEXTS))


def test_threads_sharing_a_text_generator_get_the_sequential_texts(tokenizer):
    # Two `max_length`s: two generators over one model, made while the
    # threads ask for them, run at once.
    keras.utils.set_random_seed(0)
    model = TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, num_layers=1
    )
    generator = TextGenerator(model, tokenizer, max_length=10)
    arguments = [(texts, 10 + 2 * (i % 2)) for i, texts in enumerate(PROMPTS)]
    results = run_together(lambda argument: generator.generate(*argument), arguments)
    expected = [generator.generate(*argument) for argument in arguments]
    assert results == [[texts] * CALLS for texts in expected]
    assert len(generator._generators) == 2


def test_threads_sharing_a_seeded_sampler_get_each_draw_once(tokenizer):
    # A random sampler advances its seed state at every call: the threads'
    # calls get the draws of sequential calls, each once, in some order.
    keras.utils.set_random_seed(0)
    model = TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, num_layers=1
    )
    prompts = ["A dog", "Two men"]
    sampler = TopKSampler(k=10, temperature=1.5, seed=5)

    def texts_of_calls(generator, calls):
        return sorted(str(generator.generate(prompts)) for _ in range(calls))

    shared = TextGenerator(model, tokenizer, sampler=sampler, max_length=10)
    results = run_together(lambda _: str(shared.generate(prompts)), [None] * THREADS)
    alone = TextGenerator(model, tokenizer, sampler=sampler, max_length=10)
    expected = texts_of_calls(alone, THREADS * CALLS)
    assert sorted(text for thread in results for text in thread) == expected


def test_threads_sharing_a_classifier_get_the_sequential_probabilities(tokenizer):
    keras.utils.set_random_seed(0)
    model = TransformerEncoderClassifier.from_preset(
        "encoder_classifier_tiny",
        vocabulary_size=tokenizer.vocabulary_size,
        num_classes=3,
        num_layers=1,
    )
    classifier = TextClassifier(model, tokenizer, sequence_length=8)
    results = run_together(classifier.predict_proba, TEXTS)
    for texts, thread in zip(TEXTS, results):
        expected = classifier.predict_proba(texts)
        assert expected.shape == (len(texts), 3)
        for probabilities in thread:
            np.testing.assert_array_equal(probabilities, expected)


def test_two_generators_over_one_model_run_in_threads():
    # Beam and greedy generators share the model's variables: on JAX each
    # donated them under the other's feet.
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=24, num_layers=1
    )
    generators = [
        SequenceGenerator(model, "greedy", max_length=5),
        SequenceGenerator(model, "beam", beam_size=2, max_length=5),
    ]
    source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], "int32")
    results = run_together(
        lambda generator: generator.generate(source)["tokens"], generators * 2
    )
    for generator, thread in zip(generators * 2, results):
        expected = generator.generate(source)["tokens"]
        for tokens in thread:
            np.testing.assert_array_equal(tokens, expected)


def test_one_lock_per_model_held_where_the_backend_needs_it():
    first, second = (keras.Sequential([keras.layers.Dense(1)]) for _ in range(2))
    assert model_lock(first) is model_lock(first)
    assert model_lock(first) is not model_lock(second)
    # A call that advances a state is serialized on every backend; a
    # read-only one on JAX only (Keras's JAX predict donates the buffers).
    assert predict_lock(first, advances_state=True) is model_lock(first)
    read_only = predict_lock(first)
    if keras.backend.backend() == "jax":
        assert read_only is model_lock(first)
    else:
        assert read_only is not model_lock(first)
        with read_only:
            pass
