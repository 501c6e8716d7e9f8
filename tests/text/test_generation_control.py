"""Steering `Translator` and `TextGenerator`: processors, prefixes, n-best lists."""

import keras
import pytest

from keras_attn.generation import BeamSampler, NoRepeatNGram, TopKSampler
from keras_attn.models import Transformer, TransformerLM
from keras_attn.text import (
    SubwordTokenizer,
    TextGenerator,
    Translator,
    load_multi30k,
)

SENTENCES = ["A dog runs in the park.", "", "Two men talk."]
MAX_LENGTH = 8


@pytest.fixture(scope="module")
def tokenizer():
    captions, _ = load_multi30k("val")
    return SubwordTokenizer.train(captions[:200], 120)


@pytest.fixture(scope="module")
def translator(tokenizer):
    keras.utils.set_random_seed(0)
    # One layer (and in the language models below): the controls act on
    # the decoding loop whatever the depth; every layer is more to compile.
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=tokenizer.vocabulary_size, num_layers=1
    )
    return Translator(
        model, tokenizer, sampler=BeamSampler(num_beams=3), max_length=MAX_LENGTH
    )


def _generated(ids, tokenizer):
    return [t for t in ids if t not in (tokenizer.pad_id, tokenizer.end_id)]


def test_n_best_is_sorted_and_starts_with_the_best(translator):
    best = translator.translate(SENTENCES)
    best_scored = translator.translate(SENTENCES, return_scores=True)
    n_best = translator.translate(SENTENCES, num_return_sequences=3, return_scores=True)
    assert [text for text, _ in best_scored] == best
    for sentence, one, hypotheses in zip(SENTENCES, best_scored, n_best):
        assert len(hypotheses) == 3
        scores = [score for _, score in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert hypotheses[0] == one
        if sentence:
            assert len({text for text, _ in hypotheses}) > 1  # not one copy
    texts = translator.translate(SENTENCES, num_return_sequences=2)
    assert [row[0] for row in texts] == best
    with pytest.raises(
        ValueError,
        match=r"at most the beam width, 3 .* Received: num_return_sequences=4",
    ):
        translator.translate(SENTENCES, num_return_sequences=4)
    with pytest.raises(ValueError, match="one string per sentence"):
        translator.translate(SENTENCES, prefix=["Ein"])


def test_prefix_is_kept_verbatim_and_processors_apply(translator, tokenizer):
    prefixes = ["A dog", "Two", ""]
    pieces = tokenizer.tokenize(prefixes).to_list()
    texts = translator.translate(SENTENCES, prefix=prefixes)
    ids, _ = translator.translate_ids(SENTENCES, prefix=prefixes)
    for text, prefix, row, prefix_ids in zip(texts, prefixes, ids, pieces):
        assert text.startswith(prefix), (text, prefix)
        assert row[: len(prefix_ids)] == prefix_ids
    # A processor list per call: no piece twice in the generated tokens.
    ids, _ = translator.translate_ids(SENTENCES, processors=[NoRepeatNGram(1)])
    plain, _ = translator.translate_ids(SENTENCES)
    for row in ids:
        row = _generated(row, tokenizer)
        assert len(row) == len(set(row)), row
    assert (
        any(
            len(set(_generated(r, tokenizer))) < len(_generated(r, tokenizer))
            for r in plain
        )
        or ids != plain
    )


def test_text_generator_takes_processors(tokenizer):
    keras.utils.set_random_seed(0)
    model = TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, num_layers=1
    )
    generator = TextGenerator(model, tokenizer, max_length=MAX_LENGTH + 4)
    ids, _ = generator.generate_ids(["A dog"], processors=[NoRepeatNGram(1)])
    row = _generated(ids[0], tokenizer)
    assert len(row) == len(set(row)), row
    with pytest.raises(TypeError, match="`processors` must be a list"):
        generator.generate(["A dog"], processors=NoRepeatNGram(1))


def test_streamed_translation_end_ids_and_raw_scores(translator, tokenizer):
    greedy = Translator(
        translator.model, tokenizer, sampler="greedy", max_length=MAX_LENGTH
    )
    prefixes = ["A dog", "Two", ""]
    expected = greedy.translate(SENTENCES, prefix=prefixes)
    chunks = list(
        greedy.translate(SENTENCES, prefix=prefixes, stream=True, chunk_tokens=3)
    )
    assert all(isinstance(chunk, list) and len(chunk) == 3 for chunk in chunks)
    assert ["".join(parts) for parts in zip(*chunks)] == expected
    with pytest.raises(ValueError, match="not with `num_return_sequences`"):
        greedy.translate(SENTENCES, stream=True, return_scores=True)
    with pytest.raises(ValueError, match="greedy or random sampler"):
        translator.translate(SENTENCES, stream=True)
    # An extra end id: the first generated piece of the first sentence ends it.
    ids, _ = greedy.translate_ids(SENTENCES)
    first = ids[0][0]
    stopped, _ = greedy.translate_ids(SENTENCES, end_ids=[first])
    assert stopped[0][0] == first and set(stopped[0][1:]) <= {tokenizer.pad_id}
    # The raw n-best scores: the same hypotheses, not length-normalized.
    normalized = translator.translate(
        SENTENCES, num_return_sequences=2, return_scores=True
    )
    raw = translator.translate(SENTENCES, num_return_sequences=2, return_scores="raw")
    for sentence, one, other in zip(SENTENCES, normalized, raw):
        assert [text for text, _ in one] == [text for text, _ in other]
        if sentence:
            # lp(y) >= 1 and log-probabilities < 0: raw <= normalized.
            assert all(r <= n + 1e-6 for (_, n), (_, r) in zip(one, other))
            assert any(r < n for (_, n), (_, r) in zip(one, other))
    with pytest.raises(ValueError, match='False, True or "raw"'):
        translator.translate(SENTENCES, return_scores="normalized")


def test_streamed_text_generation_with_stop_strings(tokenizer):
    keras.utils.set_random_seed(0)
    model = TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, num_layers=1
    )
    generator = TextGenerator(
        model, tokenizer, sampler=TopKSampler(k=5, seed=4), max_length=MAX_LENGTH + 6
    )
    prompts = ["A dog", "Two men"]
    controls = dict(stop_sequences=["the", "a"], end_ids=[5])
    expected = TextGenerator(
        model, tokenizer, sampler=TopKSampler(k=5, seed=4), max_length=MAX_LENGTH + 6
    ).generate(prompts, **controls)
    chunks = list(generator.generate(prompts, stream=True, chunk_tokens=4, **controls))
    assert ["".join(parts) for parts in zip(*chunks)] == expected
    assert chunks[0][0].startswith("A dog")
    with pytest.raises(ValueError, match="non-empty strings"):
        generator.generate(prompts, stop_sequences=[""])
