"""Training step with the blocks' `LayerNorm` against Keras's layer norm.

    python bench/layer_norm_step.py --backend jax
    python bench/layer_norm_step.py --backend tensorflow
    python bench/layer_norm_step.py --backend jax --quick   # smoke run

Two copies of the translation recipe's quick model (4 + 4 layers, d 128,
ff 256, vocabulary 8000, dropout 0.1; the recipe's loss, optimizer and
metric) with the same weights, at a batch of 64 x 32 tokens: one as
shipped, whose 20 norms are `keras_attn.layers.LayerNorm` (a written-out
gradient, `keras_attn.layers.layer_norm`), one whose norms run
`keras.layers.LayerNormalization.call` (`keras.ops.layer_normalization`,
differentiated automatically). `train_on_batch` steps of the two are
timed in interleaved windows; it prints the medians and their ratio.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

FULL = dict(batch_size=64, length=32, windows=9, steps=3, warmup=3)
QUICK = dict(batch_size=2, length=8, windows=1, steps=1, warmup=1)
QUICK_MODEL = dict(
    num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, vocabulary_size=64
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow"])
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    common.add_host_memory_flag(parser)
    return parser.parse_args(argv)


def build_models(config, batch_size, length):
    """{"keras-attn LayerNorm": model, "keras LayerNormalization": model}."""
    import keras
    import numpy as np

    from keras_attn.layers import LayerNorm
    from keras_attn_recipes.translation_steps import build_model

    rng = np.random.default_rng(0)
    tokens = rng.integers(4, config.vocabulary_size, (3, batch_size, length))
    tokens = tokens.astype("int32")
    x = {"encoder_tokens": tokens[0], "decoder_tokens": tokens[1]}
    y = tokens[2]
    models = {}
    for name in ("keras-attn LayerNorm", "keras LayerNormalization"):
        keras.utils.set_random_seed(0)
        model = build_model(config, config.vocabulary_size)
        norms = [
            layer for layer in model._flatten_layers() if isinstance(layer, LayerNorm)
        ]
        if name == "keras LayerNormalization":
            for layer in norms:
                # The same layer and weights; Keras's computation.
                layer.call = keras.layers.LayerNormalization.call.__get__(layer)
        models[name] = model
    return models, x, y, len(norms)


def main(argv=None):
    args = parse_args(argv)
    print(common.select_backend(args.backend, args.system_malloc), flush=True)
    import keras

    from keras_attn_recipes.translation_config import SETTINGS

    sizes = QUICK if args.quick else FULL
    # The quick setting's model as of 2026-11-24 (vocabulary 8000,
    # post-norm), which docs/performance.md measures before and after;
    # pinned so that later changes to the setting leave the series
    # comparable.
    config = SETTINGS["quick"].replace(vocabulary_size=8000, normalize_first=False)
    if args.quick:
        config = config.replace(**QUICK_MODEL)
    models, x, y, norm_count = build_models(config, sizes["batch_size"], sizes["length"])
    print(
        f"keras {keras.__version__}, backend {args.backend}; quick translation "
        f"model ({config.num_layers}+{config.num_layers} layers, d "
        f"{config.hidden_dim}, vocabulary {config.vocabulary_size}), batch "
        f"{sizes['batch_size']} x {sizes['length']}, {norm_count} norms"
    )
    steps = {}
    for name, model in models.items():
        for _ in range(sizes["warmup"]):
            model.train_on_batch(x, y)
        steps[name] = lambda model=model: model.train_on_batch(x, y)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    medians = common.interleaved_medians(
        steps, args.windows or sizes["windows"], sizes["steps"], clock=clock
    )
    for name, seconds in medians.items():
        print(f"{name:<26} {seconds * 1000:9.1f} ms per step ({args.clock} clock)")
    ratio = medians["keras LayerNormalization"] / medians["keras-attn LayerNorm"]
    print(f"ratio keras LayerNormalization / keras-attn LayerNorm: {ratio:.3f}")


if __name__ == "__main__":
    main()
