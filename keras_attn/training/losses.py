"""Label-smoothed, padding-aware cross-entropy (section 5.4 of the paper)."""

import keras

from keras_attn.training.keras_compat import drop_keras_mask
from keras_attn.training.softmax_cross_entropy import (
    smoothed_softmax_cross_entropy,
)
from keras_attn.validation import check_bool, check_int, check_rate

# Reductions that divide by the number of loss entries; for these, padded
# tokens must be taken out of the count as well as out of the sum.
_MEAN_REDUCTIONS = ("sum_over_batch_size", "mean")


def numeric_labels(y_true, argument_name="y_true"):
    """`y_true` as a tensor, refused unless it holds numbers (not bools).

    Float labels are accepted, as Keras's own losses accept them (Keras
    itself hands labels over as floats, e.g. under `tf.distribute`); one
    that is not a whole number is out of range in `labels_in_range`, never
    truncated (2.7 is not read as 2).
    """
    if not hasattr(y_true, "dtype"):
        y_true = keras.ops.convert_to_tensor(y_true)
    dtype = keras.backend.standardize_dtype(y_true.dtype)
    if "int" not in dtype and "float" not in dtype:
        raise TypeError(
            f"`{argument_name}` must hold integer class ids. Received: "
            f"{argument_name}.dtype={dtype}"
        )
    return y_true


def labels_in_range(y_true, num_classes):
    """`(labels, in_range)`: int32 ids safe to gather, and where they are real.

    `in_range` is `0 <= y_true < num_classes` and, for float labels, a whole
    number, checked before the cast to int32 (a float id of 1e10 has no
    int32 value, and a cast would truncate 2.7 to 2). Out-of-range ids
    become 0 in `labels`: gathering them would fail on TensorFlow, read the
    last class for -1 on JAX and torch, and give NaN past the end on JAX.
    """
    in_range = keras.ops.logical_and(
        keras.ops.greater_equal(y_true, 0), keras.ops.less(y_true, num_classes)
    )  # (batch, seq)
    if "float" in keras.backend.standardize_dtype(y_true.dtype):
        whole = keras.ops.equal(y_true, keras.ops.floor(y_true))
        in_range = keras.ops.logical_and(in_range, whole)
    labels = keras.ops.cast(keras.ops.where(in_range, y_true, 0), "int32")
    return labels, in_range


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Token cross-entropy with label smoothing that skips padding.

    For each token with label `y` and log-probabilities `log_p` over a
    vocabulary of `K` entries, the loss is the cross-entropy against the
    smoothed target `q' = (1 - eps) * one_hot(y) + eps / K` (section 5.4,
    `eps = label_smoothing`):

    ```
    loss = (1 - eps) * -log_p[y] + eps * -mean(log_p over the vocabulary)
    ```

    This is exactly what
    `keras.losses.CategoricalCrossentropy(label_smoothing=eps)` computes on
    one-hot labels, but no `(batch, seq, vocab)` one-hot tensor is built.
    The log-softmax is computed in float32, also when the logits are
    float16 or bfloat16 (mixed precision).

    Tokens whose label equals `ignore_class` (the padding id) contribute 0.
    With the default reduction the result is the mean over the non-padded
    tokens of the batch: the per-token losses are multiplied by
    `total_tokens / valid_tokens` (0 when every token is padding, never
    NaN), the same rescaling Keras applies to masked losses. With
    `reduction="sum"` the result is the sum over the non-padded tokens, and
    with `reduction=None` the per-token losses (0 at padding) come back
    unscaled. With `reduction="mean_with_sample_weight"`, give padding a
    sample weight of 0.

    Labels are class ids: bool labels raise a `TypeError` at the call;
    float labels are read as ids when they are whole numbers. A label
    outside `[0, vocab)` that is not `ignore_class` (a negative id, an id
    past the vocabulary, or a fraction such as 2.7) makes
    that token's loss NaN, so the batch's loss is NaN on every backend
    (values cannot raise inside a compiled step); the gradient stays finite
    (0 from that token). Add `keras.callbacks.TerminateOnNaN()` to `fit`'s
    callbacks to stop training on such a batch.

    When `ignore_class` is set, the labels alone say which tokens are
    padding: a Keras mask carried by `y_pred` (propagated from an
    `Embedding(mask_zero=True)`) is dropped so the mean is not rescaled
    twice. With `ignore_class=None` such a mask is applied as Keras usually
    does.

    Args:
        label_smoothing: Float in `[0, 1)`, the smoothing mass `eps` spread
            uniformly over the vocabulary. `0` gives the plain sparse
            cross-entropy. Defaults to `0.1`, the paper's value.
        ignore_class: Integer label id whose tokens are skipped (the padding
            id), or `None` to count every token. Defaults to `0`.
        from_logits: Whether `y_pred` holds logits (`True`) or
            probabilities (`False`). Defaults to `True`.
        reduction: How per-token losses are combined; one of
            `"sum_over_batch_size"`, `"mean"`, `"sum"`,
            `"mean_with_sample_weight"`, `"none"` or `None`. Defaults to
            `"sum_over_batch_size"` (mean over non-padded tokens).
        name: Name of the loss instance. Defaults to
            `"masked_sparse_categorical_crossentropy"`.

    Call arguments:
        y_true: Integer labels of shape `(batch, seq)` (or
            `(batch, seq, 1)`).
        y_pred: Logits or probabilities of shape `(batch, seq, vocab)`.
        sample_weight: Optional weights, `(batch,)` or `(batch, seq)`.

    Returns:
        A float32 scalar, or `(batch, seq)` per-token losses when
        `reduction` is `None` or `"none"`.

    Example:

    >>> loss = keras_attn.training.MaskedSparseCategoricalCrossentropy()
    >>> labels = np.array([[5, 7, 0]])  # 0 is padding.
    >>> logits = np.random.normal(size=(1, 3, 10))
    >>> value = loss(labels, logits)  # Mean over the 2 real tokens.

    With `model.compile`:

    ```python
    model.compile(
        optimizer=keras_attn.training.paper_adam(d_model=512),
        loss=keras_attn.training.MaskedSparseCategoricalCrossentropy(),
        metrics=[keras_attn.training.MaskedAccuracy()],
    )
    ```

    References:
        - [Vaswani et al., 2017, "Attention Is All You Need", section 5.4](
          https://arxiv.org/abs/1706.03762)
        - [Szegedy et al., 2016, "Rethinking the Inception Architecture for
          Computer Vision", section 7](https://arxiv.org/abs/1512.00567)
    """

    def __init__(
        self,
        label_smoothing=0.1,
        ignore_class=0,
        from_logits=True,
        reduction="sum_over_batch_size",
        name="masked_sparse_categorical_crossentropy",
    ):
        label_smoothing = check_rate(label_smoothing, "label_smoothing")
        ignore_class = check_int(ignore_class, "ignore_class", allow_none=True)
        from_logits = check_bool(from_logits, "from_logits")
        super().__init__(name=name, reduction=reduction)
        self.label_smoothing = label_smoothing
        self.ignore_class = ignore_class
        self.from_logits = from_logits

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Before `Loss.__call__`, which converts the labels to floats.
        y_true = numeric_labels(y_true)
        if self.ignore_class is not None:
            # `Loss.__call__` rescales by any Keras mask found on `y_pred`;
            # `call` already rescaled by the label mask.
            y_pred = drop_keras_mask(y_pred)
        if sample_weight is not None:
            sample_weight = keras.ops.convert_to_tensor(sample_weight)
            if len(sample_weight.shape) == 1:
                # One weight per sequence: Keras does not broadcast (batch,)
                # against (batch, seq) losses by itself.
                sample_weight = keras.ops.broadcast_to(
                    keras.ops.expand_dims(sample_weight, -1),
                    keras.ops.shape(y_pred)[:-1],
                )  # (batch, seq)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        losses, valid = self._token_losses(y_true, y_pred)
        return self._masked(losses, valid)

    def _token_losses(self, y_true, y_pred):
        """Per-token losses `(batch, seq)` and the non-padding mask (or None)."""
        y_pred = keras.ops.cast(y_pred, "float32")
        y_true = keras.ops.convert_to_tensor(y_true)
        if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
            y_true = keras.ops.squeeze(y_true, axis=-1)
        # `Loss.__call__` hands labels over as floats (checked to be integers
        # before); ids are exact below 2**24.
        num_classes = y_pred.shape[-1] or keras.ops.shape(y_pred)[-1]
        labels, in_range = labels_in_range(y_true, num_classes)  # (batch, seq)

        valid = None
        if self.ignore_class is not None:
            valid = keras.ops.not_equal(y_true, self.ignore_class)  # (batch, seq)
        # Real tokens with an id outside the vocabulary: NaN below.
        out_of_range = keras.ops.logical_not(in_range)
        counted = in_range
        if valid is not None:
            out_of_range = keras.ops.logical_and(valid, out_of_range)
            counted = keras.ops.logical_and(valid, in_range)

        if self.from_logits:
            # -log p(label) = logsumexp(logits) - logits[label], with its
            # gradient written out: one pass over the logits backward, and
            # exactly 0 at ignored tokens (docs/performance.md).
            losses = smoothed_softmax_cross_entropy(
                y_pred, labels, self.label_smoothing, counted
            )  # (batch, seq)
        else:
            # Constant rows at ignored tokens keep log-probabilities and
            # their gradients finite whatever the model put there.
            y_pred = keras.ops.where(
                keras.ops.expand_dims(counted, -1), y_pred, 1.0
            )  # (batch, seq, vocab)
            # Same treatment of probabilities as Keras's crossentropies.
            probs = y_pred / keras.ops.sum(y_pred, axis=-1, keepdims=True)
            epsilon = keras.backend.epsilon()
            # (batch, seq, vocab)
            log_probs = keras.ops.log(keras.ops.clip(probs, epsilon, 1.0 - epsilon))
            label_log_probs = keras.ops.take_along_axis(
                log_probs, keras.ops.expand_dims(labels, -1), axis=-1
            )  # (batch, seq, 1)
            losses = -keras.ops.squeeze(label_log_probs, axis=-1)  # (batch, seq)
            if self.label_smoothing:
                eps = self.label_smoothing
                uniform_losses = -keras.ops.mean(log_probs, axis=-1)  # (batch, seq)
                losses = (1.0 - eps) * losses + eps * uniform_losses
        # NaN, not a silent gather of another class: the batch's loss is
        # NaN on every backend (the gradient of `where` stays finite).
        losses = keras.ops.where(out_of_range, float("nan"), losses)
        return losses, valid

    def _masked(self, losses, valid):
        """Zeros padding; for mean reductions, rescales to a mean over `valid`."""
        if valid is None:
            return losses
        losses = keras.ops.where(valid, losses, 0.0)
        if self.reduction in _MEAN_REDUCTIONS:
            # sum(loss * total / valid) / total == sum(loss) / valid.
            valid_count = keras.ops.sum(keras.ops.cast(valid, "float32"))
            total_count = keras.ops.cast(keras.ops.size(valid), "float32")
            losses = losses * keras.ops.divide_no_nan(total_count, valid_count)
        return losses

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "label_smoothing": self.label_smoothing,
                "ignore_class": self.ignore_class,
                "from_logits": self.from_logits,
            }
        )
        return config
