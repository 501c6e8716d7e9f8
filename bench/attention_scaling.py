"""One attention layer, forward + backward, as the sequence length doubles.

    python bench/attention_scaling.py --backend jax
    python bench/attention_scaling.py --backend tensorflow
    python bench/attention_scaling.py --backend jax --quick   # smoke run

Self-attention of one `(1, n, 256)` sequence with 8 heads, n = 128 ... 4096
(quick: 128 and 256), in ONE process, timed interleaved:

* `keras_attn.layers.MultiHeadAttention` with the fused kernel
  (`keras.ops.dot_product_attention`),
* the same layer on its explicit einsum path (`flash_attention=False`),
* `keras.layers.MultiHeadAttention`.

Each step is compiled (JAX: `jax.jit`; TensorFlow: `tf.function` with
`jit_compile=True`) and computes the gradient of the output's sum with
respect to the input and the weights, with a padding mask (the last eighth
of the keys masked).

Memory: on JAX, XLA's own account of the compiled step
(`compiled.memory_analysis()`: temporary buffers, which hold the score
matrices); `jax.devices()[0].memory_stats()` is `None` on CPU, and
`tracemalloc` does not see XLA buffers. On TensorFlow the analytic size of
one float32 score matrix, `batch * heads * n^2 * 4` bytes, is printed instead.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

HIDDEN, HEADS = 256, 8


def make_step(layer, x, mask, backend):
    """Returns (compiled fwd+bwd callable, temp bytes or None)."""
    layer(x, x, attention_mask=mask)  # build
    if backend == "jax":
        import jax

        weights = [v.value for v in layer.trainable_variables]
        state = [v.value for v in layer.non_trainable_variables]

        def loss(weights, x):
            out, _ = layer.stateless_call(
                weights, state, x, x, attention_mask=mask, training=True
            )
            return out.sum()

        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        compiled = grad.lower(weights, x).compile()
        analysis = compiled.memory_analysis()
        temp = getattr(analysis, "temp_size_in_bytes", None)
        return (lambda: jax.block_until_ready(compiled(weights, x))), temp
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, x, attention_mask=mask, training=True)
            total = tf.reduce_sum(out)
        return tape.gradient(total, [x, *layer.trainable_variables])

    def run():
        return [g.numpy() for g in grad(x)][0]

    return run, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow"])
    parser.add_argument("--quick", action="store_true", help="tiny smoke config")
    common.add_host_memory_flag(parser)
    parser.add_argument("--max-length", type=int, default=None)
    args = parser.parse_args()
    host_memory = common.select_backend(args.backend, args.system_malloc)
    print(host_memory, flush=True)

    import keras
    import numpy as np

    import keras_attn

    max_length = args.max_length or (256 if args.quick else 4096)
    windows = 2 if args.quick else 3
    rng = np.random.default_rng(0)
    print(f"backend: {args.backend}")
    print(
        f"{'n':>5} {'layer':<20}{'fwd+bwd (ms)':>13}"
        f"{'XLA temp (MiB)':>16}{'scores (MiB)':>14}"
    )
    length = 128
    while length <= max_length:
        x = keras.ops.convert_to_tensor(
            rng.standard_normal((1, length, HIDDEN), "float32")
        )
        keep = np.arange(length) < length - length // 8
        # (1, query_len, key_len)
        mask = keras.ops.convert_to_tensor(np.broadcast_to(keep, (1, length, length)))
        layers = {
            "keras-attn fused": keras_attn.layers.MultiHeadAttention(
                HEADS, HIDDEN // HEADS
            ),
            "keras-attn explicit": keras_attn.layers.MultiHeadAttention(
                HEADS, HIDDEN // HEADS, flash_attention=False
            ),
            "keras.layers.MHA": keras.layers.MultiHeadAttention(HEADS, HIDDEN // HEADS),
        }
        steps, temps = {}, {}
        for name, layer in layers.items():
            steps[name], temps[name] = make_step(layer, x, mask, args.backend)
            steps[name]()
        medians = common.interleaved_medians(steps, windows, 1)
        scores_mib = HEADS * length * length * 4 / 2**20
        for name, seconds in medians.items():
            temp = "n/a" if temps[name] is None else f"{temps[name] / 2**20:.1f}"
            print(
                f"{length:>5} {name:<20}{seconds * 1e3:>13.1f}"
                f"{temp:>16}{scores_mib:>14.1f}",
                flush=True,
            )
        length *= 2


if __name__ == "__main__":
    main()
