"""Streamed against unstreamed decoding: time to first chunk and tokens/s.

Decodes a batch of prompts with a randomly initialized `TransformerLM`
(greedy, no end id, so every run decodes the same number of steps) once
with `SequenceGenerator.generate` and once with `SequenceGenerator.stream`
in chunks of `--chunk-tokens`, each after a warm-up call that compiles it.
Prints the time to the first chunk, both throughputs and their ratio.

    KERAS_BACKEND=jax python bench/streaming.py --chunk-tokens 16
"""

import argparse
import time

import keras
import numpy as np

from keras_attn.generation import GreedySampler, SequenceGenerator
from keras_attn.models import TransformerLM


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--chunk-tokens", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args()


def main():
    args = _parse()
    keras.utils.set_random_seed(0)
    model = TransformerLM(
        vocabulary_size=1000,
        num_layers=args.num_layers,
        hidden_dim=args.d_model,
        num_heads=4,
        intermediate_dim=4 * args.d_model,
        max_sequence_length=args.max_length,
        dropout=0.0,
    )
    prompts = np.random.default_rng(0).integers(
        4, 1000, (args.batch_size, args.prompt_length)
    )
    prompts = prompts.astype("int32")
    generator = SequenceGenerator(
        model, sampler=GreedySampler(), end_id=None, max_length=args.max_length
    )
    new_tokens = args.batch_size * (args.max_length - args.prompt_length)

    generator.generate(prompts)  # compiles
    unstreamed = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        expected = generator.generate(prompts)["tokens"]
        unstreamed.append(time.perf_counter() - start)

    list(generator.stream(prompts, chunk_tokens=args.chunk_tokens))  # compiles
    streamed, first = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        chunks = generator.stream(prompts, chunk_tokens=args.chunk_tokens)
        tokens = [next(chunks)]
        first.append(time.perf_counter() - start)
        tokens.extend(chunks)
        streamed.append(time.perf_counter() - start)
        np.testing.assert_array_equal(tokens[-1], expected)

    backend = keras.backend.backend()
    best_unstreamed, best_streamed = min(unstreamed), min(streamed)
    print(
        f"backend={backend} batch={args.batch_size} new_tokens/row="
        f"{args.max_length - args.prompt_length} chunk_tokens={args.chunk_tokens} "
        f"d_model={args.d_model} layers={args.num_layers} (best of {args.repeats})"
    )
    print(f"unstreamed: {new_tokens / best_unstreamed:9.1f} tokens/s")
    print(
        f"streamed:   {new_tokens / best_streamed:9.1f} tokens/s, first chunk "
        f"after {1000 * min(first):.1f} ms"
    )
    print(f"streamed / unstreamed throughput: {best_unstreamed / best_streamed:.3f}")


if __name__ == "__main__":
    main()
