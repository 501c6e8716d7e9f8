"""Decoding throughput: the key/value cache against recomputing the decoder.

    python bench/decoding_throughput.py --backend jax
    python bench/decoding_throughput.py --backend tensorflow
    python bench/decoding_throughput.py --backend jax --quick   # smoke run
    python bench/decoding_throughput.py --backend jax --config base-gpu   # a GPU
    python bench/decoding_throughput.py --backend jax --config base-gpu --smoke

A Transformer with random weights (hidden 256, 3 + 3 layers, 8 heads,
feed-forward 1024, vocabulary 8000) translates a batch of 32 random source
sentences of 24 tokens into exactly 64 new tokens, three ways, each compiled
by `keras_attn.generation.SequenceGenerator` (XLA on JAX; `tf.function` on
TensorFlow, without XLA on a CPU-only machine, as Keras chooses):

- greedy search with the key/value cache (`use_cache=True`);
- greedy search recomputing the whole decoder over the full 65-position
  token buffer at every step (`use_cache=False`: the baseline);
- beam search, beam 4, with the cache.

The end id's output bias is set to -1e4 so that no sentence ends early and
every strategy decodes all 64 steps. Each generator is called once to
compile (reported as "first call"), then timed `--runs` times; the table
gives the median. Tokens/s counts output tokens (`batch * 64`), so beam
search does 4 times the decoder work per token.

`--config base-gpu` decodes with the paper's base model (d 512, 6 + 6
layers, ff 2048, 8 heads, vocabulary 37,000, untied) under the
`mixed_bfloat16` policy, a batch of 64 sources of 32 tokens into 64 new
tokens: the GPU sizes. `--smoke` runs a config's code path (its dtype
policy) at the quick sizes, one timed run: a start-up check on any machine.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FULL = dict(
    vocabulary_size=8000,
    num_layers=3,
    hidden_dim=256,
    num_heads=8,
    intermediate_dim=1024,
    batch_size=32,
    source_length=24,
    new_tokens=64,
    dtype_policy="float32",
)
BASE_GPU = dict(
    vocabulary_size=37000,
    num_layers=6,
    hidden_dim=512,
    num_heads=8,
    intermediate_dim=2048,
    batch_size=64,
    source_length=32,
    new_tokens=64,
    dtype_policy="mixed_bfloat16",
)
CONFIGS = {"cpu": FULL, "base-gpu": BASE_GPU}
QUICK = dict(
    vocabulary_size=500,
    num_layers=1,
    hidden_dim=32,
    num_heads=2,
    intermediate_dim=64,
    batch_size=4,
    source_length=6,
    new_tokens=8,
    dtype_policy="float32",
)
PAD_ID, START_ID, END_ID = 0, 2, 3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("jax", "tensorflow", "torch"), default="jax")
    parser.add_argument(
        "--runs", type=int, default=5, help="timed runs per strategy (median)"
    )
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument(
        "--quick", action="store_true", help="a tiny model and batch: a smoke run"
    )
    parser.add_argument(
        "--config",
        choices=sorted(CONFIGS),
        default="cpu",
        help="cpu: d 256, 3+3 layers, float32 (default); base-gpu: the paper's "
        "base model in mixed_bfloat16, batch 64",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the chosen config's code path (dtype policy) at the quick sizes",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1. Received: --runs={args.runs}")
    if args.beam_size < 1:
        parser.error(
            f"--beam-size must be >= 1. Received: --beam-size={args.beam_size}"
        )
    return args


def time_generator(generator, source, runs):
    """`(first call seconds, median seconds, output)`; outputs are NumPy."""
    start = time.perf_counter()
    generator.generate(source)  # compiles
    first = time.perf_counter() - start
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        output = generator.generate(source)
        seconds.append(time.perf_counter() - start)
    return first, statistics.median(seconds), output


def main(argv=None):
    args = parse_args(argv)
    # The backend must be chosen before Keras is imported.
    os.environ["KERAS_BACKEND"] = args.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT))
    import keras
    import numpy as np

    from keras_attn.generation import SequenceGenerator
    from keras_attn.models import Transformer

    shape = QUICK if args.quick else CONFIGS[args.config]
    if args.smoke:
        shape = dict(QUICK, dtype_policy=shape["dtype_policy"])
    runs = 1 if args.quick or args.smoke else args.runs
    keras.config.set_dtype_policy(shape["dtype_policy"])
    keras.utils.set_random_seed(0)
    model = Transformer(
        vocabulary_size=shape["vocabulary_size"],
        num_layers=shape["num_layers"],
        hidden_dim=shape["hidden_dim"],
        num_heads=shape["num_heads"],
        intermediate_dim=shape["intermediate_dim"],
        dropout=0.0,
        tie_embeddings=False,
        pad_id=PAD_ID,
    )
    # No sentence ends: every strategy decodes exactly `new_tokens` steps.
    kernel, bias = model.get_layer("logits").get_weights()
    bias[END_ID] = -1.0e4
    model.get_layer("logits").set_weights([kernel, bias])

    rng = np.random.default_rng(0)
    source = rng.integers(
        4, shape["vocabulary_size"], (shape["batch_size"], shape["source_length"])
    ).astype("int32")
    common = dict(start_id=START_ID, end_id=END_ID, max_length=shape["new_tokens"])
    strategies = {
        "greedy, cached": SequenceGenerator(model, "greedy", **common),
        "greedy, uncached": SequenceGenerator(
            model, "greedy", use_cache=False, **common
        ),
        f"beam {args.beam_size}, cached": SequenceGenerator(
            model, "beam", beam_size=args.beam_size, **common
        ),
    }

    try:
        devices = ", ".join(keras.distribution.list_devices())
    except Exception:  # a backend without `list_devices`
        devices = "unknown"
    print(
        f"backend {args.backend} (keras {keras.__version__}), devices: {devices}\n"
        f"model: vocabulary {shape['vocabulary_size']}, hidden {shape['hidden_dim']}, "
        f"{shape['num_layers']}+{shape['num_layers']} layers, "
        f"{shape['num_heads']} heads, ff {shape['intermediate_dim']}, "
        f"dtype policy {shape['dtype_policy']}\n"
        f"batch {shape['batch_size']}, source length {shape['source_length']}, "
        f"{shape['new_tokens']} new tokens, median of {runs} runs after a warm-up"
    )
    output_tokens = shape["batch_size"] * shape["new_tokens"]
    results = {}
    print(f"\n{'strategy':<20} {'first call s':>12} {'median s':>10} {'tokens/s':>10}")
    for name, generator in strategies.items():
        first, seconds, output = time_generator(generator, source, runs)
        results[name] = (seconds, output)
        print(
            f"{name:<20} {first:>12.2f} {seconds:>10.3f} "
            f"{output_tokens / seconds:>10.0f}",
            flush=True,
        )

    cached, uncached = results["greedy, cached"], results["greedy, uncached"]
    if np.any(cached[1]["tokens"] == PAD_ID):
        sys.exit("A sentence ended early: the timings cover fewer steps.")
    differing = np.sum(np.any(cached[1]["tokens"] != uncached[1]["tokens"], axis=1))
    print(
        f"\ncached / uncached greedy speedup: {uncached[0] / cached[0]:.1f}x "
        f"(sentences whose tokens differ: {differing} of {shape['batch_size']})"
    )


if __name__ == "__main__":
    main()
