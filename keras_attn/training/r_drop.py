"""R-Drop: a consistency loss between two dropout passes of the same batch."""

import keras

from keras_attn.training.losses import MaskedSparseCategoricalCrossentropy
from keras_attn.validation import check_float


def symmetric_kl_divergence(logits_a, logits_b):
    """`KL(p_a || p_b) + KL(p_b || p_a)` per position, from logits.

    Args:
        logits_a: float tensor `(..., vocabulary)`.
        logits_b: float tensor of the same shape.

    Returns:
        A float32 tensor `(...)`: `sum((p_a - p_b) * (log p_a - log p_b))`
        over the last axis, which is the sum of the two divergences.

    Example:

    >>> logits = keras.ops.convert_to_tensor([[0.0, 1.0, 2.0]])
    >>> kl = keras_attn.training.r_drop.symmetric_kl_divergence(logits, logits)
    >>> float(kl[0])
    0.0
    """
    log_p_a = keras.ops.log_softmax(keras.ops.cast(logits_a, "float32"), axis=-1)
    log_p_b = keras.ops.log_softmax(keras.ops.cast(logits_b, "float32"), axis=-1)
    difference = keras.ops.exp(log_p_a) - keras.ops.exp(log_p_b)
    return keras.ops.sum(difference * (log_p_a - log_p_b), axis=-1)


def _check_even_batch(batch_size):
    """Refuses a static odd batch size, which cannot hold two equal halves.

    Checked while the step is traced. A batch size unknown there (a
    TensorFlow graph over a dataset without `drop_remainder`) cannot be
    checked without a runtime assertion: `repeat_batches` makes every batch
    even, and an odd one fails in TensorFlow's `Split` when it runs.
    """
    if batch_size is not None and batch_size % 2:
        raise ValueError(
            "`RDropLoss` reads the two halves of the batch as two dropout "
            "passes of the same examples, so `y_pred` must have an even batch "
            "size: feed the repeated batches of "
            "`keras_attn.text.repeat_batches(dataset)`. Received: "
            f"y_pred with batch size {batch_size}"
        )


@keras.saving.register_keras_serializable(package="keras_attn")
class RDropLoss(MaskedSparseCategoricalCrossentropy):
    """Masked, label-smoothed cross-entropy plus R-Drop's consistency term.

    R-Drop (Liang et al., 2021) runs every training example through the
    model twice, with two independent dropout masks, and adds the symmetric
    KL divergence between the two output distributions to the
    cross-entropy of both passes: `CE(a) + CE(b) + alpha / 2 * (KL(a || b)
    + KL(b || a))` per token. The model stays a plain Keras model: feed it
    batches whose second half repeats the first
    (`keras_attn.text.repeat_batches`), and its dropout draws different
    masks for the two copies. This loss reads the two halves of `y_pred` as
    the two passes and returns the paper's loss divided by 2, so that with
    `alpha=0` it equals `MaskedSparseCategoricalCrossentropy` on the first
    half. On batches without dropout (validation, when the repeated batches
    are fed there too) the two halves agree and the KL term is 0.

    With `alpha > 0` an odd batch size raises a `ValueError` while the
    step is traced (JAX and torch always know it; TensorFlow when the
    dataset's batch size is static). Labels are checked as in
    `MaskedSparseCategoricalCrossentropy`.

    Args:
        alpha: float `>= 0`, the weight of the KL term (the paper's `alpha`;
            it uses 5 on IWSLT translation). Defaults to `5.0`.
        label_smoothing: float in `[0, 1)`. Defaults to `0.1`.
        ignore_class: int, the padding label, skipped by both terms.
            Defaults to `0`.
        reduction: as `MaskedSparseCategoricalCrossentropy`.
        name: the loss's name.

    Call arguments:
        y_true: int labels `(2 * batch, seq)`, the second half equal to the
            first.
        y_pred: logits `(2 * batch, seq, vocabulary)`.

    Example:

    >>> loss = keras_attn.training.RDropLoss(alpha=5.0)
    >>> labels = keras.ops.convert_to_tensor([[3, 4, 0], [3, 4, 0]])
    >>> logits = keras.random.normal((2, 3, 8), seed=0)
    >>> bool(loss(labels, logits) > 0)
    True

    Reference:
        [Liang et al., 2021, "R-Drop: Regularized Dropout for Neural
        Networks"](https://arxiv.org/abs/2106.14448)
    """

    def __init__(
        self,
        alpha=5.0,
        label_smoothing=0.1,
        ignore_class=0,
        reduction="sum_over_batch_size",
        name="r_drop_loss",
    ):
        super().__init__(
            label_smoothing=label_smoothing,
            ignore_class=ignore_class,
            from_logits=True,
            reduction=reduction,
            name=name,
        )
        self.alpha = check_float(alpha, "alpha", min_value=0.0)

    def call(self, y_true, y_pred):
        losses, valid = self._token_losses(y_true, y_pred)  # (2 * batch, seq)
        if self.alpha:
            _check_even_batch(y_pred.shape[0])
            first, second = keras.ops.split(
                y_pred, 2, axis=0
            )  # 2 x (batch, seq, vocab)
            divergence = symmetric_kl_divergence(first, second)  # (batch, seq)
            # Each half's rows carry a quarter: the mean over both halves is
            # then alpha / 4 * (KL(a || b) + KL(b || a)) per token.
            divergence = keras.ops.concatenate([divergence, divergence], axis=0)
            losses = losses + (self.alpha / 4.0) * divergence
        return self._masked(losses, valid)

    def get_config(self):
        config = super().get_config()
        config.pop("from_logits")
        config["alpha"] = self.alpha
        return config
