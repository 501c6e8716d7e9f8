"""Which kernel runs the fused attention path, decided before the call.

`keras.ops.dot_product_attention(..., flash_attention=None)` on JAX checks
the inputs (not the mask) for cuDNN's flash kernel, tries it, and when
cuDNN then rejects the call (a mask turned into a bias of a shape it does
not take, a bias with an odd sequence length under a gradient), logs the
exception with its traceback at ERROR level and runs XLA instead. Here the
kernel is chosen up front from what is known when the function is traced
(backend, device, dtype, shapes, whether a mask is present): the flash
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
- Everything else (float32, CPU, TensorFlow, shapes cuDNN does not take):
  XLA's (or TensorFlow's) own dot-product attention.
"""

import keras

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
        has_mask: bool, whether a boolean mask goes with the call.
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


def fused_dot_product_attention(query, key, value, mask=None, scale=None):
    """`keras.ops.dot_product_attention` with the kernel chosen up front.

    Args:
        query: `(batch, query_length, num_heads, head_dim)`.
        key: `(batch, key_length, num_heads, head_dim)`.
        value: `(batch, key_length, num_heads, head_dim)`.
        mask: optional boolean `(batch, query_length, key_length)`, `True`
            where a query may attend a key. Defaults to `None`.
        scale: float, the scale of the scores. Defaults to `None`, meaning
            `1 / sqrt(head_dim)`.

    Returns:
        `(batch, query_length, num_heads, head_dim)`. A fully masked row is
        not zeroed here (the caller does it).
    """
    kernel = choose_attention_kernel(
        tuple(query.shape), tuple(key.shape), query.dtype, mask is not None
    )
    head_mask = None
    if mask is not None:
        # The full (batch, 1, query_length, key_length) layout: a broadcast
        # (batch, 1, 1, key_length) mask becomes a bias cuDNN rejects.
        head_mask = keras.ops.broadcast_to(
            mask[:, None, :, :],
            (
                keras.ops.shape(query)[0],
                1,
                keras.ops.shape(query)[1],
                keras.ops.shape(key)[1],
            ),
        )
    dtype = query.dtype
    in_float32 = mask is not None and _mask_bias_too_small(dtype)
    if in_float32:
        query, key, value = (keras.ops.cast(x, "float32") for x in (query, key, value))
    # (batch, query_length, num_heads, head_dim)
    attended = keras.ops.dot_product_attention(
        query,
        key,
        value,
        mask=head_mask,
        scale=scale,
        flash_attention=None if kernel != "xla" else False,
    )
    if in_float32:
        attended = keras.ops.cast(attended, dtype)
    return attended


def _mask_bias_too_small(dtype, backend=None):
    """Whether the backend masks `dtype` scores with a bias they can exceed.

    Keras's torch `dot_product_attention` turns a boolean mask into an
    additive bias in the inputs' dtype: in float16 about -45,000 (float16
    has no larger finite number to offer), which scaled scores of large
    activations exceed, so a masked key is attended. Such calls run the
    kernel in float32, whose bias (-2.4e38) no score overcomes. (JAX's
    kernels mask the float32 scores; TensorFlow's float16 takes the
    explicit path, `fused_path_runs`.)
    """
    backend = backend or keras.backend.backend()
    return backend == "torch" and keras.backend.standardize_dtype(dtype) == "float16"
