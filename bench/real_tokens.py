"""Real-token training throughput on Multi30k: token-budget buckets vs padding.

    python bench/real_tokens.py --backend jax
    python bench/real_tokens.py --backend tensorflow
    python bench/real_tokens.py --backend jax --quick   # smoke run

One `keras_attn.models.Transformer` (the shapes of `train_throughput.py`)
trains in ONE process on Multi30k English-German fed two ways:

* padded: every sentence padded to 128 tokens, 64 pairs a batch, as the
  TensorFlow Transformer tutorial does (`keras_attn.text.make_padded_dataset`);
* bucketed: `keras_attn.text.make_translation_dataset` with a 4096-token
  budget per batch, length buckets and `pad_remainder=True`, so each bucket
  has one batch shape and compiles once.

The first batches of each (shuffled, repeating) stream are fixed up front;
every batch shape is compiled before timing; then the two feeds are timed in
interleaved windows. Throughput counts non-padding tokens only (source plus
target), which is what training actually learns from.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

FULL = dict(
    split="train",
    tokenizer_sentences=20000,
    vocabulary_size=8000,
    hidden_dim=256,
    num_layers=3,
    num_heads=8,
    intermediate_dim=1024,
    sequence_length=128,
    batch_size=64,
    max_tokens_per_batch=4096,
    padded_batches=4,
    bucketed_batches=8,
    windows=3,
)
QUICK = dict(
    split="val",
    tokenizer_sentences=2000,
    vocabulary_size=300,
    hidden_dim=32,
    num_layers=1,
    num_heads=2,
    intermediate_dim=64,
    sequence_length=64,
    batch_size=8,
    max_tokens_per_batch=256,
    padded_batches=2,
    # One batch shape per feed: each shape is one more compilation, the
    # most of a smoke run's time (a minute each on TensorFlow's XLA).
    bucketed_batches=1,
    windows=2,
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow"])
    parser.add_argument("--quick", action="store_true", help="tiny smoke config")
    common.add_host_memory_flag(parser)
    args = parser.parse_args()
    host_memory = common.select_backend(args.backend, args.system_malloc)
    print(host_memory, flush=True)

    import keras
    import numpy as np

    import keras_attn
    from keras_attn.text import (
        SubwordTokenizer,
        load_multi30k,
        make_padded_dataset,
        make_translation_dataset,
    )
    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    c = QUICK if args.quick else FULL
    sources, targets = load_multi30k(c["split"])
    subset = c["tokenizer_sentences"] // 2
    tokenizer = SubwordTokenizer.train(
        sources[:subset] + targets[:subset], vocabulary_size=c["vocabulary_size"]
    )
    feeds = {
        "padded": make_padded_dataset(
            sources,
            targets,
            tokenizer,
            sequence_length=c["sequence_length"],
            batch_size=c["batch_size"],
            repeat=True,
        ).take(c["padded_batches"]),
        "bucketed": make_translation_dataset(
            sources,
            targets,
            tokenizer,
            max_tokens_per_batch=c["max_tokens_per_batch"],
            max_length=c["sequence_length"],
            repeat=True,
            pad_remainder=True,
        ).take(c["bucketed_batches"]),
    }
    batches = {
        name: [
            ({k: v.numpy() for k, v in inputs.items()}, labels.numpy())
            for inputs, labels in dataset
        ]
        for name, dataset in feeds.items()
    }

    keras.utils.set_random_seed(0)
    model = keras_attn.models.Transformer(
        vocabulary_size=tokenizer.vocabulary_size,
        num_layers=c["num_layers"],
        hidden_dim=c["hidden_dim"],
        num_heads=c["num_heads"],
        intermediate_dim=c["intermediate_dim"],
        max_sequence_length=c["sequence_length"],
        pad_id=tokenizer.pad_id,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=MaskedSparseCategoricalCrossentropy(
            label_smoothing=0.0, ignore_class=tokenizer.pad_id
        ),
        jit_compile=True,
    )

    # Compile every batch shape once before timing.
    seen = set()
    for feed in batches.values():
        for inputs, labels in feed:
            if labels.shape not in seen:
                seen.add(labels.shape)
                model.train_on_batch(inputs, labels)

    real = {}
    positions = {}
    for name, feed in batches.items():
        real[name] = sum(
            int(np.sum(x["encoder_tokens"] != tokenizer.pad_id))
            + int(np.sum(y != tokenizer.pad_id))
            for x, y in feed
        )
        positions[name] = sum(2 * y.size for _, y in feed)
        shapes = sorted({y.shape for _, y in feed})
        print(f"{name}: {len(feed)} batches, shapes {shapes}", flush=True)

    seconds = {name: [] for name in batches}
    for window in range(c["windows"]):
        order = list(batches) if window % 2 == 0 else list(batches)[::-1]
        for name in order:
            start = time.perf_counter()
            for inputs, labels in batches[name]:
                model.train_on_batch(inputs, labels)
            seconds[name].append(time.perf_counter() - start)

    print(f"backend: {args.backend}")
    print(f"{'feed':<10}{'real tokens':>12}{'padding':>9}{'real tokens/s':>15}")
    rate = {}
    for name in batches:
        median = float(np.median(seconds[name]))
        rate[name] = real[name] / median
        padding = 1.0 - real[name] / positions[name]
        print(f"{name:<10}{real[name]:>12}{padding:>9.1%}{rate[name]:>15.0f}")
    print(f"ratio bucketed/padded: {rate['bucketed'] / rate['padded']:.2f}x")


if __name__ == "__main__":
    main()
