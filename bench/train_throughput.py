"""Training-step throughput: keras-attn vs keras-hub vs a keras.layers build.

    python bench/train_throughput.py --backend jax
    python bench/train_throughput.py --backend tensorflow
    python bench/train_throughput.py --backend torch   # eager; --torch-compile
    python bench/train_throughput.py --backend jax --quick   # smoke run

Three encoder-decoder Transformers of identical shapes (post-norm, learned
positions, separate encoder/decoder embeddings and output projection, ReLU,
dropout 0.1, float32) train in ONE process on the same random batches with
the same loss (`keras_attn.training.MaskedSparseCategoricalCrossentropy`,
label smoothing 0, padding id 0 ignored), the same optimizer (Adam) and
`jit_compile=True` (on torch: eager steps, Keras's default there, unless
`--torch-compile`):

1. `keras_attn.models.Transformer`;
2. keras-hub 0.32's `TokenAndPositionEmbedding`, `TransformerEncoder`,
   `TransformerDecoder`;
3. `keras.layers.MultiHeadAttention` blocks written as in the Keras
   English-to-Spanish translation example.

After warm-up (compilation), the models are timed in interleaved windows
(rotating order) and the median step time per model is reported as tokens/s,
counting source plus target positions (`batch * (source_len + target_len)`).

Model FLOPs utilisation (MFU) = model FLOPs per step / step time / measured
float32 matmul peak (a compiled `keras.ops.matmul` timed in this process).
Model FLOPs per step count the matrix products only, forward x 3 (forward
plus the two backward products), with `2*m*n*k` per product:

* encoder layer, per source token: `8 d^2` (Q, K, V, O projections)
  `+ 4 d f` (feed-forward) `+ 4 S d` (scores and weighted values);
* decoder layer, per target token: `8 d^2 + 4 T d` (self-attention)
  `+ 4 d^2 + 4 S d` (cross Q, O, scores, values) `+ 4 d f`; per source token
  `4 d^2` (cross K, V);
* output projection, per target token: `2 d V`.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

FULL = dict(
    hidden_dim=256,
    num_layers=3,
    num_heads=8,
    intermediate_dim=1024,
    vocabulary_size=8000,
    dropout=0.1,
    batch_size=64,
    length=24,
    warmup=3,
    windows=7,
    steps_per_window=3,
    num_batches=4,
)
QUICK = dict(
    hidden_dim=32,
    num_layers=1,
    num_heads=2,
    intermediate_dim=64,
    vocabulary_size=200,
    dropout=0.1,
    batch_size=4,
    length=8,
    warmup=1,
    windows=2,
    steps_per_window=1,
    num_batches=2,
)


def model_flops_per_step(c):
    """Matrix-product FLOPs of one training step (forward x 3)."""
    d, f, v = c["hidden_dim"], c["intermediate_dim"], c["vocabulary_size"]
    s = t = c["length"]
    layers = c["num_layers"]
    encoder = layers * s * (8 * d * d + 4 * d * f + 4 * s * d)
    decoder = layers * (
        t * (8 * d * d + 4 * t * d + 4 * d * d + 4 * s * d + 4 * d * f) + s * 4 * d * d
    )
    output = t * 2 * d * v
    return 3 * c["batch_size"] * (encoder + decoder + output)


def build_keras_attn(c):
    import keras_attn

    return keras_attn.models.Transformer(
        vocabulary_size=c["vocabulary_size"],
        num_layers=c["num_layers"],
        hidden_dim=c["hidden_dim"],
        num_heads=c["num_heads"],
        intermediate_dim=c["intermediate_dim"],
        dropout=c["dropout"],
        max_sequence_length=c["length"],
        position="learned",
        tie_embeddings=False,
        layer_norm_epsilon=1e-5,
    )


def build_keras_hub(c):
    import keras
    import keras_hub

    def embedding(name):
        return keras_hub.layers.TokenAndPositionEmbedding(
            c["vocabulary_size"],
            c["length"],
            c["hidden_dim"],
            mask_zero=True,
            name=name,
        )

    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    x = keras.layers.Dropout(c["dropout"])(embedding("enc_emb")(encoder_tokens))
    for _ in range(c["num_layers"]):
        x = keras_hub.layers.TransformerEncoder(
            c["intermediate_dim"], c["num_heads"], dropout=c["dropout"]
        )(x)
    y = keras.layers.Dropout(c["dropout"])(embedding("dec_emb")(decoder_tokens))
    for _ in range(c["num_layers"]):
        y = keras_hub.layers.TransformerDecoder(
            c["intermediate_dim"], c["num_heads"], dropout=c["dropout"]
        )(y, x)
    logits = keras.layers.Dense(c["vocabulary_size"])(y)
    return keras.Model(
        {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}, logits
    )


def build_keras_mha(c):
    """The Keras tutorial's build: `keras.layers.MultiHeadAttention` blocks."""
    import keras
    from keras import ops

    d, h, f, p = c["hidden_dim"], c["num_heads"], c["intermediate_dim"], c["dropout"]

    class PositionalEmbedding(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.tokens = keras.layers.Embedding(c["vocabulary_size"], d)
            self.positions = keras.layers.Embedding(c["length"], d)

        def call(self, ids):
            positions = ops.arange(ops.shape(ids)[-1])
            return self.tokens(ids) + self.positions(positions)

    def feed_forward(x):
        y = keras.layers.Dense(f, activation="relu")(x)
        return keras.layers.Dense(d)(y)

    def sublayer(x, y):
        return keras.layers.LayerNormalization(epsilon=1e-5)(
            x + keras.layers.Dropout(p)(y)
        )

    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    source_mask = ops.not_equal(encoder_tokens, 0)  # (batch, source_len)
    target_mask = ops.not_equal(decoder_tokens, 0)  # (batch, target_len)
    # (batch, query_len, key_len), as the tutorial builds them
    encoder_attention_mask = source_mask[:, None, :]
    cross_attention_mask = ops.logical_and(
        target_mask[:, :, None], source_mask[:, None]
    )
    self_attention_mask = target_mask[:, None, :]

    x = keras.layers.Dropout(p)(PositionalEmbedding()(encoder_tokens))
    for _ in range(c["num_layers"]):
        attn = keras.layers.MultiHeadAttention(h, d // h, dropout=0.0)
        x = sublayer(x, attn(x, x, attention_mask=encoder_attention_mask))
        x = sublayer(x, feed_forward(x))
    y = keras.layers.Dropout(p)(PositionalEmbedding()(decoder_tokens))
    for _ in range(c["num_layers"]):
        self_attn = keras.layers.MultiHeadAttention(h, d // h)
        y = sublayer(
            y,
            self_attn(y, y, attention_mask=self_attention_mask, use_causal_mask=True),
        )
        cross_attn = keras.layers.MultiHeadAttention(h, d // h)
        y = sublayer(y, cross_attn(y, x, attention_mask=cross_attention_mask))
        y = sublayer(y, feed_forward(y))
    logits = keras.layers.Dense(c["vocabulary_size"])(y)
    return keras.Model(
        {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}, logits
    )


def make_batches(c, seed=0):
    """Random token batches with end padding (lengths from half to full)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batches = []
    shape = (c["batch_size"], c["length"])
    for _ in range(c["num_batches"]):
        lengths = rng.integers(c["length"] // 2, c["length"] + 1, size=(2, shape[0]))
        positions = np.arange(c["length"])[None, :]
        tokens = rng.integers(1, c["vocabulary_size"], size=(3, *shape))
        source = np.where(positions < lengths[0][:, None], tokens[0], 0)
        target = np.where(positions < lengths[1][:, None], tokens[1], 0)
        labels = np.where(positions < lengths[1][:, None], tokens[2], 0)
        batches.append(
            (
                {
                    "encoder_tokens": source.astype("int32"),
                    "decoder_tokens": target.astype("int32"),
                },
                labels.astype("int32"),
            )
        )
    return batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow", "torch"])
    parser.add_argument("--quick", action="store_true", help="tiny smoke config")
    common.add_host_memory_flag(parser)
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="torch only: jit_compile=True (torch.compile) instead of Keras's "
        "default for torch, eager steps",
    )
    args = parser.parse_args()
    host_memory = common.select_backend(args.backend, args.system_malloc)
    print(host_memory, flush=True)

    import keras

    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    c = dict(QUICK if args.quick else FULL)
    if args.windows:
        c["windows"] = args.windows
    keras.utils.set_random_seed(0)
    batches = make_batches(c)
    builders = {
        "keras-attn": build_keras_attn,
        "keras-hub": build_keras_hub,
        "keras.layers.MHA": build_keras_mha,
    }
    # XLA on JAX and TensorFlow; on torch Keras's default is eager steps
    # (`jit_compile="auto"` resolves to False), `--torch-compile` asks for
    # `torch.compile`.
    jit_compile = args.backend != "torch" or args.torch_compile
    steps = {}
    for name, build in builders.items():
        model = build(c)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4),
            loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
            jit_compile=jit_compile,
        )
        counter = [0]

        def step(model=model, counter=counter):
            x, y = batches[counter[0] % len(batches)]
            counter[0] += 1
            model.train_on_batch(x, y)

        for _ in range(c["warmup"]):
            step()
        print(
            f"{name}: {model.count_params():,} parameters, "
            f"jit_compile={model.jit_compile}",
            flush=True,
        )
        steps[name] = step

    peak = common.matmul_peak_flops(256 if args.quick else 1024)
    medians = common.interleaved_medians(steps, c["windows"], c["steps_per_window"])
    peak = max(peak, common.matmul_peak_flops(256 if args.quick else 1024))
    tokens = c["batch_size"] * 2 * c["length"]
    flops = model_flops_per_step(c)
    print(f"backend: {args.backend}")
    print(f"matmul peak: {peak / 1e9:.1f} GFLOP/s (float32)")
    print(f"model FLOPs per step: {flops / 1e9:.2f} GFLOP, tokens per step: {tokens}")
    print(f"{'model':<18}{'step (ms)':>10}{'tokens/s':>10}{'MFU':>8}")
    for name, seconds in medians.items():
        mfu = flops / seconds / peak
        print(f"{name:<18}{seconds * 1e3:>10.1f}{tokens / seconds:>10.0f}{mfu:>8.1%}")
    ours = medians["keras-attn"]
    for name in ("keras-hub", "keras.layers.MHA"):
        print(f"ratio keras-attn/{name}: {medians[name] / ours:.2f}x")


if __name__ == "__main__":
    main()
