"""Token accuracy that skips padding."""

import keras

from keras_attn.training.losses import labels_in_range, numeric_labels
from keras_attn.validation import check_int


@keras.saving.register_keras_serializable(package="keras_attn")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of non-padded tokens whose arg-max prediction is the label.

    Keeps two weights, the (weighted) number of correct tokens and the
    (weighted) number of counted tokens, summed over every `update_state`
    call since the last `reset_state`. Tokens whose label equals
    `ignore_class` are not counted. The result is 0 while nothing has been
    counted (e.g. after an all-padding batch).

    As `MaskedSparseCategoricalCrossentropy`: bool labels raise a
    `TypeError`, and a label outside `[0, vocab)` that is not
    `ignore_class` (or a fractional float label) makes the result NaN
    until `reset_state` (rather than a silent miss, or a hit on the last
    class for -1).

    Args:
        ignore_class: Integer label id whose tokens are skipped (the padding
            id), or `None` to count every token. Defaults to `0`.
        name: Name of the metric instance. Defaults to `"masked_accuracy"`.
        dtype: Dtype of the metric's weights and result. Defaults to `None`,
            which means `keras.backend.floatx()`.

    Call arguments (`update_state`):
        y_true: Integer labels of shape `(batch, seq)` (or
            `(batch, seq, 1)`).
        y_pred: Logits or probabilities of shape `(batch, seq, vocab)`.
        sample_weight: Optional weights, `(batch,)` or `(batch, seq)`.

    Returns:
        `result()` returns a scalar, correct tokens / counted tokens.

    Example:

    >>> metric = keras_attn.training.MaskedAccuracy()
    >>> labels = np.array([[1, 2, 0]])  # 0 is padding.
    >>> logits = np.array([[[0.0, 1, 0], [0, 1, 0], [1, 0, 0]]])
    >>> metric.update_state(labels, logits)
    >>> float(metric.result())  # 1 of 2 real tokens is right.
    0.5

    References:
        - [Vaswani et al., 2017, "Attention Is All You Need", section 6.1](
          https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, ignore_class=0, name="masked_accuracy", dtype=None):
        ignore_class = check_int(ignore_class, "ignore_class", allow_none=True)
        super().__init__(name=name, dtype=dtype)
        self.ignore_class = ignore_class
        self.correct = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="correct"
        )
        self.count = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="count"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = keras.ops.convert_to_tensor(y_pred)
        y_true = keras.ops.convert_to_tensor(numeric_labels(y_true))
        if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
            y_true = keras.ops.squeeze(y_true, axis=-1)
        num_classes = y_pred.shape[-1] or keras.ops.shape(y_pred)[-1]
        labels, in_range = labels_in_range(y_true, num_classes)  # (batch, seq)
        predictions = keras.ops.cast(
            keras.ops.argmax(y_pred, axis=-1), "int32"
        )  # (batch, seq)

        out_of_range = keras.ops.logical_not(in_range)  # (batch, seq)
        if self.ignore_class is None:
            weights = keras.ops.ones_like(labels, dtype=self.dtype)
        else:
            valid = keras.ops.not_equal(y_true, self.ignore_class)  # (batch, seq)
            weights = keras.ops.cast(valid, self.dtype)
            out_of_range = keras.ops.logical_and(valid, out_of_range)
        # A counted token with an id outside the vocabulary: NaN weight.
        weights = keras.ops.where(out_of_range, float("nan"), weights)
        if sample_weight is not None:
            sample_weight = keras.ops.cast(sample_weight, self.dtype)
            # (batch,) weights one whole sequence: (batch, 1) broadcasts.
            while len(sample_weight.shape) < len(weights.shape):
                sample_weight = keras.ops.expand_dims(sample_weight, -1)
            weights = weights * sample_weight  # (batch, seq)

        matches = keras.ops.cast(keras.ops.equal(predictions, labels), self.dtype)
        self.correct.assign_add(keras.ops.sum(matches * weights))
        self.count.assign_add(keras.ops.sum(weights))

    def result(self):
        return keras.ops.divide_no_nan(self.correct, self.count)

    def get_config(self):
        config = super().get_config()
        config.update({"ignore_class": self.ignore_class})
        return config
