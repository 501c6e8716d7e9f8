"""Label-smoothed softmax cross-entropy from logits.

Two formulations of one function, each the fast one on its backends:

- JAX and TensorFlow: the gradient written out (`ops.custom_gradient`), so
  that XLA runs the backward as one element-wise pass over the logits.
- torch: `ops.log_softmax` and a gather, differentiated by autograd, as
  `torch.nn.functional.cross_entropy` computes it. Eager torch runs every
  op as its own kernel: the written-out formulation is about ten
  element-wise kernels over the `(batch, length, vocabulary)` logits there,
  forward and backward, while `log_softmax` and its backward are one fused
  kernel each (docs/performance.md, "The loss on torch").
"""

import keras
from keras import ops


def writes_out_gradient():
    """Whether this backend takes the written-out gradient (JAX, TensorFlow)."""
    return keras.config.backend() != "torch"


def _log_normalizer(logits):
    """`logsumexp(logits)` over the vocabulary, `(batch, length, 1)`."""
    largest = ops.max(logits, axis=-1, keepdims=True)  # (batch, length, 1)
    # As in `logsumexp`: a row whose maximum is infinite is not shifted.
    largest = ops.where(ops.isfinite(largest), largest, 0.0)
    shifted_sum = ops.sum(ops.exp(logits - largest), axis=-1, keepdims=True)
    return largest + ops.log(shifted_sum)


def _token_losses(logits, log_normalizer, labels, eps):
    """The smoothed cross-entropy per token, `(batch, length)`."""
    label_logits = ops.take_along_axis(logits, labels[..., None], axis=-1)
    losses = log_normalizer - label_logits  # (batch, length, 1)
    if eps:
        mean_logits = ops.mean(logits, axis=-1, keepdims=True)
        losses = (1.0 - eps) * losses + eps * (log_normalizer - mean_logits)
    return ops.squeeze(losses, axis=-1)  # (batch, length)


def _logits_gradient(logits, log_normalizer, labels, eps, upstream):
    """`(softmax(logits) - smoothed target) * upstream`, one element-wise pass."""
    vocabulary_size = logits.shape[-1]
    # (batch, length, vocabulary)
    is_label = ops.arange(vocabulary_size, dtype="int32") == labels[..., None]
    uniform = eps / vocabulary_size
    # The constants in the logits' dtype: Python floats become
    # `keras.config.floatx()` tensors, and float64 against float32 logits
    # fails TensorFlow's `Sub`.
    target = ops.where(
        is_label,
        ops.convert_to_tensor(1.0 - eps + uniform, logits.dtype),
        ops.convert_to_tensor(uniform, logits.dtype),
    )
    softmax = ops.exp(logits - log_normalizer)
    if keras.backend.standardize_dtype(upstream.dtype) != (
        keras.backend.standardize_dtype(logits.dtype)
    ):
        upstream = ops.cast(upstream, logits.dtype)
    return (softmax - target) * upstream[..., None]


def smoothed_softmax_cross_entropy(logits, labels, label_smoothing=0.0, valid=None):
    """Per-token cross-entropy against `(1 - eps) * one_hot(label) + eps / K`.

    With `lse = logsumexp(logits)` over the `K` vocabulary entries:

    ```
    loss = (1 - eps) * (lse - logits[label]) + eps * (lse - mean(logits))
    ```

    On JAX and TensorFlow the gradient with respect to the logits is
    written out (`softmax(logits) - (1 - eps) * one_hot(label) - eps / K`,
    times the incoming gradient) rather than derived by automatic
    differentiation, so that the backward pass is one element-wise pass
    over the `(batch, length, vocabulary)` logits: no log-probabilities, no
    one-hot tensor and no masked copy of the logits are formed, forward or
    backward. On torch autograd derives it from `log_softmax` (fused
    kernels; see the module docstring). Tokens where `valid` is `False` get
    a loss of 0 and a gradient of exactly 0, whatever their logits hold
    (NaN included).

    Args:
        logits: float32 tensor `(batch, length, vocabulary)`.
        labels: int tensor `(batch, length)`, ids in `[0, vocabulary)` where
            `valid` is `True` (any id elsewhere).
        label_smoothing: float `eps` in `[0, 1)`. Defaults to `0.0`.
        valid: optional boolean tensor `(batch, length)`, `False` at tokens
            to ignore (padding). Defaults to `None`, meaning all tokens.

    Returns:
        float32 tensor `(batch, length)` of per-token losses.
    """
    eps = float(label_smoothing)
    if valid is not None:
        # An ignored id may lie outside the vocabulary: never gather it.
        labels = ops.where(valid, labels, 0)
    logits = ops.cast(logits, "float32")
    if not writes_out_gradient():
        return _log_softmax_cross_entropy(logits, labels, eps, valid)
    return _written_out_cross_entropy(logits, labels, eps, valid)


def _log_softmax_cross_entropy(logits, labels, eps, valid):
    """The per-token losses through `log_softmax`, for autograd (torch)."""
    if valid is not None:
        # Zeros at ignored tokens: their loss and gradient are then exactly
        # 0 (the `where` passes none back), even where the logits are NaN.
        logits = ops.where(valid[..., None], logits, 0.0)
    log_probs = ops.log_softmax(logits, axis=-1)  # (batch, length, vocabulary)
    # (batch, length, 1) -> (batch, length)
    label_log_probs = ops.squeeze(
        ops.take_along_axis(log_probs, labels[..., None], axis=-1), axis=-1
    )
    losses = -label_log_probs
    if eps:
        losses = (1.0 - eps) * losses - eps * ops.mean(log_probs, axis=-1)
    if valid is not None:
        losses = ops.where(valid, losses, 0.0)
    return losses


def _written_out_cross_entropy(logits, labels, eps, valid):
    """The per-token losses with their gradient written out (JAX, TensorFlow)."""

    @ops.custom_gradient
    def cross_entropy(logits):
        log_normalizer = _log_normalizer(logits)
        losses = _token_losses(logits, log_normalizer, labels, eps)
        if valid is not None:
            losses = ops.where(valid, losses, 0.0)

        def grad(*args, upstream=None):
            if upstream is None:  # TensorFlow passes it by position.
                (upstream,) = args
            gradient = _logits_gradient(logits, log_normalizer, labels, eps, upstream)
            if valid is not None:
                gradient = ops.where(valid[..., None], gradient, 0.0)
            return gradient

        return losses, grad

    return cross_entropy(logits)
