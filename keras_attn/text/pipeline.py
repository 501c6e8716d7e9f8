"""`tf.data` input pipelines for sequence-to-sequence training with teacher forcing.

Each element is `({"encoder_tokens": (B, S), "decoder_tokens": (B, T)},
labels (B, T))`, int32, padded with the padding id `0`:

    encoder_tokens = source_ids + [end]
    decoder_tokens = [start] + target_ids
    labels         = target_ids + [end]

so `decoder_tokens[:, 1:] == labels[:, :-1]` on real tokens. Keras's `fit`
accepts a `tf.data.Dataset` on every backend, JAX included.

`make_translation_dataset` batches by token budget with length buckets, as in
the paper ("each training batch contained a set of sentence pairs containing
approximately 25000 source tokens and 25000 target tokens"), and pads every
batch to its bucket's length, so batch shapes come from a small fixed set:
JAX compiles the train step once per shape. `make_padded_dataset` is the
tutorial baseline (one fixed length, one fixed batch size) for comparisons.
"""

import functools
import warnings

import numpy as np
import tensorflow as tf

from keras_attn.text.subword_sampling import (
    sample_segmentations,
    segmentation_candidates,
)
from keras_attn.validation import (
    check_bool,
    check_float,
    check_int,
    check_positive_int,
    check_seed,
    check_string_pairs,
)

DEFAULT_BUCKET_LENGTHS = (8, 12, 16, 24, 32, 48, 64, 96, 128)
_BATCH_SHUFFLE_BUFFER = 128
_GATHER_CHUNK = 1024


def _check_min_length(value, name):
    """A padded length: an integer >= 2 (one id plus the start/end id)."""
    return check_int(value, name, min_value=2)


def _encode_pairs(sources, targets, tokenizer, max_length):
    """Tokenizes all pairs at once; truncates to `max_length - 1` ids, warning once."""
    sources, targets = check_string_pairs(sources, targets, "sources", "targets")
    if not hasattr(tokenizer, "tokenize"):
        raise TypeError(
            "`tokenizer` must be a `keras_attn.text.SubwordTokenizer`. "
            f"Received: tokenizer={tokenizer!r:.100}"
        )
    source_ids = tokenizer.tokenize(list(sources))
    target_ids = tokenizer.tokenize(list(targets))
    keep = max_length - 1  # One place is taken by the start or end id.
    too_long = (source_ids.row_lengths() > keep) | (target_ids.row_lengths() > keep)
    num_truncated = int(tf.reduce_sum(tf.cast(too_long, tf.int32)))
    if num_truncated:
        warnings.warn(
            f"{num_truncated} of {len(sources)} sentence pairs have more than "
            f"max_length - 1 = {keep} source or target tokens; they were "
            f"truncated to max_length={max_length} tokens including the "
            "start/end id.",
            UserWarning,
            stacklevel=3,
        )
    return source_ids[:, :keep], target_ids[:, :keep]


def _pair_order(num_pairs, shuffle, seed, repeat, epoch):
    """Pair indices in the order one pass visits them (or endless passes).

    With `epoch` (a scalar int64 tensor) the order is a pure function of
    `(seed, epoch)`; otherwise tf.data reshuffles on every pass.
    """
    if epoch is not None:
        indices = tf.random.experimental.stateless_shuffle(
            tf.range(num_pairs, dtype=tf.int64),
            seed=tf.stack([tf.constant(seed, tf.int64), epoch]),
        )
        return tf.data.Dataset.from_tensor_slices(indices)
    num_pairs = int(num_pairs)  # Eager here: only the epoch-keyed order is traced.
    dataset = tf.data.Dataset.range(num_pairs)
    if shuffle:
        dataset = dataset.shuffle(num_pairs, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset


def _example_dataset(
    source_ids, target_ids, tokenizer, shuffle, seed, repeat, epoch=None
):
    """A dataset of unbatched `(encoder_tokens, decoder_tokens, labels)` triples."""
    num_pairs = source_ids.nrows()  # A tensor: ids sampled per epoch are traced.
    column = tf.stack([num_pairs, tf.constant(1, num_pairs.dtype)])  # (pairs, 1)
    start = tf.fill(column, tf.constant(tokenizer.start_id, tf.int32))
    end = tf.fill(column, tf.constant(tokenizer.end_id, tf.int32))
    encoder_tokens = tf.concat([source_ids, end], axis=1)  # (pairs, (S))
    decoder_tokens = tf.concat([start, target_ids], axis=1)  # (pairs, (T))
    labels = tf.concat([target_ids, end], axis=1)  # (pairs, (T))

    # Shuffling indices (not token tensors) keeps a full-corpus buffer cheap;
    # gathering rows in chunks of indices is faster than pair by pair.
    dataset = _pair_order(num_pairs, shuffle, seed, repeat, epoch)
    dataset = dataset.batch(_GATHER_CHUNK).map(
        lambda indices: tuple(
            tf.gather(ids, indices) for ids in (encoder_tokens, decoder_tokens, labels)
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    # `unbatch` yields ragged-rank-0 ragged tensors; `padded_batch` wants dense.
    return dataset.unbatch().map(
        lambda *row: tuple(tf.convert_to_tensor(x) for x in row),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def _bucketed_batch_count(source_ids, target_ids, lengths, max_tokens_per_batch):
    """Batches in one pass of `bucket_by_sequence_length` (remainders included).

    The count does not depend on the order, so it is known before iterating:
    Keras then shows progress bars with a total and an ETA.
    """
    pair_lengths = np.maximum(
        source_ids.row_lengths().numpy(), target_ids.row_lengths().numpy()
    )
    # + 1 for the start/end id; bucket = the first length that holds the pair.
    buckets = np.searchsorted(np.asarray(lengths), pair_lengths + 1)
    pairs_per_bucket = np.bincount(buckets, minlength=len(lengths))
    batch_sizes = np.asarray([max_tokens_per_batch // n for n in lengths])
    return int(np.sum(-(-pairs_per_bucket // batch_sizes)))


def _pad_and_shuffle_batches(
    dataset, tokenizer, full_batch_size, pad_remainder, shuffle, seed, epoch=None
):
    """Pads short batches if asked, then shuffles the batches."""
    pad_id = tokenizer.pad_id

    def pad_batch(encoder_tokens, decoder_tokens, labels):
        # All-padding rows complete the last batch of a bucket to the bucket's
        # batch size; a loss that ignores padding labels gives them no weight.
        missing = full_batch_size(tf.shape(encoder_tokens)[1]) - tf.shape(labels)[0]
        paddings = [[0, missing], [0, 0]]
        return tuple(
            tf.pad(x, paddings, constant_values=pad_id)
            for x in (encoder_tokens, decoder_tokens, labels)
        )

    if pad_remainder:
        dataset = dataset.map(pad_batch, num_parallel_calls=tf.data.AUTOTUNE)
    if shuffle:
        batch_seed = None if seed is None else seed + 1
        # Keyed by epoch, the batches already arrive in a (seed, epoch) order:
        # the same buffer permutation on every pass keeps it a function of both.
        dataset = dataset.shuffle(
            _BATCH_SHUFFLE_BUFFER,
            seed=batch_seed,
            reshuffle_each_iteration=epoch is None,
        )
    return dataset


def _name_inputs_and_prefetch(dataset):
    dataset = dataset.map(
        lambda encoder_tokens, decoder_tokens, labels: (
            {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens},
            labels,
        )
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _check_flags(shuffle, repeat, pad_remainder):
    """The pipelines' boolean options, checked by their names."""
    return (
        check_bool(shuffle, "shuffle"),
        check_bool(repeat, "repeat"),
        check_bool(pad_remainder, "pad_remainder"),
    )


def _bucket_lengths(max_length, bucket_boundaries, max_tokens_per_batch):
    """The padded lengths of the buckets, the last one holding `max_length`."""
    if bucket_boundaries is None:
        lengths = [n for n in DEFAULT_BUCKET_LENGTHS if n < max_length] + [max_length]
    else:
        if isinstance(bucket_boundaries, (str, bytes)) or not hasattr(
            bucket_boundaries, "__iter__"
        ):
            raise TypeError(
                "`bucket_boundaries` must be a list of positive integers. "
                f"Received: bucket_boundaries={bucket_boundaries!r}"
            )
        lengths = [
            check_positive_int(n, "bucket_boundaries") for n in bucket_boundaries
        ]
        if not lengths or any(a >= b for a, b in zip(lengths, lengths[1:])):
            raise ValueError(
                "`bucket_boundaries` must be a non-empty, strictly increasing "
                f"list. Received: bucket_boundaries={bucket_boundaries!r}"
            )
        if lengths[-1] < max_length:
            raise ValueError(
                "The last of `bucket_boundaries` must be at least `max_length`. "
                f"Received: bucket_boundaries={bucket_boundaries!r}, "
                f"max_length={max_length}"
            )
        # Buckets past the first one that holds `max_length` stay empty.
        lengths = [n for n in lengths if n < max_length] + [
            next(n for n in lengths if n >= max_length)
        ]
    if max_tokens_per_batch < lengths[-1]:
        raise ValueError(
            "`max_tokens_per_batch` must hold at least one sequence of the "
            f"longest bucket ({lengths[-1]} tokens). Received: "
            f"max_tokens_per_batch={max_tokens_per_batch}"
        )
    return lengths


def _bucketed_batches(
    source_ids,
    target_ids,
    *,
    tokenizer,
    lengths,
    max_tokens_per_batch,
    order,
    epoch=None,
):
    """One pass of token-budget batches, padded to their bucket's length.

    `order` holds `shuffle`, `seed`, `repeat` and `pad_remainder`.
    """
    dataset = _example_dataset(
        source_ids,
        target_ids,
        tokenizer,
        order["shuffle"],
        order["seed"],
        order["repeat"],
        epoch,
    )
    # tf.data's bucket `i` holds lengths in [boundary[i-1], boundary[i])
    # and pads to boundary[i] - 1, so boundary = L + 1 pads to L. The
    # extra last bucket (length > lengths[-1]) never receives a pair after
    # truncation.
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda encoder, decoder, labels: tf.maximum(
            tf.shape(encoder)[0], tf.shape(labels)[0]
        ),
        bucket_boundaries=[n + 1 for n in lengths],
        bucket_batch_sizes=[max_tokens_per_batch // n for n in lengths] + [1],
        padded_shapes=([None], [None], [None]),
        padding_values=(tf.constant(tokenizer.pad_id, tf.int32),) * 3,
        pad_to_bucket_boundary=True,
    )
    return _pad_and_shuffle_batches(
        dataset,
        tokenizer,
        lambda length: max_tokens_per_batch // length,
        order["pad_remainder"],
        order["shuffle"],
        order["seed"],
        epoch,
    )


def make_translation_dataset(
    sources,
    targets,
    tokenizer,
    max_tokens_per_batch=4096,
    max_length=128,
    bucket_boundaries=None,
    shuffle=True,
    seed=0,
    repeat=False,
    pad_remainder=False,
    shuffle_epoch=None,
    subword_nbest_size=1,
    subword_alpha=0.1,
):
    """Builds a token-budget, length-bucketed dataset of sentence pairs.

    Pairs go to the smallest bucket length `L` that holds both
    `len(source) + 1` and `len(target) + 1`; source and target are both padded
    to `L`, and a bucket's batches hold `max_tokens_per_batch // L` pairs, so
    every batch has at most `max_tokens_per_batch` source tokens and as many
    target tokens (padding included). Pairs are shuffled (with `seed`) before
    bucketing, and batches are shuffled again after it.

    Pairs longer than `max_length` (start/end id included) are truncated, with
    one `UserWarning` that says how many: dropping them would silently change
    the data, and Multi30k has none longer than the default.

    Args:
        sources: list of source `str`.
        targets: list of target `str`, one per source.
        tokenizer: a `keras_attn.text.SubwordTokenizer`.
        max_tokens_per_batch: token budget per batch and side (batch size
            times padded length). Defaults to `4096`.
        max_length: most tokens per sequence, start/end id included.
            Defaults to `128`.
        bucket_boundaries: increasing padded lengths of the buckets; the last
            must be at least `max_length`. Defaults to `None`: the lengths
            `8, 12, 16, 24, 32, 48, 64, 96, 128` below `max_length`, then
            `max_length`.
        shuffle: whether to shuffle pairs and batches. Defaults to `True`.
        seed: shuffle seed (`None`: a different order every run). Defaults to
            `0`.
        repeat: whether to repeat forever (reshuffling each pass); then give
            `model.fit` a `steps_per_epoch`. Defaults to `False`.
        pad_remainder: whether to complete the last, smaller batch of each
            bucket with all-padding rows, so that there is exactly one batch
            shape per bucket (with `repeat=True` this holds anyway). Only for
            losses that ignore padding labels. Defaults to `False`.
        shuffle_epoch: a `keras_attn.text.EpochSeededShuffle` callback (also
            given to `fit`), or `None`. With it, each pass's order is a pure
            function of `seed` and the epoch the callback reports, so a run
            resumed at epoch `k` (by `BackupAndRestore`) sees the order an
            uninterrupted run saw at epoch `k`. Needs `shuffle=True`, an
            integer `seed` and `repeat=False`. Defaults to `None`: tf.data
            reshuffles on every pass.
        subword_nbest_size: subword regularization (Kudo, 2018): with a
            value `l > 1`, every epoch segments each sentence anew, drawing
            one of its `l` best SentencePiece segmentations with probability
            proportional to `P(segmentation) ** subword_alpha`; the draw is
            a function of `seed` and the epoch. Needs `shuffle_epoch` and a
            unigram tokenizer. Every epoch has as many batches as the best
            segmentations give (sampled ones are a little longer: a pass
            ends when that count is reached, wrapping round if it is not).
            Segmentations longer than `max_length - 1` ids are never drawn.
            Defaults to `1`: the best segmentation, always.
        subword_alpha: the smoothing exponent of that draw, `>= 0`: `0`
            draws uniformly, larger values favour the best segmentation.
            Defaults to `0.1` (the paper's value for n-best sampling).

    Returns:
        A `tf.data.Dataset` of `({"encoder_tokens": int32 (B, L),
        "decoder_tokens": int32 (B, L)}, labels int32 (B, L))`.

    Example:

    >>> from keras_attn.text import SubwordTokenizer, load_multi30k
    >>> from keras_attn.text import make_translation_dataset
    >>> sources, targets = load_multi30k("val")
    >>> tokenizer = SubwordTokenizer.train(sources + targets, vocabulary_size=1000)
    >>> dataset = make_translation_dataset(sources, targets, tokenizer)
    >>> inputs, labels = next(iter(dataset))
    >>> labels.shape[0] * labels.shape[1] <= 4096
    True
    """
    max_tokens_per_batch = check_positive_int(
        max_tokens_per_batch, "max_tokens_per_batch"
    )
    max_length = _check_min_length(max_length, "max_length")
    seed = check_seed(seed)
    shuffle, repeat, pad_remainder = _check_flags(shuffle, repeat, pad_remainder)
    lengths = _bucket_lengths(max_length, bucket_boundaries, max_tokens_per_batch)
    if shuffle_epoch is not None and (not shuffle or seed is None or repeat):
        raise ValueError(
            "`shuffle_epoch` needs `shuffle=True`, an integer `seed` and "
            f"`repeat=False`. Received: shuffle={shuffle}, seed={seed}, "
            f"repeat={repeat}"
        )
    subword_nbest_size = check_int(subword_nbest_size, "subword_nbest_size", 1)
    subword_alpha = check_float(subword_alpha, "subword_alpha", min_value=0.0)
    if subword_nbest_size > 1 and shuffle_epoch is None:
        raise ValueError(
            "`subword_nbest_size` > 1 draws each epoch's segmentations from "
            "the epoch that `shuffle_epoch` reports, so it needs "
            "`shuffle_epoch`. Received: "
            f"subword_nbest_size={subword_nbest_size}, shuffle_epoch=None"
        )
    source_ids, target_ids = _encode_pairs(sources, targets, tokenizer, max_length)
    num_batches = _bucketed_batch_count(
        source_ids, target_ids, lengths, max_tokens_per_batch
    )
    batching = functools.partial(
        _bucketed_batches,
        tokenizer=tokenizer,
        lengths=lengths,
        max_tokens_per_batch=max_tokens_per_batch,
        order=dict(
            shuffle=shuffle, seed=seed, repeat=repeat, pad_remainder=pad_remainder
        ),
    )
    if shuffle_epoch is None:
        dataset = batching(source_ids, target_ids)
    elif subword_nbest_size == 1:
        # The one-element outer dataset re-runs `batching` on every pass,
        # reading the epoch variable afresh each time.
        dataset = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).flat_map(
            lambda _: batching(
                source_ids, target_ids, epoch=shuffle_epoch.epoch.read_value()
            )
        )
    else:
        sample_pairs = _pair_sampler(
            list(sources),
            list(targets),
            tokenizer,
            max_length,
            subword_nbest_size,
            subword_alpha,
            seed,
        )

        def sampled_pass(_):
            epoch = shuffle_epoch.epoch.read_value()
            return (
                batching(*sample_pairs(epoch), epoch=epoch).repeat().take(num_batches)
            )

        dataset = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).flat_map(
            sampled_pass
        )
    if not repeat:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    return _name_inputs_and_prefetch(dataset)


def _pair_sampler(sources, targets, tokenizer, max_length, nbest_size, alpha, seed):
    """A function of the epoch giving that epoch's sampled `(source, target)` ids."""
    keep = max_length - 1  # As `_encode_pairs`: one place for the start/end id.
    candidates = [
        segmentation_candidates(tokenizer, sentences, nbest_size, keep)
        for sentences in (sources, targets)
    ]

    def sample(epoch):
        # Source and target draw with their own seeds, both keyed by epoch;
        # the pair order uses (seed, epoch) and the batch order seed + 1.
        return tuple(
            sample_segmentations(
                ids,
                scores,
                alpha,
                seed=tf.stack([tf.constant(seed + offset, tf.int64), epoch]),
            )
            for offset, (ids, scores) in zip((2, 3), candidates)
        )

    return sample


def make_padded_dataset(
    sources,
    targets,
    tokenizer,
    sequence_length=128,
    batch_size=64,
    shuffle=True,
    seed=0,
    repeat=False,
    pad_remainder=False,
):
    """Builds the fixed-shape baseline: one padded length, one batch size.

    Like the TensorFlow Transformer tutorial's pipeline, every sequence is
    padded to `sequence_length` and batches hold `batch_size` pairs; use it to
    measure what token-budget bucketing (`make_translation_dataset`) saves.
    Longer pairs are truncated with one warning.

    Args:
        sources: list of source `str`.
        targets: list of target `str`, one per source.
        tokenizer: a `keras_attn.text.SubwordTokenizer`.
        sequence_length: padded length, start/end id included. Defaults to
            `128`.
        batch_size: pairs per batch. Defaults to `64`.
        shuffle: whether to shuffle pairs and batches. Defaults to `True`.
        seed: shuffle seed. Defaults to `0`.
        repeat: whether to repeat forever. Defaults to `False`.
        pad_remainder: whether to complete the last batch with all-padding
            rows. Defaults to `False`.

    Returns:
        A `tf.data.Dataset` with the structure of `make_translation_dataset`'s
        and every batch of shape `(batch_size, sequence_length)` (the last one
        smaller unless `repeat` or `pad_remainder`).

    Example:

    >>> from keras_attn.text import SubwordTokenizer, load_multi30k
    >>> from keras_attn.text import make_padded_dataset
    >>> sources, targets = load_multi30k("val")
    >>> tokenizer = SubwordTokenizer.train(sources + targets, vocabulary_size=1000)
    >>> dataset = make_padded_dataset(
    ...     sources, targets, tokenizer, sequence_length=128, batch_size=32
    ... )
    >>> inputs, labels = next(iter(dataset))
    >>> tuple(labels.shape)
    (32, 128)
    """
    sequence_length = _check_min_length(sequence_length, "sequence_length")
    batch_size = check_positive_int(batch_size, "batch_size")
    seed = check_seed(seed)
    shuffle, repeat, pad_remainder = _check_flags(shuffle, repeat, pad_remainder)
    source_ids, target_ids = _encode_pairs(sources, targets, tokenizer, sequence_length)
    dataset = _example_dataset(source_ids, target_ids, tokenizer, shuffle, seed, repeat)
    dataset = dataset.padded_batch(
        batch_size,
        padded_shapes=([sequence_length],) * 3,
        padding_values=(tf.constant(tokenizer.pad_id, tf.int32),) * 3,
    )
    dataset = _pad_and_shuffle_batches(
        dataset, tokenizer, lambda length: batch_size, pad_remainder, shuffle, seed
    )
    return _name_inputs_and_prefetch(dataset)


def padding_statistics(dataset, max_batches=None, pad_id=0):
    """Measures the share of padding in a translation dataset.

    Args:
        dataset: a finite `tf.data.Dataset` from `make_translation_dataset` or
            `make_padded_dataset` (or of the same structure).
        max_batches: read at most this many batches (needed for a repeating
            dataset). Defaults to `None` (all).
        pad_id: the padding id. Defaults to `0`.

    Returns:
        A dict: `"source_padding"`, `"target_padding"` and `"padding"` (both
        sides together) as shares in [0, 1] of all positions;
        `"source_tokens"` and `"target_tokens"`, the real (non-padding) token
        counts; `"batches"`, the number of batches read.

    Example:

    >>> from keras_attn.text import padding_statistics
    >>> stats = padding_statistics(dataset)  # e.g. from `make_padded_dataset`
    >>> 0.0 <= stats["padding"] <= 1.0
    True
    """
    pad_id = check_int(pad_id, "pad_id")
    if max_batches is None:
        if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
            raise ValueError(
                "`dataset` repeats forever: pass `max_batches`. "
                "Received: max_batches=None"
            )
    else:
        dataset = dataset.take(check_positive_int(max_batches, "max_batches"))

    def accumulate(totals, batch):
        inputs, labels = batch
        counts = []
        for ids in (inputs["encoder_tokens"], labels):
            counts += [
                tf.size(ids, tf.int64),
                tf.reduce_sum(tf.cast(ids == pad_id, tf.int64)),
            ]
        return totals + tf.stack(counts + [tf.constant(1, tf.int64)])

    totals = dataset.reduce(tf.zeros([5], tf.int64), accumulate)
    source_size, source_pad, target_size, target_pad, batches = totals.numpy().tolist()
    if batches == 0:
        raise ValueError("`dataset` has no batches.")
    return {
        "source_padding": source_pad / source_size,
        "target_padding": target_pad / target_size,
        "padding": (source_pad + target_pad) / (source_size + target_size),
        "source_tokens": source_size - source_pad,
        "target_tokens": target_size - target_pad,
        "batches": batches,
    }
