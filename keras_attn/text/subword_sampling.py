"""Subword regularization: a sampled segmentation of each sentence per epoch.

Kudo (2018) trains on segmentations sampled from the unigram model instead
of the single best one, so that the model sees each word split several
ways: a regularizer that helps most on small data. Here the candidates are
SentencePiece's `nbest_size` best segmentations, computed once; every epoch
draws one per sentence with probability proportional to
`P(segmentation) ** alpha` (the paper's n-best sampling), inside the
`tf.data` graph with a stateless seed, so an epoch's draw is a function of
`(seed, epoch)` and a resumed run sees the data an uninterrupted one saw.
"""

import tensorflow as tf


def segmentation_candidates(tokenizer, sentences, nbest_size, max_tokens):
    """The n-best segmentations of `sentences`, ready for `sample_segmentations`.

    Candidates longer than `max_tokens` are left out, so that sampling never
    truncates a sentence that its best segmentation holds whole; the best
    one always stays (truncated to `max_tokens`, as `tokenize`'s ids are).

    Args:
        tokenizer: a `keras_attn.text.SubwordTokenizer` (unigram).
        sentences: a list of `str`.
        nbest_size: the most candidates per sentence.
        max_tokens: the most ids a candidate may have.

    Returns:
        `(ids, scores)`: int32 ids of shape `(sentences, (candidates),
        (tokens))` and their float32 log-probabilities, `(sentences,
        (candidates))`, best first.
    """
    ids, scores = tokenizer.nbest_tokenize(sentences, nbest_size)
    rank = tf.range(ids.values.nrows()) - tf.repeat(
        ids.row_starts(), ids.row_lengths()
    )  # (all candidates,): 0 for each sentence's best
    keep = (ids.values.row_lengths() <= max_tokens) | (rank == 0)
    keep = scores.with_values(keep)  # (sentences, (candidates))
    ids = tf.ragged.boolean_mask(ids, keep)
    scores = tf.ragged.boolean_mask(scores, keep)
    truncated = ids.values[:, :max_tokens]  # (all candidates, (tokens))
    return ids.with_values(truncated), scores


def sample_segmentations(ids, scores, alpha, seed):
    """Draws one segmentation per sentence, with probability ∝ exp(alpha * score).

    Works eagerly and inside `tf.data` / `tf.function`.

    Args:
        ids: int32 ids `(sentences, (candidates), (tokens))`, as
            `segmentation_candidates` returns them.
        scores: their log-probabilities, `(sentences, (candidates))`.
        alpha: the smoothing exponent: `0` draws uniformly among the
            candidates; large values pick the best one.
        seed: a shape `(2,)` integer tensor, the stateless seed.

    Returns:
        int32 ids of shape `(sentences, (tokens))`.
    """
    logits = (scores * alpha).to_tensor(default_value=float("-inf"))  # (n, k)
    draws = tf.random.stateless_categorical(logits, 1, seed=seed, dtype=tf.int64)
    choice = draws[:, 0]  # (n,)
    return tf.gather(ids.values, ids.row_starts() + choice)  # (n, (tokens))
