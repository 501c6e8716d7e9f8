"""Subword regularization: n-best segmentations and their per-epoch draw.

References: the unigram model's definition (a segmentation's score is the
sum of its pieces' log-probabilities, read from the model with
`sentencepiece`), NumPy's softmax for the sampling distribution, and the
pipeline without sampling.
"""

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_attn.text import (
    EpochSeededShuffle,
    SubwordTokenizer,
    load_multi30k,
    make_translation_dataset,
)
from keras_attn.text.subword_sampling import (
    sample_segmentations,
    segmentation_candidates,
)

# TensorFlow and SentencePiece code (`tf.data`, ragged tensors) whatever
# the Keras backend: one backend runs it when they run side by side.
pytestmark = pytest.mark.split_backend("torch")

BUDGET = 256


@pytest.fixture(scope="module")
def corpus():
    sources, targets = load_multi30k("train")
    return sources[:200], targets[:200]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    sources, targets = corpus
    return SubwordTokenizer.train(sources + targets, vocabulary_size=300)


def _ids(dataset):
    return [inputs["encoder_tokens"].numpy() for inputs, _ in dataset]


def _texts(dataset, tokenizer, key):
    texts = []
    for inputs, labels in dataset:
        ids = inputs["encoder_tokens"] if key == "source" else labels
        texts += [t.decode() for t in tokenizer.detokenize(ids).numpy() if t]
    return texts


def test_nbest_candidates_are_the_unigram_models_best(tokenizer, corpus):
    sentences = corpus[0][:20] + corpus[1][:20]
    ids, scores = tokenizer.nbest_tokenize(sentences, nbest_size=6)
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    best = tokenizer.tokenize(sentences)
    for row, sentence in enumerate(sentences):
        candidates = ids[row].to_list()
        row_scores = scores[row].numpy()
        assert 1 <= len(candidates) <= 6
        assert candidates[0] == best[row].numpy().tolist()
        assert len({tuple(c) for c in candidates}) == len(candidates)
        assert np.all(np.diff(row_scores) <= 1e-4)  # best first
        for candidate, score in zip(candidates, row_scores):
            # A segmentation's log-probability: the sum of its pieces'.
            expected = sum(processor.get_score(i) for i in candidate)
            np.testing.assert_allclose(score, expected, rtol=1e-4, atol=1e-3)
        texts = tokenizer.detokenize(ids[row]).numpy().tolist()
        assert texts == [sentence.encode()] * len(candidates)
    assert max(ids.row_lengths().numpy()) == 6


def test_nbest_of_the_empty_string_is_one_empty_segmentation(tokenizer):
    ids, scores = tokenizer.nbest_tokenize(["", "A dog."], nbest_size=3)
    assert ids[0].to_list() == [[]]
    assert scores[0].numpy().tolist() == [0.0]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(strings="A dog.", nbest_size=2), TypeError, "strings"),
        (dict(strings=["A dog."], nbest_size=0), ValueError, "nbest_size=0"),
        (dict(strings=["A dog."], nbest_size=2.5), TypeError, "nbest_size"),
    ],
)
def test_nbest_validates_arguments(tokenizer, kwargs, error, match):
    with pytest.raises(error, match=match):
        tokenizer.nbest_tokenize(**kwargs)


def test_nbest_refuses_bpe(corpus):
    bpe = SubwordTokenizer.train(corpus[0], vocabulary_size=200, model_type="bpe")
    with pytest.raises(ValueError, match="model_type='bpe'"):
        bpe.nbest_tokenize(["A dog."], nbest_size=2)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5])
def test_draws_follow_the_smoothed_unigram_distribution(tokenizer, alpha):
    sentence = "Two young, White males are outside near many bushes."
    rows = 4000
    # The same sentence in every row: the draw frequencies estimate P.
    ids, scores = tokenizer.nbest_tokenize([sentence] * rows, nbest_size=5)
    drawn = sample_segmentations(ids, scores, alpha, seed=tf.constant([7, 0]))
    candidates = [tuple(c) for c in ids[0].to_list()]
    counts = np.zeros(len(candidates))
    for row in drawn.to_list():
        counts[candidates.index(tuple(row))] += 1
    logits = alpha * scores[0].numpy()
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    np.testing.assert_allclose(counts / rows, expected, atol=0.03)


def test_candidates_longer_than_the_limit_are_left_out(tokenizer):
    sentence = "Two young, White males are outside near many bushes."
    best = len(tokenizer.tokenize(sentence))
    ids, scores = segmentation_candidates(tokenizer, [sentence], 8, best)
    lengths = ids.values.row_lengths().numpy()
    assert lengths.max() <= best and len(lengths) >= 2
    assert ids.row_lengths().numpy().tolist() == [scores[0].shape[0]]
    # The best one stays whole when it fits, truncated when it does not.
    assert ids[0][0].numpy().tolist() == tokenizer.tokenize(sentence).numpy().tolist()
    short, _ = segmentation_candidates(tokenizer, [sentence], 8, 3)
    assert short.to_list() == [[tokenizer.tokenize(sentence).numpy()[:3].tolist()]]


def _sampled_dataset(corpus, tokenizer, shuffle, **kwargs):
    return make_translation_dataset(
        *corpus,
        tokenizer,
        max_tokens_per_batch=BUDGET,
        shuffle_epoch=shuffle,
        **{"subword_nbest_size": 8, **kwargs},
    )


def test_each_epoch_draws_its_own_segmentations_reproducibly(corpus, tokenizer):
    shuffle = EpochSeededShuffle()
    dataset = _sampled_dataset(corpus, tokenizer, shuffle)
    plain = make_translation_dataset(
        *corpus, tokenizer, max_tokens_per_batch=BUDGET, shuffle_epoch=shuffle
    )
    first = _ids(dataset)
    assert len(first) == int(dataset.cardinality()) == int(plain.cardinality())
    # A new dataset (a resumed run) at the same epoch: the same batches.
    again = _ids(_sampled_dataset(corpus, tokenizer, shuffle))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    shuffle.epoch.assign(1)
    second = _ids(dataset)
    shuffle.epoch.assign(0)
    assert len(second) == len(first)
    assert not all(
        a.shape == b.shape and np.array_equal(a, b) for a, b in zip(first, second)
    )
    # Sampling changes segmentations, not sentences: different ids, same text
    # (up to SentencePiece's normalization, which collapses runs of spaces).
    for key, sentences in (("source", corpus[0]), ("target", corpus[1])):
        texts = _texts(dataset, tokenizer, key)
        sentences = [" ".join(s.split()) for s in sentences]
        assert set(texts) <= set(sentences)
        assert len(set(texts)) >= 0.9 * len(sentences)
    plain_ids = {tuple(row[row > 0]) for batch in _ids(plain) for row in batch}
    sampled_ids = {tuple(row[row > 0]) for batch in first for row in batch}
    assert len(sampled_ids - plain_ids) > 0.3 * len(corpus[0])
    for batch in first:
        assert batch.shape[0] * batch.shape[1] <= BUDGET


def test_a_large_alpha_gives_the_best_segmentations(corpus, tokenizer):
    shuffle = EpochSeededShuffle()
    sharp = _sampled_dataset(corpus, tokenizer, shuffle, subword_alpha=1e6)
    plain = make_translation_dataset(
        *corpus, tokenizer, max_tokens_per_batch=BUDGET, shuffle_epoch=shuffle
    )
    for a, b in zip(_ids(sharp), _ids(plain), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(subword_nbest_size=0), ValueError, "subword_nbest_size=0"),
        (dict(subword_nbest_size="8"), TypeError, "subword_nbest_size"),
        (dict(subword_alpha=-0.1), ValueError, "subword_alpha=-0.1"),
        (dict(subword_alpha=float("nan")), ValueError, "subword_alpha"),
    ],
)
def test_sampling_arguments_are_checked(corpus, tokenizer, kwargs, error, match):
    with pytest.raises(error, match=match):
        _sampled_dataset(corpus, tokenizer, EpochSeededShuffle(), **kwargs)


def test_sampling_needs_the_epoch(corpus, tokenizer):
    with pytest.raises(ValueError, match="shuffle_epoch=None"):
        _sampled_dataset(corpus, tokenizer, None)
