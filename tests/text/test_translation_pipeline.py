import collections
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.text import (
    EpochSeededShuffle,
    SubwordTokenizer,
    load_multi30k,
    make_padded_dataset,
    make_translation_dataset,
    padding_statistics,
)

BUDGET = 256
BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128)
# The pipeline is `tf.data` whatever the Keras backend: one backend runs its
# tests when they run side by side, all but the one that trains a model.
tf_data_only = pytest.mark.split_backend("torch")


@pytest.fixture(scope="module")
def corpus():
    sources, targets = load_multi30k("train")
    return sources[:300], targets[:300]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    sources, targets = corpus
    return SubwordTokenizer.train(sources + targets, vocabulary_size=300)


@pytest.fixture(scope="module")
def two_epochs(corpus, tokenizer):
    """Two epochs of the default bucketed dataset, as NumPy batches."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Nothing is truncated at max_length=128.
        dataset = make_translation_dataset(
            *corpus, tokenizer, max_tokens_per_batch=BUDGET
        )
    return dataset, _batches(dataset), _batches(dataset)


def _batches(dataset):
    return [
        (x["encoder_tokens"].numpy(), x["decoder_tokens"].numpy(), y.numpy())
        for x, y in dataset
    ]


def _pairs(batches, tokenizer):
    """The (source, target) text of every non-empty row, from encoder and labels."""
    pairs = []
    for encoder_tokens, _, labels in batches:
        for source, target in zip(
            tokenizer.detokenize(encoder_tokens).numpy(),
            tokenizer.detokenize(labels).numpy(),
        ):
            pairs.append((source.decode(), target.decode()))
    return pairs


def _expected_pairs(corpus, tokenizer):
    # What the tokenizer reproduces: SentencePiece normalizes e.g. "  " to " ".
    sources, targets = corpus
    round_trip = [
        [s.decode() for s in tokenizer.detokenize(tokenizer.tokenize(list(x))).numpy()]
        for x in (sources, targets)
    ]
    return collections.Counter(zip(*round_trip))


@tf_data_only
def test_batches_respect_budget_and_bucket_shapes(two_epochs):
    dataset, batches, _ = two_epochs
    spec = dataset.element_spec
    assert set(spec[0]) == {"encoder_tokens", "decoder_tokens"}
    assert spec[1].dtype == tf.int32
    for encoder_tokens, decoder_tokens, labels in batches:
        batch, length = labels.shape
        assert encoder_tokens.shape == decoder_tokens.shape == (batch, length)
        assert length in BUCKETS
        assert batch * length <= BUDGET
        assert encoder_tokens.dtype == labels.dtype == np.int32
        # Bucketed: the longest row fills more than the next smaller bucket.
        real = np.maximum((encoder_tokens != 0).sum(1), (labels != 0).sum(1))
        smaller = [b for b in BUCKETS if b < length]
        assert real.max() > (smaller[-1] if smaller else 0)


@tf_data_only
def test_teacher_forcing_layout(two_epochs, tokenizer):
    for encoder_tokens, decoder_tokens, labels in two_epochs[1][:4]:
        for source, decoder_row, label_row in zip(
            encoder_tokens, decoder_tokens, labels
        ):
            source = source[source != 0]
            decoder_row, label_row = (
                decoder_row[decoder_row != 0],
                label_row[label_row != 0],
            )
            assert source[-1] == tokenizer.end_id
            assert decoder_row[0] == tokenizer.start_id
            assert label_row[-1] == tokenizer.end_id
            # Decoder input is the labels shifted right by one, after [start].
            np.testing.assert_array_equal(decoder_row[1:], label_row[:-1])
            assert tokenizer.end_id not in decoder_row


@tf_data_only
def test_every_pair_once_per_epoch(two_epochs, corpus, tokenizer):
    first = _pairs(two_epochs[1], tokenizer)
    second = _pairs(two_epochs[2], tokenizer)
    expected = _expected_pairs(corpus, tokenizer)
    assert collections.Counter(first) == collections.Counter(second) == expected
    assert first != second  # Reshuffled for the second epoch.


@tf_data_only
def test_seed_makes_order_reproducible(corpus, tokenizer):
    def order(seed):
        dataset = make_translation_dataset(
            *corpus, tokenizer, max_tokens_per_batch=BUDGET, seed=seed
        )
        return [labels.tolist() for _, _, labels in _batches(dataset)]

    first = order(7)
    assert first == order(7)
    assert first != order(8)


@tf_data_only
def test_cardinality_is_the_number_of_batches(two_epochs):
    dataset, first, _ = two_epochs
    assert int(dataset.cardinality()) == len(first)


@tf_data_only
def test_epoch_seeded_order_depends_on_seed_and_epoch_only(corpus, tokenizer):
    def dataset(callback):
        return make_translation_dataset(
            *corpus,
            tokenizer,
            max_tokens_per_batch=BUDGET,
            seed=5,
            pad_remainder=True,
            shuffle_epoch=callback,
        )

    def labels_of(data):
        return [labels.tolist() for _, _, labels in _batches(data)]

    callback = EpochSeededShuffle()
    running = dataset(callback)
    epochs = []
    for epoch in range(3):
        callback.on_epoch_begin(epoch)
        epochs.append(labels_of(running))
    assert epochs[0] != epochs[1] != epochs[2]
    assert int(running.cardinality()) == len(epochs[0]) == len(epochs[1])
    # A new process resumed at epoch 2: a new dataset and a new callback.
    resumed = EpochSeededShuffle()
    resumed.on_epoch_begin(2)
    assert labels_of(dataset(resumed)) == epochs[2]


@tf_data_only
def test_epoch_seeded_shuffle_needs_a_seeded_shuffled_pass(corpus, tokenizer):
    with pytest.raises(ValueError, match="seed=None"):
        make_translation_dataset(
            *corpus, tokenizer, seed=None, shuffle_epoch=EpochSeededShuffle()
        )


@tf_data_only
def test_long_pairs_are_truncated_with_one_warning(corpus, tokenizer):
    sources, targets = corpus
    max_length = 16
    lengths = [tokenizer.tokenize(list(x)).row_lengths().numpy() for x in corpus]
    expected = int(np.sum((lengths[0] >= max_length) | (lengths[1] >= max_length)))
    assert 0 < expected < len(sources)
    with pytest.warns(UserWarning) as record:
        dataset = make_translation_dataset(
            sources, targets, tokenizer, max_tokens_per_batch=BUDGET, max_length=16
        )
    assert len(record) == 1
    assert f"{expected} of {len(sources)} sentence pairs" in str(record[0].message)
    batches = _batches(dataset)
    assert {labels.shape[1] for _, _, labels in batches} <= {8, 12, 16}
    assert sum(len(labels) for _, _, labels in batches) == len(sources)


@tf_data_only
def test_pad_remainder_and_repeat_give_one_shape_per_bucket(corpus, tokenizer):
    dataset = make_translation_dataset(
        *corpus, tokenizer, max_tokens_per_batch=BUDGET, pad_remainder=True
    )
    batches = _batches(dataset)
    for _, _, labels in batches:
        assert labels.shape == (BUDGET // labels.shape[1], labels.shape[1])
    pairs = [p for p in _pairs(batches, tokenizer) if p != ("", "")]
    assert collections.Counter(pairs) == _expected_pairs(corpus, tokenizer)

    repeated = make_translation_dataset(
        *corpus, tokenizer, max_tokens_per_batch=BUDGET, repeat=True
    )
    for _, labels in repeated.take(40):
        assert labels.shape == (BUDGET // labels.shape[1], labels.shape[1])


@tf_data_only
def test_padded_baseline_has_one_shape(corpus, tokenizer):
    dataset = make_padded_dataset(
        *corpus, tokenizer, sequence_length=128, batch_size=32, pad_remainder=True
    )
    batches = _batches(dataset)
    assert all(b[2].shape == (32, 128) for b in batches)
    assert len(batches) == 10  # ceil(300 / 32)
    pairs = [p for p in _pairs(batches, tokenizer) if p != ("", "")]
    assert collections.Counter(pairs) == _expected_pairs(corpus, tokenizer)


@tf_data_only
def test_padding_statistics_counts_and_bucketing_saves(two_epochs, corpus, tokenizer):
    encoder_tokens = tf.constant([[5, 3, 0, 0], [6, 7, 8, 3]])
    labels = tf.constant([[9, 3, 0, 0], [3, 0, 0, 0]])
    toy = tf.data.Dataset.from_tensors(
        ({"encoder_tokens": encoder_tokens, "decoder_tokens": labels}, labels)
    ).repeat(2)
    stats = padding_statistics(toy)
    assert stats["source_padding"] == pytest.approx(2 / 8)
    assert stats["target_padding"] == pytest.approx(5 / 8)
    assert stats["padding"] == pytest.approx(7 / 16)
    assert (stats["source_tokens"], stats["target_tokens"], stats["batches"]) == (
        12,
        6,
        2,
    )
    assert padding_statistics(toy.repeat(), max_batches=3)["batches"] == 3
    with pytest.raises(ValueError, match="max_batches"):
        padding_statistics(toy.repeat())

    bucketed = padding_statistics(two_epochs[0])
    fixed = padding_statistics(
        make_padded_dataset(*corpus, tokenizer, sequence_length=128, batch_size=32)
    )
    assert bucketed["source_tokens"] == fixed["source_tokens"]
    assert bucketed["padding"] < fixed["padding"]
    assert bucketed["source_padding"] < fixed["source_padding"]
    assert bucketed["target_padding"] < fixed["target_padding"]


@tf_data_only
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"max_tokens_per_batch": 0}, ValueError, "max_tokens_per_batch=0"),
        ({"max_tokens_per_batch": 100}, ValueError, "max_tokens_per_batch=100"),
        ({"max_length": 1}, ValueError, "max_length=1"),
        ({"bucket_boundaries": [16, 8, 128]}, ValueError, r"\[16, 8, 128\]"),
        ({"bucket_boundaries": [8, 16]}, ValueError, "max_length=128"),
        ({"seed": 1.5}, TypeError, "seed=1.5"),
    ],
)
def test_invalid_arguments_are_named(corpus, tokenizer, kwargs, error, match):
    with pytest.raises(error, match=match):
        make_translation_dataset(*corpus, tokenizer, **kwargs)


@tf_data_only
def test_invalid_corpus_is_rejected(corpus, tokenizer):
    sources, targets = corpus
    with pytest.raises(ValueError, match=r"len\(sources\)=300, len\(targets\)=299"):
        make_translation_dataset(sources, targets[:-1], tokenizer)
    with pytest.raises(TypeError, match="sources"):
        make_padded_dataset("A dog.", "Ein Hund.", tokenizer)
    with pytest.raises(ValueError, match="batch_size=0"):
        make_padded_dataset(sources, targets, tokenizer, batch_size=0)


@tf_data_only
def test_custom_buckets(corpus, tokenizer):
    dataset = make_translation_dataset(
        *corpus,
        tokenizer,
        max_tokens_per_batch=512,
        bucket_boundaries=[20, 40, 80, 160, 320],
    )
    assert {y.shape[1] for _, y in dataset} <= {20, 40, 80, 160}


def test_model_fit_consumes_the_dataset(corpus, tokenizer):
    # One bucket: one batch shape, so JAX compiles the train step once.
    dataset = make_translation_dataset(
        *corpus,
        tokenizer,
        max_tokens_per_batch=4 * 128,
        bucket_boundaries=[128],
        repeat=True,
    )
    for inputs, labels in dataset.take(2):
        converted = keras.ops.convert_to_tensor(inputs["encoder_tokens"])
        assert keras.ops.shape(converted) == tuple(inputs["encoder_tokens"].shape)
        labels = keras.ops.convert_to_tensor(labels)
        assert keras.backend.standardize_dtype(labels.dtype) == "int32"

    # A tiny two-input model, trained by `fit` on the current backend.
    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    embedding = keras.layers.Embedding(tokenizer.vocabulary_size, 8)
    context = keras.ops.mean(embedding(encoder_tokens), axis=1, keepdims=True)
    hidden = embedding(decoder_tokens) + context
    logits = keras.layers.Dense(tokenizer.vocabulary_size)(hidden)
    model = keras.Model([encoder_tokens, decoder_tokens], logits)
    model.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(dataset, steps_per_epoch=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@tf_data_only
def test_repeat_batches_stacks_each_batch_and_keeps_static_shapes():
    import tensorflow as tf

    from keras_attn.text import repeat_batches

    data = tf.data.Dataset.from_tensor_slices(
        ({"a": np.arange(12).reshape(6, 2)}, np.arange(6))
    ).batch(4, drop_remainder=True)
    repeated = repeat_batches(data, copies=3)
    assert repeated.element_spec[1].shape.as_list() == [12]
    ((inputs, labels),) = list(repeated)
    np.testing.assert_array_equal(labels.numpy(), np.tile(np.arange(4), 3))
    np.testing.assert_array_equal(
        inputs["a"].numpy(), np.tile(np.arange(8).reshape(4, 2), (3, 1))
    )
    with pytest.raises(ValueError, match="copies"):
        repeat_batches(data, copies=0)
