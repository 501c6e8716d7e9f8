"""Training-step throughput: keras-attn vs keras-hub vs a keras.layers build.

    python bench/train_throughput.py --backend jax
    python bench/train_throughput.py --backend tensorflow
    python bench/train_throughput.py --backend torch   # eager; --torch-compile
    python bench/train_throughput.py --backend torch --torch-threads 1
    python bench/train_throughput.py --backend jax --quick   # smoke run
    python bench/train_throughput.py --backend jax --config base-gpu   # on a GPU
    python bench/train_throughput.py --backend jax --config base-gpu --smoke

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

keras-hub's one `dropout` also drops the attention weights, which
keras-attn's defaults (the paper's) do not; a fourth model, "keras-attn
(equal work)", is keras-attn with `attention_dropout` equal to keras-hub's
`dropout`, and its keras-hub ratio is printed beside the default one.

On torch the script prints the build (`torch.__version__`, the CUDA
version or the CPU-only `+cpu` wheel), the intra-op thread count and
whether denormals are flushed; on every backend, the load average at start
and end (above the CPU count, other jobs competed and the ratios are noise:
on torch with one OpenMP thread per core, a step then takes 3 to 30 times
its work; `--torch-threads 1` times the work itself).

After warm-up (compilation), the models are timed in interleaved windows
(rotating order) and the median step time per model is reported as tokens/s,
counting source plus target positions (`batch * (source_len + target_len)`).
A window is `steps_per_window` calls of `train_on_batch` (`--mode
train_on_batch`, the CPU default) or one `fit` epoch over `num_batches`
batches with `steps_per_execution` (`--mode fit`, base-gpu's default), whose
time is divided by its steps.

`--config base-gpu` is the paper's base model (d 512, 6 + 6 layers, ff 2048,
8 heads, vocabulary 37,000, untied) under the `mixed_bfloat16` policy, at
batches 128 x 64 and 64 x 256, trained by `fit` with `steps_per_execution`
16: the GPU benchmark. `--smoke` runs any config's code path (dtype
policy, mode, steps per execution) at the quick config's tiny sizes, one
window, as a start-up check on any machine.

Model FLOPs utilisation (MFU) = model FLOPs per step / step time / a peak:
the matmul peak measured in this process (a compiled `keras.ops.matmul` in
the compute dtype, float32 or bfloat16), and, where given (`--peak-tflops`;
base-gpu defaults to 989, an H100 SXM's dense bfloat16 peak), the device's
datasheet peak.
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
import time
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
    shapes=[(64, 24)],  # (batch, length) of source and target
    dtype_policy="float32",
    mode="train_on_batch",
    steps_per_execution=1,
    peak_tflops=None,
    matmul_size=1024,
    warmup=3,
    windows=7,
    steps_per_window=3,
    num_batches=4,
    print_windows=False,
)
QUICK = dict(
    FULL,
    hidden_dim=32,
    num_layers=1,
    num_heads=2,
    intermediate_dim=64,
    vocabulary_size=200,
    shapes=[(4, 8)],
    matmul_size=256,
    warmup=1,
    windows=2,
    steps_per_window=1,
    num_batches=2,
)
BASE_GPU = dict(
    hidden_dim=512,
    num_layers=6,
    num_heads=8,
    intermediate_dim=2048,
    vocabulary_size=37000,
    dropout=0.1,
    shapes=[(128, 64), (64, 256)],
    dtype_policy="mixed_bfloat16",
    mode="fit",
    steps_per_execution=16,
    peak_tflops=989.0,  # H100 SXM, dense bfloat16
    matmul_size=8192,
    warmup=1,  # one `fit` epoch: compiles
    windows=7,
    steps_per_window=1,
    num_batches=64,
    print_windows=True,  # a lease that ends mid-run keeps what it timed
)
CONFIGS = {"cpu": FULL, "base-gpu": BASE_GPU}


def smoke_config(c):
    """`c`'s code path (dtype policy, mode, steps per execution), tiny."""
    sizes = ("hidden_dim", "num_layers", "num_heads", "intermediate_dim")
    sizes += ("vocabulary_size", "shapes", "matmul_size")
    smoke = dict(c, **{k: QUICK[k] for k in sizes}, warmup=1, windows=1)
    smoke["steps_per_execution"] = min(c["steps_per_execution"], 2)
    smoke["num_batches"] = 2 * smoke["steps_per_execution"]
    return smoke


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
        attention={"dropout": c.get("attention_dropout", 0.0)},
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


BUILDERS = {
    "keras-attn": build_keras_attn,
    "keras-hub": build_keras_hub,
    "keras.layers.MHA": build_keras_mha,
    # keras-hub's `dropout` also drops attention weights: the same work.
    "keras-attn (equal work)": lambda c: build_keras_attn(
        dict(c, attention_dropout=c["dropout"])
    ),
}

# (ours, peer) pairs printed as peer time / our time when both were run.
# keras.layers.MHA drops no attention weights: keras-attn's default is its
# equal work; keras-hub drops them: "keras-attn (equal work)" is its.
RATIOS = (
    ("keras-attn", "keras-hub"),
    ("keras-attn", "keras.layers.MHA"),
    ("keras-attn (equal work)", "keras-hub"),
)


def parse_models(text):
    """`--models`: comma-separated names of `BUILDERS`, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BUILDERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {', '.join(BUILDERS)}. "
            f"Received: {text!r}"
        )
    return names


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backend", default="jax", choices=["jax", "tensorflow", "torch"]
    )
    parser.add_argument(
        "--config",
        default="cpu",
        choices=sorted(CONFIGS),
        help="cpu: d 256, 3+3 layers, float32, train_on_batch (default); "
        "base-gpu: the paper's base model, bf16, fit with steps_per_execution",
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke config")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the chosen config's code path at tiny sizes, one window",
    )
    parser.add_argument("--mode", choices=("train_on_batch", "fit"), default=None)
    parser.add_argument("--steps-per-execution", type=int, default=None)
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's dense peak in the compute dtype, for MFU "
        "(base-gpu: 989, an H100 SXM in bfloat16)",
    )
    common.add_host_memory_flag(parser)
    common.add_torch_threads_flag(parser)
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument(
        "--models",
        type=parse_models,
        default=list(BUILDERS),
        help="comma-separated models to build and time (default: all four); "
        "fewer models compile sooner, for a GPU lease",
    )
    parser.add_argument(
        "--shape",
        default=None,
        help="one batch shape BATCHxLENGTH (e.g. 64x256) instead of the "
        "config's list: a short run that fits a GPU lease",
    )
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="torch only: jit_compile=True (torch.compile) instead of Keras's "
        "default for torch, eager steps",
    )
    args = parser.parse_args(argv)
    common.check_torch_threads_flag(parser, args)
    if args.steps_per_execution is not None and args.steps_per_execution < 1:
        parser.error(
            "--steps-per-execution must be >= 1. "
            f"Received: --steps-per-execution={args.steps_per_execution}"
        )
    return args


def resolve_config(args):
    c = dict(QUICK if args.quick else CONFIGS[args.config])
    if args.smoke:
        c = smoke_config(c)
    for key in ("mode", "steps_per_execution", "peak_tflops", "windows"):
        if getattr(args, key) is not None:
            c[key] = getattr(args, key)
    if args.shape is not None:
        try:
            batch_size, length = (int(n) for n in args.shape.lower().split("x"))
        except ValueError:
            raise SystemExit(
                f"--shape must be BATCHxLENGTH, e.g. 64x256. Received: {args.shape}"
            ) from None
        c["shapes"] = [(batch_size, length)]
    if args.backend == "torch" and c["steps_per_execution"] > 1:
        # Keras's torch trainer runs one step per call (it refuses more).
        print(
            f"torch: steps_per_execution={c['steps_per_execution']} -> 1 "
            "(Keras's torch trainer runs one step per call)",
            flush=True,
        )
        c["steps_per_execution"] = 1
    if c["mode"] == "fit" and c["num_batches"] % c["steps_per_execution"]:
        # A last, shorter execution would time a second compiled program.
        c["num_batches"] += -c["num_batches"] % c["steps_per_execution"]
    return c


def make_step(model, batches, c):
    """One timed unit: `(callable, steps it runs)`."""
    import numpy as np

    if c["mode"] == "train_on_batch":
        counter = [0]

        def step():
            x, y = batches[counter[0] % len(batches)]
            counter[0] += 1
            model.train_on_batch(x, y)

        return step, 1
    x = {k: np.concatenate([b[0][k] for b in batches]) for k in batches[0][0]}
    y = np.concatenate([b[1] for b in batches])
    batch_size = len(batches[0][1])

    def epoch():
        history = model.fit(
            x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0
        )
        # The loss as a Python float waits for the last step: on a GPU,
        # dispatch is asynchronous and the next model's window would
        # otherwise be charged for this one's queued steps.
        float(history.history["loss"][-1])

    return epoch, len(batches)


def measure_shape(c, args, keras):
    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    keras.utils.set_random_seed(0)
    batches = make_batches(c)
    # XLA on JAX and TensorFlow; on torch Keras's default is eager steps
    # (`jit_compile="auto"` resolves to False), `--torch-compile` asks for
    # `torch.compile`.
    jit_compile = args.backend != "torch" or args.torch_compile
    steps, per_call = {}, {}
    for name in args.models:
        model = BUILDERS[name](c)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4),
            loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
            jit_compile=jit_compile,
            steps_per_execution=c["steps_per_execution"],
        )
        step, per_call[name] = make_step(model, batches, c)
        start = time.perf_counter()
        for _ in range(c["warmup"]):
            step()
        print(
            f"{name}: {model.count_params():,} parameters, "
            f"jit_compile={model.jit_compile}, warm-up (compilation) "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
        steps[name] = step
    windows, per_window = c["windows"], c["steps_per_window"]
    on_window = None
    if c["print_windows"]:

        def on_window(window, name, seconds):
            step_ms = seconds / per_call[name] * 1e3
            print(
                f"window {window + 1}/{windows}: {name} {step_ms:.1f} ms per step",
                flush=True,
            )

    medians = common.interleaved_medians(
        steps, windows, per_window, on_window=on_window
    )
    return {name: seconds / per_call[name] for name, seconds in medians.items()}


def main(argv=None):
    args = parse_args(argv)
    host_memory = common.select_backend(args.backend, args.system_malloc)
    print(host_memory, flush=True)

    import keras

    torch_build = common.configure_torch(args.torch_threads)
    if torch_build:
        print(torch_build, flush=True)
    print(common.load_line("at start"), flush=True)
    c = resolve_config(args)
    keras.config.set_dtype_policy(c["dtype_policy"])
    compute_dtype = keras.config.dtype_policy().compute_dtype
    print(
        f"config {'quick' if args.quick else args.config}"
        f"{' (smoke)' if args.smoke else ''}: d {c['hidden_dim']}, "
        f"{c['num_layers']}+{c['num_layers']} layers, ff {c['intermediate_dim']}, "
        f"{c['num_heads']} heads, vocabulary {c['vocabulary_size']}, "
        f"dtype policy {c['dtype_policy']}, {c['mode']} with "
        f"steps_per_execution={c['steps_per_execution']}",
        flush=True,
    )
    try:
        devices = ", ".join(keras.distribution.list_devices())
    except Exception:  # a backend without `list_devices`
        devices = "unknown"
    print(f"devices: {devices}", flush=True)
    peak = common.matmul_peak_flops(c["matmul_size"], dtype=compute_dtype)
    results = {}
    for batch_size, length in c["shapes"]:
        shape = dict(c, batch_size=batch_size, length=length)
        results[(batch_size, length)] = measure_shape(shape, args, keras)
    peak = max(peak, common.matmul_peak_flops(c["matmul_size"], dtype=compute_dtype))
    print(f"backend: {args.backend}")
    if torch_build:
        print(torch_build)
    print(common.load_line("at end"))
    print(f"matmul peak: {peak / 1e9:.1f} GFLOP/s ({compute_dtype}, measured)")
    if c["peak_tflops"]:
        print(f"device peak: {c['peak_tflops']:.0f} TFLOP/s (--peak-tflops)")
    for (batch_size, length), medians in results.items():
        shape = dict(c, batch_size=batch_size, length=length)
        tokens = batch_size * 2 * length
        flops = model_flops_per_step(shape)
        print(
            f"\nbatch {batch_size} x {length}: model FLOPs per step "
            f"{flops / 1e9:.2f} GFLOP, tokens per step: {tokens}"
        )
        header = f"{'model':<25}{'step (ms)':>10}{'tokens/s':>10}{'MFU':>8}"
        if c["peak_tflops"]:
            header += f"{'MFU dev':>9}"
        print(header)
        for name, seconds in medians.items():
            mfu = flops / seconds / peak
            row = f"{name:<25}{seconds * 1e3:>10.1f}{tokens / seconds:>10.0f}"
            row += f"{mfu:>8.1%}"
            if c["peak_tflops"]:
                row += f"{flops / seconds / (c['peak_tflops'] * 1e12):>9.1%}"
            print(row)
        equal_work = f" at equal work (attention_dropout={c['dropout']})"
        for ours, peer in RATIOS:
            if ours in medians and peer in medians:
                label = equal_work if ours.endswith("(equal work)") else ""
                ratio = medians[peer] / medians[ours]
                print(f"ratio keras-attn/{peer}{label}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
