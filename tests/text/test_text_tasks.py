"""`TextGenerator` and `TextClassifier`: strings in, strings or labels out."""

import re

import keras
import numpy as np
import pytest

from keras_attn.generation import BeamSampler, TopKSampler, generate_lm
from keras_attn.models import TransformerEncoderClassifier, TransformerLM
from keras_attn.text import (
    SubwordTokenizer,
    TextClassifier,
    TextGenerator,
    Translator,
    load_multi30k,
)

PROMPTS = ["A dog", "", "Two men are talking in"]
TEXTS = ["A man rides a bike.", "", "Children play football in a park today."]
MAX_LENGTH = 12


@pytest.fixture(scope="module")
def tokenizer():
    captions, _ = load_multi30k("val")
    return SubwordTokenizer.train(captions[:200], 120)


# The models have one layer: the tasks' strings, options and compiled
# loops are the same for any depth, and every layer is more to compile
# (and, for `torch.compile`, to trace).
@pytest.fixture(scope="module")
def lm_preset(tokenizer, tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, num_layers=1
    )
    directory = tmp_path_factory.mktemp("lm_preset")
    model.save_to_preset(directory, tokenizer=tokenizer)
    return directory, model


@pytest.fixture(scope="module")
def seq2seq(tokenizer):
    """A `Transformer` for the tests that build a `Translator` (never
    trained or changed: only the translators differ)."""
    from keras_attn.models import Transformer

    keras.utils.set_random_seed(0)
    return Transformer.from_preset(
        "transformer_tiny", vocabulary_size=tokenizer.vocabulary_size, num_layers=1
    )


def reference_continuations(model, tokenizer, prompts, **options):
    """Eager `generate_lm` on prompts encoded by hand, then detokenized."""
    pieces = tokenizer.tokenize(prompts).to_list()
    width = max(len(p) for p in pieces) + 1
    ids = np.full((len(prompts), width), tokenizer.pad_id, "int32")
    for row, prompt_pieces in enumerate(pieces):
        ids[row, : len(prompt_pieces) + 1] = [tokenizer.start_id, *prompt_pieces]
    out = generate_lm(model, ids, MAX_LENGTH, end_id=tokenizer.end_id, **options)
    texts = tokenizer.detokenize(np.asarray(out["tokens"])).numpy()
    return [text.decode("utf-8") for text in texts]


@pytest.mark.parametrize("sampler", ["greedy", BeamSampler(num_beams=3)])
def test_generate_on_strings_equals_generate_lm(lm_preset, tokenizer, sampler):
    directory, model = lm_preset
    generator = TextGenerator.from_preset(
        directory, sampler=sampler, max_length=MAX_LENGTH
    )
    texts = generator.generate(PROMPTS)
    assert texts == reference_continuations(model, tokenizer, PROMPTS, sampler=sampler)
    assert texts[0].startswith("A dog")


def test_seeded_sampling_on_strings_is_reproducible(lm_preset):
    directory, model = lm_preset
    sampler = TopKSampler(k=10, temperature=1.5, seed=5)
    texts = [
        TextGenerator.from_preset(directory, max_length=MAX_LENGTH).generate(
            PROMPTS, sampler=sampler
        )
        for _ in range(2)
    ]
    assert texts[0] == texts[1]
    assert all(isinstance(text, str) for text in texts[0])


def test_jit_compile_reaches_the_decoding_loop(lm_preset, seq2seq, tokenizer):
    """`jit_compile` compiles the generators (`"auto"`: Keras's default)."""
    directory, model = lm_preset
    for value in (True, False):
        generator = TextGenerator.from_preset(
            directory, max_length=MAX_LENGTH, jit_compile=value
        )
        assert generator._generator(generator.sampler, MAX_LENGTH).jit_compile is value
    translator = Translator(seq2seq, tokenizer, strategy="greedy", jit_compile=False)
    assert translator.generator.jit_compile is False


JIT_COMPILE_ACCEPTED = [
    # (value, what the task keeps)
    ("auto", "auto"),
    (True, True),
    (False, False),
    (np.True_, True),
    (np.False_, False),
]
JIT_COMPILE_REFUSED = [
    # (value, error, how the message shows it)
    ("yes", ValueError, "jit_compile='yes' of type str"),
    ("AUTO", ValueError, "jit_compile='AUTO' of type str"),
    (1, TypeError, "jit_compile=1 of type int"),
    (None, TypeError, "jit_compile=None of type NoneType"),
    # Compared with "auto" elementwise, these said "truth value ambiguous".
    (np.array([True, False]), TypeError, r"jit_compile=array\(\[ True, False\]\)"),
    (
        np.array(["auto", "x"]),
        TypeError,
        r"jit_compile=array\(\['auto', 'x'\].* of type ndarray",
    ),
    (np.array(True), TypeError, r"jit_compile=array\(True\) of type ndarray"),
]


@pytest.mark.parametrize("value, kept", JIT_COMPILE_ACCEPTED)
def test_jit_compile_accepts_auto_and_booleans(
    lm_preset, seq2seq, tokenizer, value, kept
):
    _, model = lm_preset
    generator = TextGenerator(
        model, tokenizer, max_length=MAX_LENGTH, jit_compile=value
    )
    # A Python `bool` (or "auto"), whatever boolean was given.
    assert generator.jit_compile is kept
    translator = Translator(seq2seq, tokenizer, strategy="greedy", jit_compile=value)
    if kept != "auto":  # "auto" leaves the generator uncompiled: Keras decides.
        assert translator.generator.jit_compile is kept


@pytest.mark.parametrize("value, error, shown", JIT_COMPILE_REFUSED)
def test_jit_compile_refuses_anything_else_by_name(
    lm_preset, seq2seq, tokenizer, value, error, shown
):
    _, model = lm_preset
    for task in (
        lambda: TextGenerator(model, tokenizer, jit_compile=value),
        lambda: Translator(seq2seq, tokenizer, jit_compile=value),
    ):
        with pytest.raises(error) as info:
            task()
        message = str(info.value)
        assert message.startswith('`jit_compile` must be "auto", True or False. ')
        assert re.search(f"Received: {shown}", message)


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="torch.compile: JAX and TensorFlow compile by default",
)
def test_torch_compiled_generation_on_strings_equals_eager(
    lm_preset, tokenizer, monkeypatch
):
    # `jit_compile=True` on torch: Keras hands the whole decoding loop to
    # `torch.compile`; the strings are those of eager `generate_lm`.
    import torch

    # Dynamo's capture and AOTAutograd's functionalized graph, run without
    # Inductor's C++ code generation, as in
    # tests/generation/test_compiled_step.py. Keras calls `torch.compile`
    # itself: the backend is set where Keras looks the function up.
    compile_calls = []
    torch_compile = torch.compile

    def compile_with_aot_eager(*args, **kwargs):
        compile_calls.append(kwargs.get("backend", "inductor"))
        return torch_compile(*args, **dict(kwargs, backend="aot_eager"))

    monkeypatch.setattr(torch, "compile", compile_with_aot_eager)
    directory, model = lm_preset
    generator = TextGenerator.from_preset(
        directory, max_length=MAX_LENGTH, jit_compile=True
    )
    texts = generator.generate(PROMPTS)
    assert compile_calls == ["inductor"]  # Keras's predict step, once
    assert texts == reference_continuations(model, tokenizer, PROMPTS)


def test_generator_bad_input_names_the_argument(lm_preset, tokenizer):
    _, model = lm_preset
    generator = TextGenerator(model, tokenizer, max_length=MAX_LENGTH)
    with pytest.raises(TypeError, match="prompts"):
        generator.generate("A dog")
    with pytest.raises(ValueError, match="max_length=12"):
        generator.generate(["word " * 30])
    with pytest.raises(ValueError, match="max_length=1000"):
        TextGenerator(model, tokenizer, max_length=1000)
    assert generator.generate([]) == []


@pytest.fixture(scope="module")
def classifier_preset(tokenizer, tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = TransformerEncoderClassifier.from_preset(
        "encoder_classifier_tiny",
        vocabulary_size=tokenizer.vocabulary_size,
        num_classes=3,
        pooling="mean",
        num_layers=1,
    )
    directory = tmp_path_factory.mktemp("classifier_preset")
    model.save_to_preset(
        directory,
        tokenizer=tokenizer,
        metadata={"class_names": ["a", "b", "c"], "sequence_length": 16},
    )
    return directory, model


def test_predict_on_strings_equals_the_model_on_ids(classifier_preset, tokenizer):
    directory, model = classifier_preset
    classifier = TextClassifier.from_preset(directory)
    assert classifier.sequence_length == 16
    ids = np.full((len(TEXTS), 16), tokenizer.pad_id, "int32")
    for row, pieces in enumerate(tokenizer.tokenize(TEXTS).to_list()):
        sequence = [tokenizer.start_id, *pieces][:16]
        ids[row, : len(sequence)] = sequence
    logits = keras.ops.convert_to_numpy(model(ids)).astype("float64")
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(classifier.predict_proba(TEXTS), expected, atol=1e-5)
    names = ["a", "b", "c"]
    assert classifier.predict(TEXTS) == [names[i] for i in expected.argmax(-1)]
    unnamed = TextClassifier(model, tokenizer, sequence_length=16)
    assert unnamed.predict(TEXTS) == [int(i) for i in expected.argmax(-1)]


def test_classifier_bad_input_names_the_argument(classifier_preset, tokenizer):
    _, model = classifier_preset
    with pytest.raises(TypeError, match="texts"):
        TextClassifier(model, tokenizer).predict("one text")
    with pytest.raises(ValueError, match="two segments.*num_segments=None"):
        TextClassifier(model, tokenizer).predict(["a dog"], pairs=["a cat"])
    with pytest.raises(ValueError, match="class_names"):
        TextClassifier(model, tokenizer, class_names=["a", "b"])
    with pytest.raises(ValueError, match="sequence_length=1"):
        TextClassifier(model, tokenizer, sequence_length=1)


# === Round 3: hostile inputs, a second prompt width, long sources ===

HOSTILE_TEXTS = [
    # (value, error, what the message says)
    ({"A dog": 1}, TypeError, "not a mapping"),
    (np.array("A dog"), TypeError, "wrap it in a list"),
    (np.array([["A dog"]]), TypeError, r"shape \(1, 1\)"),
    (
        ["fine", "bad \ud800 text"],
        ValueError,
        r"\[1\]` is not valid Unicode.*'\\ud800'",
    ),
]


@pytest.mark.parametrize("value, error, message", HOSTILE_TEXTS)
def test_text_tasks_refuse_dicts_scalars_and_lone_surrogates(
    lm_preset, classifier_preset, seq2seq, tokenizer, value, error, message
):
    _, lm = lm_preset
    _, classifier = classifier_preset
    translator = Translator(seq2seq, tokenizer, strategy="greedy", max_length=4)
    calls = {
        "sentences": lambda: translator.translate(value),
        "prompts": lambda: TextGenerator(lm, tokenizer, max_length=8).generate(value),
        "texts": lambda: TextClassifier(classifier, tokenizer).predict(value),
    }
    for name, call in calls.items():
        with pytest.raises(error, match=message) as info:
            call()
        assert f"`{name}" in str(info.value)


def test_a_one_dimensional_string_array_is_a_list_of_texts(lm_preset, tokenizer):
    _, model = lm_preset
    generator = TextGenerator(model, tokenizer, max_length=MAX_LENGTH)
    assert generator.generate(np.array(PROMPTS)) == generator.generate(PROMPTS)


def test_second_call_with_a_new_prompt_width_works(lm_preset, tokenizer):
    # TensorFlow retraced the second width as `(batch, None)` and failed.
    # Prompt widths 4 and 12 (4 and 11 ids with the start id).
    _, model = lm_preset
    generator = TextGenerator(model, tokenizer, max_length=16, length_multiple=4)
    short, long = ["A dog"], ["Two men are talking in"]
    expected = {}  # eager `generate_lm`, once per prompt
    for prompts in (short, long, short):
        texts = generator.generate(prompts)
        if prompts[0] not in expected:
            pieces = tokenizer.tokenize(prompts).to_list()
            ids = np.array([[tokenizer.start_id, *pieces[0]]], "int32")
            out = generate_lm(model, ids, 16, end_id=tokenizer.end_id)
            expected[prompts[0]] = [
                text.decode("utf-8")
                for text in tokenizer.detokenize(np.asarray(out["tokens"])).numpy()
            ]
        assert texts == expected[prompts[0]]


def test_translator_sources_longer_than_learned_positions(tokenizer):
    from keras_attn.models import Transformer
    from keras_attn.text import Translator

    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny",
        vocabulary_size=tokenizer.vocabulary_size,
        position="learned",
        max_sequence_length=12,
        num_layers=1,
    )
    with pytest.raises(
        ValueError, match="max_sequence_length=12.*max_source_length=200"
    ):
        Translator(model, tokenizer, max_source_length=200)
    # The default truncates to the learned positions, with a warning, and a
    # source whose bucket (a multiple of 8) passes them stays within them.
    translator = Translator(model, tokenizer, strategy="greedy", max_length=4)
    with pytest.warns(UserWarning, match="1 of 2 sentences are longer than"):
        texts = translator.translate(["word " * 40, "A dog."])
    assert len(texts) == 2


@pytest.mark.parametrize(
    "task, architecture",
    [(Translator, "transformer_tiny"), (TextGenerator, "lm_tiny")],
)
def test_an_architecture_preset_is_no_task_preset(task, architecture):
    # Named as what it is, not listed as known and then refused as unknown.
    with pytest.raises(ValueError, match="is an architecture preset of") as info:
        task.from_preset(architecture)
    assert "multi30k_en_de" in str(info.value)
    assert f"Received: preset={architecture!r}" in str(info.value)
