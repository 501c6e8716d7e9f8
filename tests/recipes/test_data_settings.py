"""The recipe's data settings: `subword_nbest_size` samples training data
only; `bucket_lengths` sets the padded lengths of the training batches;
`r_drop_alpha` repeats every batch and switches the loss to `RDropLoss`."""

import numpy as np
import pytest

from keras_attn.text import EpochSeededShuffle, SubwordTokenizer, load_multi30k
from keras_attn.training import MaskedSparseCategoricalCrossentropy, RDropLoss
from keras_attn_recipes import translation_config
from keras_attn_recipes.translation_config import SETTINGS
from keras_attn_recipes.translation_steps import (
    _bucket_batch_sizes,
    _loss,
    _translation_datasets,
)

pytestmark = [
    # The tiny setting's 300-piece vocabulary truncates a few pairs (and
    # says so).
    pytest.mark.filterwarnings("ignore:.*truncated to max_length"),
    # tf.data pipelines and a SentencePiece tokenizer: the same code on
    # every backend. When the backends run side by side, one runs this file
    # (tests/conftest.py): torch, whose suite finishes first.
    pytest.mark.split_backend("torch"),
]


@pytest.fixture(scope="module")
def val_split():
    """Multi30k's validation pairs, and a 300-piece tokenizer trained on them
    (read-only for the tests: each builds its own datasets)."""
    sources, targets = load_multi30k("val")
    tokenizer = SubwordTokenizer.train(sources + targets, vocabulary_size=300)
    return sources, targets, tokenizer


def _batches(dataset):
    return [(x["encoder_tokens"].numpy(), y.numpy()) for x, y in dataset]


def _same(first, second):
    return len(first) == len(second) and all(
        a.shape == b.shape and np.array_equal(a, b)
        for pair_a, pair_b in zip(first, second)
        for a, b in zip(pair_a, pair_b)
    )


def test_training_batches_are_sampled_and_validation_is_not(val_split):
    sources, targets, tokenizer = val_split
    train_pairs = (sources[:150], targets[:150])
    val_pairs = (sources[150:200], targets[150:200])
    plain = SETTINGS["tiny"]
    sampled = plain.replace(subword_nbest_size=8, subword_alpha=0.1)
    datasets = {
        name: _translation_datasets(
            config, tokenizer, train_pairs, val_pairs, EpochSeededShuffle()
        )
        for name, config in (("plain", plain), ("sampled", sampled))
    }
    plain_train, plain_val = (_batches(d) for d in datasets["plain"])
    sampled_train, sampled_val = (_batches(d) for d in datasets["sampled"])
    assert len(sampled_train) == len(plain_train)
    assert not _same(sampled_train, plain_train)
    assert _same(sampled_val, plain_val)


def test_default_bucket_lengths_are_the_pipelines(monkeypatch):
    from keras_attn.text import pipeline

    # One home: the recipe reads the pipeline's constant, keeps no copy.
    assert not hasattr(translation_config, "DEFAULT_BUCKET_LENGTHS")
    assert SETTINGS["tiny"].bucket_boundaries() == [
        *[n for n in pipeline.DEFAULT_BUCKET_LENGTHS if n < 64],
        64,
    ]
    monkeypatch.setattr(pipeline, "DEFAULT_BUCKET_LENGTHS", (10, 20, 100))
    assert SETTINGS["tiny"].bucket_boundaries() == [10, 20, 64]


def test_bucket_lengths_set_the_training_batch_shapes(val_split):
    sources, targets, tokenizer = val_split
    pairs = (sources[:200], targets[:200])
    config = SETTINGS["tiny"].replace(bucket_lengths=[6, 9, 14, 20, 30, 200])
    assert config.bucket_boundaries() == [6, 9, 14, 20, 30, 64]
    assert _bucket_batch_sizes(config) == [512 // n for n in (6, 9, 14, 20, 30, 64)]
    train, _ = _translation_datasets(
        config, tokenizer, pairs, pairs, EpochSeededShuffle()
    )
    shapes = {tuple(labels.shape) for _, labels in _batches(train)}
    assert {length for _, length in shapes} <= {6, 9, 14, 20, 30, 64}
    assert {512 // length for _, length in shapes} == {rows for rows, _ in shapes}


def test_r_drop_repeats_every_batch_and_uses_its_loss(val_split):
    sources, targets, tokenizer = val_split
    pairs = (sources[:120], targets[:120])
    plain = SETTINGS["tiny"]
    r_drop = plain.replace(r_drop_alpha=5.0)
    plain_data, r_drop_data = (
        [
            _batches(dataset)
            for dataset in _translation_datasets(
                config, tokenizer, pairs, pairs, EpochSeededShuffle()
            )
        ]
        for config in (plain, r_drop)
    )
    for plain_batches, r_drop_batches in zip(plain_data, r_drop_data):  # train, val
        doubled = [
            tuple(np.concatenate([part, part]) for part in batch)
            for batch in plain_batches
        ]
        assert _same(r_drop_batches, doubled)
    assert type(_loss(plain, 0)) is MaskedSparseCategoricalCrossentropy
    loss = _loss(r_drop, 0)
    assert isinstance(loss, RDropLoss) and loss.alpha == 5.0
    assert loss.label_smoothing == r_drop.label_smoothing
