"""Cached greedy decoding of a causal LM: keras-attn against keras-hub.

    python bench/lm_decoding.py --backend torch
    python bench/lm_decoding.py --backend jax
    python bench/lm_decoding.py --backend tensorflow
    python bench/lm_decoding.py --backend torch --smoke   # tiny sizes, one run
    python bench/lm_decoding.py --backend torch --torch-threads 1
    python bench/lm_decoding.py --backend torch --torch-compile   # both sides

Both sides decode the same work with random weights: a pre-norm decoder-only
LM (hidden 256, 3 layers, 8 heads, feed-forward 1024, GELU, learned
positions, tied embeddings, vocabulary 8000), a batch of 32 prompts of 8
tokens continued by exactly 64 greedy tokens with a key/value cache:

- keras-attn: `keras_attn.models.TransformerLM` and
  `keras_attn.generation.generate_lm` with a `GreedySampler`;
- keras-attn with grouped-query heads (`--key-value-heads`, default `2,1`):
  the same model with `num_key_value_heads` of 2 and 1 (multi-query), whose
  key/value cache holds 4 and 8 times fewer heads; same work elsewhere
  (the key and value projections shrink with the heads);
- keras-hub: `keras_hub.layers.TokenAndPositionEmbedding` (tied),
  `keras_hub.layers.TransformerDecoder` blocks with their
  `self_attention_cache`, and `keras_hub.samplers.GreedySampler`, wired as
  keras-hub's own causal LMs do (the cache is first filled by a pass over the
  whole token buffer, then one position per step).

No end id stops either loop. Each side's loop is the `call` of a small
`keras.Model` and runs through `predict_on_batch`, so Keras compiles both
the same way: `jax.jit` on JAX, `tf.function` on TensorFlow, eagerly on
torch (where Keras compiles nothing by default; `--torch-compile` compiles
every side with `jit_compile=True`, so Keras hands its predict step to
`torch.compile`). The first call is timed and reported apart; then the
sides are timed in turn (`--runs` times, interleaved) and the medians and
their ratio printed. On torch the build
(`torch.__version__`, CUDA or `+cpu`), the thread count and whether
denormals are flushed are printed; on every backend the load average at
start and end (see `bench/train_throughput.py`).
"""

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import common  # noqa: E402  (no Keras import: the backend is chosen in main)

FULL = dict(
    vocabulary_size=8000,
    num_layers=3,
    hidden_dim=256,
    num_heads=8,
    intermediate_dim=1024,
    batch_size=32,
    prompt_length=8,
    new_tokens=64,
)
SMOKE = dict(
    vocabulary_size=300,
    num_layers=1,
    hidden_dim=32,
    num_heads=2,
    intermediate_dim=64,
    batch_size=2,
    prompt_length=3,
    new_tokens=4,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", choices=("jax", "tensorflow", "torch"), default="jax"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per side")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run")
    parser.add_argument(
        "--key-value-heads",
        default="2,1",
        help="comma-separated `num_key_value_heads` of extra keras-attn "
        "sides (grouped-query, 1 = multi-query); '' for none",
    )
    common.add_torch_threads_flag(parser)
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="torch only: every side with jit_compile=True (torch.compile) "
        "instead of Keras's default for torch, eager",
    )
    args = parser.parse_args(argv)
    if args.torch_compile and args.backend != "torch":
        parser.error(
            "--torch-compile applies to --backend torch only. "
            f"Received: --backend {args.backend}"
        )
    try:
        args.key_value_heads = [
            int(n) for n in args.key_value_heads.split(",") if n.strip()
        ]
    except ValueError:
        parser.error(
            "--key-value-heads must be comma-separated integers. "
            f"Received: --key-value-heads={args.key_value_heads}"
        )
    if args.runs < 1:
        parser.error(f"--runs must be >= 1. Received: --runs={args.runs}")
    common.check_torch_threads_flag(parser, args)
    return args


def build_keras_attn(keras, shape, num_key_value_heads=None):
    from keras_attn.generation import GreedySampler, generate_lm
    from keras_attn.models import TransformerLM

    lm = TransformerLM(
        vocabulary_size=shape["vocabulary_size"],
        num_layers=shape["num_layers"],
        hidden_dim=shape["hidden_dim"],
        num_heads=shape["num_heads"],
        intermediate_dim=shape["intermediate_dim"],
        dropout=0.0,
        max_sequence_length=shape["prompt_length"] + shape["new_tokens"],
        attention={"num_key_value_heads": num_key_value_heads},
    )
    max_length = shape["prompt_length"] + shape["new_tokens"]

    class KerasAttnDecoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def call(self, prompts):
            return generate_lm(
                self.lm,
                prompts,
                max_length=max_length,
                end_id=None,
                sampler=GreedySampler(),
            )["tokens"]

    return KerasAttnDecoder()


def build_keras_hub(keras, shape):
    import keras_hub
    from keras import ops

    num_layers, num_heads = shape["num_layers"], shape["num_heads"]
    head_dim = shape["hidden_dim"] // num_heads
    max_length = shape["prompt_length"] + shape["new_tokens"]

    class KerasHubDecoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.embedding = keras_hub.layers.TokenAndPositionEmbedding(
                shape["vocabulary_size"],
                max_length,
                shape["hidden_dim"],
                tie_weights=True,
            )
            self.blocks = [
                keras_hub.layers.TransformerDecoder(
                    shape["intermediate_dim"],
                    num_heads,
                    dropout=0.0,
                    activation="gelu",
                    normalize_first=True,
                )
                for _ in range(num_layers)
            ]
            self.output_norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self.sampler = keras_hub.samplers.GreedySampler()

        def call_with_cache(self, token_ids, cache, index):
            x = self.embedding(token_ids, start_index=index)
            layer_caches = []
            for i, block in enumerate(self.blocks):
                x, layer_cache = block(
                    x,
                    self_attention_cache=cache[:, i],
                    self_attention_cache_update_index=index,
                )
                layer_caches.append(layer_cache)
            logits = self.embedding.token_embedding(self.output_norm(x), reverse=True)
            return logits, ops.stack(layer_caches, axis=1)

        def call(self, prompts):
            batch_size = ops.shape(prompts)[0]
            new = ops.zeros((batch_size, shape["new_tokens"]), "int32")
            buffer = ops.concatenate([prompts, new], axis=1)  # (batch, max_length)
            # The prompt positions are kept; the rest is generated.
            keep = ops.arange(max_length) < shape["prompt_length"]
            keep = ops.broadcast_to(keep[None, :], ops.shape(buffer))
            # (batch, layers, key/value, max_length, heads, head_dim)
            cache = ops.zeros(
                (batch_size, num_layers, 2, max_length, num_heads, head_dim),
                self.compute_dtype,
            )
            _, cache = self.call_with_cache(buffer, cache, 0)

            def next_token_logits(tokens, cache, index):
                position = index - 1
                token = ops.slice(tokens, [0, position], [batch_size, 1])
                logits, cache = self.call_with_cache(token, cache, position)
                return ops.squeeze(logits, axis=1), None, cache

            return self.sampler(
                next=next_token_logits,
                prompt=buffer,
                cache=cache,
                index=shape["prompt_length"],
                mask=keep,
                stop_token_ids=None,
            )

    return KerasHubDecoder()


def main(argv=None):
    args = parse_args(argv)
    os.environ["KERAS_BACKEND"] = args.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT))
    import keras
    import numpy as np

    torch_build = common.configure_torch(args.torch_threads)
    if torch_build:
        print(torch_build, flush=True)
    print(common.load_line("at start"), flush=True)

    shape = SMOKE if args.smoke else FULL
    runs = 1 if args.smoke else args.runs
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    prompts = rng.integers(
        4, shape["vocabulary_size"], (shape["batch_size"], shape["prompt_length"])
    ).astype("int32")
    sides = {
        "keras-hub": build_keras_hub(keras, shape),
        "keras-attn": build_keras_attn(keras, shape),
    }
    for heads in args.key_value_heads:
        if heads > shape["num_heads"] or shape["num_heads"] % heads:
            continue  # (the smoke sizes have 2 heads)
        sides[f"kv heads {heads}"] = build_keras_attn(keras, shape, heads)
    max_length = shape["prompt_length"] + shape["new_tokens"]
    print(
        f"backend {args.backend} (keras {keras.__version__}); vocabulary "
        f"{shape['vocabulary_size']}, hidden {shape['hidden_dim']}, "
        f"{shape['num_layers']} layers, {shape['num_heads']} heads, ff "
        f"{shape['intermediate_dim']}; batch {shape['batch_size']}, prompt "
        f"{shape['prompt_length']}, {shape['new_tokens']} new tokens, greedy, cached"
    )
    for name, side in sides.items():
        if args.torch_compile:
            side.compile(jit_compile=True)
        start = time.perf_counter()
        tokens = keras.ops.convert_to_numpy(side.predict_on_batch(prompts))
        print(f"{name}: first call {time.perf_counter() - start:.1f} s", flush=True)
        assert tokens.shape == (shape["batch_size"], max_length), (name, tokens.shape)
        np.testing.assert_array_equal(tokens[:, : shape["prompt_length"]], prompts)
    functions = {
        name: (lambda side=side: side.predict_on_batch(prompts))
        for name, side in sides.items()
    }
    medians = common.interleaved_medians(functions, windows=runs, steps_per_window=1)
    output_tokens = shape["batch_size"] * shape["new_tokens"]
    head_dim = shape["hidden_dim"] // shape["num_heads"]
    print(f"\n{'side':<12} {'median s':>10} {'tokens/s':>10} {'cache MB':>9}")
    for name, seconds in medians.items():
        heads = int(name.split()[-1]) if name.startswith("kv") else shape["num_heads"]
        # keys and values, float32, every layer: what each step reads.
        cache = 2 * 4 * shape["num_layers"] * shape["batch_size"] * max_length
        cache_mb = cache * heads * head_dim / 1e6
        print(
            f"{name:<12} {seconds:>10.3f} {output_tokens / seconds:>10.0f} "
            f"{cache_mb:>9.1f}"
        )
    ratio = medians["keras-hub"] / medians["keras-attn"]
    print(f"\nkeras-attn speed / keras-hub speed: {ratio:.2f}x")
    for name in medians:
        if name.startswith("kv"):
            gain = medians["keras-attn"] / medians[name]
            print(f"{name} speed / full heads (keras-attn) speed: {gain:.2f}x")
    if torch_build:
        print(torch_build)
    print(common.load_line("at end"))
    return medians


if __name__ == "__main__":
    main()
