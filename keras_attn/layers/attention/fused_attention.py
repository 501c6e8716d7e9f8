"""Which kernel runs the fused attention path, decided before the call.

`keras.ops.dot_product_attention(..., flash_attention=None)` on JAX checks
the inputs (not the mask) for cuDNN's flash kernel, tries it, and when
cuDNN then rejects the call (a mask turned into a bias of a shape it does
not take, a bias with an odd sequence length under a gradient), logs the
exception with its traceback at ERROR level and runs XLA instead. Here the
kernel is chosen up front from what is known when the function is traced
(backend, device, dtype, shapes, whether a mask or a bias is present): the flash
kernel is offered only where it serves the call, and everywhere else
`flash_attention=False` sends the call to XLA without a try, so no
exception is raised or logged on the way.

What reaches which kernel:

- JAX on a GPU, float16/bfloat16, head size a multiple of 8 up to 128,
  static lengths: cuDNN's flash attention (Keras still checks cuDNN and the
  GPU generation itself, and quietly takes XLA where they fall short). A
  mask goes as a full `(batch, 1, query_length, key_length)` boolean, which
  JAX turns into a bias cuDNN accepts; a bias also needs even lengths
  (cuDNN's rule for biases under a gradient), so a masked call with an odd
  length goes to XLA. A float16 bias (about -45,000) is no mask for large
  scores: a masked float16 call goes to XLA, which masks float32 scores.
- JAX on a TPU without a mask: Keras's splash-attention kernel; with a mask,
  XLA.
- An additive bias is treated as a mask throughout (cuDNN takes both as one
  bias).
- Everything else (float32, CPU, TensorFlow, shapes cuDNN does not take):
  XLA's (or TensorFlow's) own dot-product attention.

Keys and values with fewer heads than the queries (grouped-query attention)
go to the kernel as they are where Keras's kernel takes them: JAX's
(`jax.nn.dot_product_attention` groups the queries, on XLA and cuDNN),
torch's (Keras repeats the heads, or broadcasts a single one), and
TensorFlow's with more than one key/value head (Keras repeats them).
Keras's TensorFlow kernel fails on a single key/value head (multi-query
attention): there the head is repeated before the call.
"""

import keras
from keras import ops

from keras_attn.layers.attention.grouped_heads import repeat_key_value_heads

# cuDNN's flash attention takes half precision only.
CUDNN_DTYPES = ("float16", "bfloat16")
# The head size bound of GPUs before Hopper (Hopper takes 256; Keras's
# public API does not say which GPU runs, so the bound that holds on all).
CUDNN_MAX_HEAD_DIM = 128


def device_platform():
    """`"cpu"`, `"gpu"` or `"tpu"`: the kind of device Keras computes on.

    `"unknown"` on backends that `keras.distribution` does not serve
    (torch): only the JAX kernel choice reads the platform.
    """
    if keras.backend.backend() not in ("jax", "tensorflow"):
        return "unknown"
    devices = keras.distribution.list_devices()
    if not devices:
        return "cpu"
    # JAX names devices `"gpu:0"`; TensorFlow `"/job:.../device:GPU:0"`.
    name = devices[0].lower()
    for platform in ("tpu", "gpu", "cuda"):
        if platform in name:
            return "gpu" if platform == "cuda" else platform
    return "cpu"


def choose_attention_kernel(
    query_shape, key_shape, dtype, has_mask, backend=None, platform=None
):
    """The kernel that serves a fused attention call: `"cudnn"`, `"splash"` or `"xla"`.

    Args:
        query_shape: `(batch, query_length, num_heads, head_dim)`.
        key_shape: `(batch, key_length, num_heads, head_dim)`.
        dtype: the compute dtype of query, key and value.
        has_mask: bool, whether a boolean mask or an additive bias goes
            with the call (cuDNN receives both as a bias).
        backend: the Keras backend. Defaults to `None`, meaning
            `keras.backend.backend()`.
        platform: `"cpu"`, `"gpu"` or `"tpu"`. Defaults to `None`, meaning
            `device_platform()`.

    Returns:
        `"cudnn"` or `"splash"` where that flash kernel accepts the call,
        else `"xla"` (the backend's own dot-product attention).
    """
    backend = backend or keras.backend.backend()
    if backend != "jax":
        return "xla"
    platform = platform or device_platform()
    if platform == "tpu":
        return "xla" if has_mask else "splash"
    if platform != "gpu":
        return "xla"
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype not in CUDNN_DTYPES:
        return "xla"
    if has_mask and dtype == "float16":
        # JAX turns the mask into a float16 bias for cuDNN, about -45,000,
        # which large scores overcome (a masked key is then attended);
        # XLA masks the float32 scores.
        return "xla"
    head_dim = query_shape[-1]
    if head_dim is None or head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM:
        return "xla"
    query_length, key_length = query_shape[1], key_shape[1]
    if query_length is None or key_length is None:
        return "xla"
    if has_mask and (query_length % 2 or key_length % 2):
        return "xla"
    return "cudnn"


def fused_path_runs(dtype, backend=None, platform=None):
    """Whether `keras.ops.dot_product_attention` can run and differentiate `dtype`.

    XLA:CPU rejects the float16 dot products of JAX's fused attention with a
    float32 accumulator (`F16_F16_F32`) when compiling its gradient, so
    float16 on a JAX CPU takes the explicit path. TensorFlow's
    `dot_product_attention` is no kernel but einsums, and its `Q K^T` runs
    in float16, where large activations overflow to inf (and the softmax
    to NaN): float16 on TensorFlow takes the explicit path too, which
    computes the scores in float32. (JAX's XLA and cuDNN kernels and
    torch's accumulate the scores in float32.)
    """
    backend = backend or keras.backend.backend()
    if keras.backend.standardize_dtype(dtype) != "float16":
        return True
    if backend == "tensorflow":
        return False
    if backend != "jax":
        return True
    return (platform or device_platform()) != "cpu"


def fused_dot_product_attention(
    query, key, value, mask=None, bias=None, scale=None, is_causal=False
):
    """`keras.ops.dot_product_attention` with the kernel chosen up front.

    Args:
        query: `(batch, query_length, num_heads, head_dim)`.
        key: `(batch, key_length, key_heads, head_dim)`, `key_heads`
            dividing `num_heads`.
        value: `(batch, key_length, key_heads, head_dim)`.
        mask: optional boolean `(batch, num_heads or 1, query_length,
            key_length)` (or a shape that broadcasts to it), `True` where
            a query may attend a key. Defaults to `None`.
        bias: optional float tensor broadcastable to `(batch, num_heads,
            query_length, key_length)`, added to the scaled scores.
            Defaults to `None`.
        scale: float, the scale of the scores. Defaults to `None`, meaning
            `1 / sqrt(head_dim)`.
        is_causal: bool, whether the kernel applies the causal mask itself
            (only without `mask` and `bias`). Defaults to `False`.

    Returns:
        `(batch, query_length, num_heads, head_dim)`. A fully masked row is
        not zeroed here (the caller does it).
    """
    has_mask = mask is not None or bias is not None
    kernel = choose_attention_kernel(
        tuple(query.shape), tuple(key.shape), query.dtype, has_mask
    )
    batch_size, query_length = ops.shape(query)[0], ops.shape(query)[1]
    key_length = ops.shape(key)[1]
    if mask is not None:
        # The full (batch, heads or 1, query_length, key_length) layout: a
        # broadcast (batch, 1, 1, key_length) mask becomes a bias cuDNN
        # rejects.
        mask = ops.broadcast_to(
            mask, (batch_size, ops.shape(mask)[1], query_length, key_length)
        )
    if kernel_repeats_single_key_head(query.shape[2], key.shape[2]):
        # (batch, key_length, num_heads, head_dim)
        key, value = repeat_key_value_heads(key, value, query.shape[2])
    dtype = query.dtype
    in_float32 = has_mask and _mask_bias_too_small(dtype)
    if in_float32:
        query, key, value = (ops.cast(x, "float32") for x in (query, key, value))
    if bias is not None:
        bias = ops.cast(bias, query.dtype)
        if kernel == "cudnn":
            bias = ops.broadcast_to(
                bias, (batch_size, _heads(bias), query_length, key_length)
            )
        if mask is not None and keras.backend.backend() == "torch":
            # Keras's torch kernel takes a mask or a bias, not both.
            bias = ops.where(mask, bias, ops.cast(_MASKED_BIAS, bias.dtype))
            mask = None
    # (batch, query_length, num_heads, head_dim)
    attended = ops.dot_product_attention(
        query,
        key,
        value,
        bias=bias,
        mask=mask,
        scale=scale,
        is_causal=is_causal,
        flash_attention=None if kernel != "xla" else False,
    )
    if in_float32:
        attended = ops.cast(attended, dtype)
    return attended


def kernel_repeats_single_key_head(num_heads, key_heads, backend=None):
    """Whether a single key/value head must be repeated before the kernel.

    Keras's TensorFlow `dot_product_attention` repeats key/value heads for
    grouped-query attention only when there are more than one, then fails
    on a single one (its einsum wants as many heads as the queries).
    """
    backend = backend or keras.backend.backend()
    return backend == "tensorflow" and key_heads == 1 and num_heads != 1


# The masked entries of a mask folded into a bias: finite (a fully masked
# row is a uniform softmax, zeroed afterwards, not `exp(-inf + inf) = NaN`)
# and beyond any scaled score.
_MASKED_BIAS = -1e9


def _heads(bias):
    """The heads size of a bias's `(batch, heads, query, key)` broadcast."""
    return ops.shape(bias)[-3] if len(bias.shape) >= 3 else 1


def _mask_bias_too_small(dtype, backend=None):
    """Whether the backend masks `dtype` scores with a bias they can exceed.

    Keras's torch `dot_product_attention` turns a boolean mask into an
    additive bias in the inputs' dtype: in float16 about -45,000 (float16
    has no larger finite number to offer), which scaled scores of large
    activations exceed, so a masked key is attended. Such calls (and those
    with a bias, whose sum with the scores float16 may not hold) run the
    kernel in float32, whose bias (-2.4e38) no score overcomes. (JAX's
    kernels mask the float32 scores; TensorFlow's float16 takes the
    explicit path, `fused_path_runs`.)
    """
    backend = backend or keras.backend.backend()
    return backend == "torch" and keras.backend.standardize_dtype(dtype) == "float16"
