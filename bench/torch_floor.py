"""The floor under an eager torch step: what no equal-work build can skip.

    python bench/torch_floor.py train            # train_throughput.py's step
    python bench/torch_floor.py decode           # lm_decoding.py's decode
    python bench/torch_floor.py train --torch-threads 1   # CPU time, not wall
    python bench/torch_floor.py train --quick    # tiny sizes (smoke run)

Eager torch runs each op as its own kernel, so a ratio between two builds
of the same model can only come from work one of them does and the other
does not. This script measures, in one process, how much of a step is work
both sides must do, and so the most any build can lead its peer by.

`train`: keras-attn at equal work (`attention_dropout` equal to keras-hub's
`dropout`) and keras-hub, built and trained as `bench/train_throughput.py`
does (same batches, loss and Adam). For each, the median step time and,
from `torch.profiler`, each aten op's self time per step, side by side.
The floor is the part of a step that any build of that model, trained with
that loss and optimizer, must run:

- the matrix products (`mm`, `bmm`, `addmm`, the fused attention kernels),
  keras-hub's: the same FLOPs on both sides;
- the dropout random numbers (`bernoulli_` and the other generators);
- the loss alone, forward and backward, on logits of the step's shape;
- the optimizer alone: one Adam update of the model's variables.

The ceiling, keras-hub's step divided by the floor, bounds the lead: a
build that spent no time at all on anything else would reach it.

`decode`: `bench/lm_decoding.py`'s greedy decode, keras-attn and keras-hub.
Besides time and the op table, each side's calls per decode of Keras's
`Layer.__call__` and of `keras.ops` functions, and what one call of each
costs above the kernel it runs (a layer norm of one decoding step's shape
through `__call__` against its `call`; `keras.ops.add` against `torch.add`
on the same tensors): the framework's share of a decode, which neither side
can avoid while it is written with Keras layers and `keras.ops`.
"""

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

MATMUL_OPS = (
    "aten::mm",
    "aten::bmm",
    "aten::addmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_cudnn_attention_backward",
)
RANDOM_OPS = ("aten::bernoulli_", "aten::uniform_", "aten::random_", "aten::normal_")


def median_seconds(fn, repeats):
    """Median wall seconds of `repeats` calls of `fn` (after one more)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def op_times(fn, calls):
    """`{aten op: (self ms per call of fn, op calls per call of fn)}`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    return {
        event.key: (event.self_cpu_time_total / 1e3 / calls, event.count / calls)
        for event in prof.key_averages()
    }


def summed(ops, names):
    return sum(ms for name, (ms, _) in ops.items() if name in names)


def print_op_table(ops_by_side, top):
    sides = list(ops_by_side)
    names = set().union(*ops_by_side.values())
    rows = sorted(
        names, key=lambda n: -max(o.get(n, (0, 0))[0] for o in ops_by_side.values())
    )
    print(
        f"\n{'aten op, self time per step':52s}" + "".join(f"{s:>26s}" for s in sides)
    )
    for name in rows[:top]:
        cells = "".join(
            f"{ops_by_side[s].get(name, (0, 0))[0]:12.2f} ms {ops_by_side[s].get(name, (0, 0))[1]:7.0f}x"
            for s in sides
        )
        print(f"{name[:52]:52s}{cells}")
    totals = "".join(
        f"{sum(ms for ms, _ in ops_by_side[s].values()):12.1f} ms {'':8s}"
        for s in sides
    )
    print(f"{'all aten ops (profiled, so inflated)':52s}{totals}")


def loss_alone_seconds(c, repeats):
    """Forward + backward of the bench's loss on logits of the step's shape."""
    import keras
    import numpy as np
    import torch

    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.0)
    rng = np.random.default_rng(0)
    shape = (c["batch_size"], c["length"])
    labels = keras.ops.convert_to_tensor(
        rng.integers(0, c["vocabulary_size"], shape), "int32"
    )
    logits = torch.randn(*shape, c["vocabulary_size"], requires_grad=True)

    def run():
        logits.grad = None
        loss(labels, logits).backward()

    return median_seconds(run, repeats)


def optimizer_alone_seconds(model, repeats):
    """One Adam update (the bench's optimizer) of `model`'s variables."""
    import keras

    variables = model.trainable_variables
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(variables)
    gradients = [keras.random.normal(v.shape) * 1e-3 for v in variables]
    return median_seconds(lambda: optimizer.apply(gradients, variables), repeats)


def run_train(args):
    import keras
    import train_throughput as tt

    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    c = dict(tt.QUICK if args.quick else tt.FULL)
    c["batch_size"], c["length"] = c["shapes"][0]
    keras.utils.set_random_seed(0)
    batches = tt.make_batches(c)
    sides = ("keras-attn (equal work)", "keras-hub")
    step_seconds, ops, models = {}, {}, {}
    for name in sides:
        model = tt.BUILDERS[name](c)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4),
            loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
            jit_compile=False,
        )
        step, _ = tt.make_step(model, batches, dict(c, mode="train_on_batch"))
        for _ in range(c["warmup"]):
            step()
        step_seconds[name] = median_seconds(step, args.repeats)
        ops[name] = op_times(step, args.profiled)
        models[name] = model
        print(
            f"{name}: {step_seconds[name] * 1e3:.1f} ms per step (median of {args.repeats})",
            flush=True,
        )
    print_op_table(ops, args.top)

    peer = "keras-hub"
    loss_ms = loss_alone_seconds(c, args.repeats) * 1e3
    optimizer_ms = optimizer_alone_seconds(models[peer], args.repeats) * 1e3
    matmul_ms = summed(ops[peer], MATMUL_OPS)
    random_ms = summed(ops[peer], RANDOM_OPS)
    floor_ms = matmul_ms + random_ms + loss_ms + optimizer_ms
    peer_ms = step_seconds[peer] * 1e3
    print(
        f"\nfloor of one step ({peer}'s kernels, profiled; the loss and Adam timed alone):"
    )
    for part, ms in (
        ("matrix products", matmul_ms),
        ("dropout random numbers", random_ms),
        ("loss, forward + backward", loss_ms),
        ("Adam update", optimizer_ms),
        ("floor", floor_ms),
    ):
        print(f"  {part:28s} {ms:8.1f} ms  {100 * ms / peer_ms:5.1f}% of {peer}'s step")
    ours = step_seconds["keras-attn (equal work)"] * 1e3
    print(
        f"keras-attn / keras-hub at equal work: {peer_ms / ours:.2f}x "
        "(timed one after the other; train_throughput.py interleaves them)"
    )
    print(f"ceiling, keras-hub step / floor: {peer_ms / floor_ms:.2f}x")


def layer_call_overhead_seconds(shape, repeats):
    """`(__call__ - call)` of a built `keras.layers.LayerNormalization`."""
    import keras

    x = keras.random.normal(shape)
    layer = keras.layers.LayerNormalization()
    layer(x)
    through_call = median_seconds(lambda: [layer(x) for _ in range(100)], repeats) / 100
    direct = median_seconds(lambda: [layer.call(x) for _ in range(100)], repeats) / 100
    return through_call - direct


def ops_call_overhead_seconds(shape, repeats):
    """`keras.ops.add` minus `torch.add` on the same two tensors."""
    import keras
    import torch

    x, y = keras.random.normal(shape), keras.random.normal(shape)
    through_ops = (
        median_seconds(lambda: [keras.ops.add(x, y) for _ in range(100)], repeats) / 100
    )
    direct = (
        median_seconds(lambda: [torch.add(x, y) for _ in range(100)], repeats) / 100
    )
    return through_ops - direct


def keras_call_counts(fn):
    """`(Layer.__call__ calls, keras.ops calls)` during `fn()`.

    A `keras.ops` call is counted once: calls made by other `keras.ops`
    functions inside it are not.
    """
    from keras.src.layers.layer import Layer

    counts = collections.Counter()
    original = Layer.__call__

    def counting_call(self, *args, **kwargs):
        counts["layer"] += 1
        return original(self, *args, **kwargs)

    ops_dir = os.sep + os.path.join("keras", "src", "ops") + os.sep

    def profiler(frame, event, arg):
        if event != "call" or ops_dir not in frame.f_code.co_filename:
            return
        if frame.f_code.co_name.startswith("_"):
            return
        caller = frame.f_back
        if caller is not None and ops_dir in caller.f_code.co_filename:
            return
        counts["ops"] += 1

    Layer.__call__ = counting_call
    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.setprofile(None)
        Layer.__call__ = original
    return counts["layer"], counts["ops"]


def run_decode(args):
    import keras
    import lm_decoding as lm
    import numpy as np

    shape = lm.SMOKE if args.quick else lm.FULL
    prompts = (
        np.random.default_rng(0)
        .integers(
            4, shape["vocabulary_size"], (shape["batch_size"], shape["prompt_length"])
        )
        .astype("int32")
    )
    builders = {
        "keras-attn": lambda: lm.build_keras_attn(keras, shape),
        "keras-hub": lambda: lm.build_keras_hub(keras, shape),
    }
    seconds, ops, counts = {}, {}, {}
    for name, build in builders.items():
        keras.utils.set_random_seed(0)
        decoder = build()

        def decode(decoder=decoder):
            decoder.predict_on_batch(prompts)

        seconds[name] = median_seconds(decode, args.repeats)
        ops[name] = op_times(decode, args.profiled)
        counts[name] = keras_call_counts(decode)
        print(
            f"{name}: {seconds[name]:.3f} s per decode (median of {args.repeats})",
            flush=True,
        )
    print_op_table(ops, args.top)

    step_shape = (shape["batch_size"], 1, shape["hidden_dim"])
    layer_us = layer_call_overhead_seconds(step_shape, args.repeats) * 1e6
    ops_us = ops_call_overhead_seconds(step_shape, args.repeats) * 1e6
    print(
        f"\nper call above its kernel: Layer.__call__ {layer_us:.1f} us, "
        f"a keras.ops function {ops_us:.1f} us"
    )
    for name, (layer_calls, ops_calls) in counts.items():
        framework = (layer_calls * layer_us + ops_calls * ops_us) / 1e6
        print(
            f"{name}: {layer_calls:,} Layer.__call__ and {ops_calls:,} keras.ops "
            f"calls per decode: about {framework:.3f} s of Keras overhead, "
            f"{100 * framework / seconds[name]:.0f}% of its decode"
        )
    print(
        f"keras-attn / keras-hub: {seconds['keras-hub'] / seconds['keras-attn']:.2f}x "
        "(timed one after the other; lm_decoding.py interleaves them)"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bench", choices=("train", "decode"))
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per median")
    parser.add_argument(
        "--profiled", type=int, default=3, help="calls profiled per side"
    )
    parser.add_argument("--top", type=int, default=20, help="aten ops listed")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    common.add_torch_threads_flag(parser)
    args = parser.parse_args(argv)
    for flag in ("repeats", "profiled", "top"):
        if getattr(args, flag) < 1:
            parser.error(
                f"--{flag} must be >= 1. Received: --{flag}={getattr(args, flag)}"
            )
    common.select_backend("torch")
    print(common.load_line("at start"))
    print(common.configure_torch(args.torch_threads))
    if args.quick:
        args.repeats, args.profiled = 1, 1
    run_train(args) if args.bench == "train" else run_decode(args)
    print(common.load_line("at end"))


if __name__ == "__main__":
    main()
