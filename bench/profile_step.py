"""Where a training step's time goes: a JAX profile grouped by model part.

    python bench/profile_step.py                      # keras-attn
    python bench/profile_step.py --model keras-hub    # the peer, same shapes
    python bench/profile_step.py --quick              # smoke run

Builds one model of `train_throughput.py` (same shapes, loss, optimizer,
`jit_compile=True`), warms it up, then records `--steps` training steps with
`jax.profiler.trace`. XLA:CPU records one event per executed HLO
instruction; each is mapped, through the optimized HLO that XLA dumps, to the
JAX operation it came from (its `op_name`, e.g.
`jvp(decoder_block_2)/cross_attention_dropout/jit(_bernoulli)/...`) and
counted in one part of the model:

* matrix products by layer (attention projections, attention scores,
  feed-forward, vocabulary projection) and the rest by kind (dropout random
  numbers, dropout masks, layer norms, the loss, the optimizer, ...);
* "thread ms" is busy time summed over XLA's worker threads (two on a
  2-core machine), per step;
* the device wall time per step, the wall time during which at least one
  matrix product ran, and the training step as Keras runs it
  (`train_on_batch`, Python included).

JAX only: TensorFlow's profiler output needs TensorBoard's profile plugin.
"""

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (substring of the JAX op_name, part), first match wins; the matrix products
# are told apart from the element-wise work by the HLO instruction's name.
OTHER_PARTS = (
    (("_uniform", "_bernoulli", "threefry", "random_bits"), "dropout: random numbers"),
    (("dropout",), "dropout: masks and scaling"),
    (("compile_loss",), "loss"),
    (("logits", "/dense/"), "vocabulary projection: bias, layout"),
    (("norm",), "layer norm"),
    (("embedding",), "embeddings"),
    (("adam", "optimizer", "apply"), "optimizer (Adam)"),
    (("attention", "vmap", "dot_product"), "attention: softmax, masks, layout"),
    (("feed_forward", "feedforward"), "feed-forward: bias, ReLU, layout"),
)
MATMUL_PARTS = (
    (("feed_forward", "feedforward"), "matmul: feed-forward"),
    (("logits", "/dense/"), "matmul: vocabulary projection"),
    (
        ("/query/", "/key/", "/value/", "/attention_output/"),
        "matmul: attention projections",
    ),
    (("attention", "vmap", "dot_product"), "matmul: attention scores and values"),
)
MATMUL_PREFIXES = ("ynn_fusion", "dot", "xnn_fusion", "onednn", "custom-call")


def part_of(instruction, op_name):
    is_matmul = instruction.startswith(MATMUL_PREFIXES)
    for needles, part in MATMUL_PARTS if is_matmul else OTHER_PARTS:
        if any(needle in op_name for needle in needles):
            return part
    return "matmul: other" if is_matmul else "other element-wise"


def read_op_names(dump_dir):
    """HLO instruction name -> JAX op_name, from the optimized train step."""
    (path,) = glob.glob(
        os.path.join(dump_dir, "*jit_train_step*cpu_after_optimizations.txt")
    )
    pattern = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = .*?op_name=\"([^\"]*)\"")
    names = {}
    with open(path) as hlo:
        for line in hlo:
            match = pattern.match(line)
            if match:
                names[match.group(1)] = match.group(2)
    return names


def union_ns(intervals):
    """Total length of the union of `(start, end)` intervals."""
    total, current = 0, None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            total += 0 if current is None else current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    return total + (0 if current is None else current[1] - current[0])


def summarize(trace_dir, op_names, steps):
    import jax

    (path,) = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    profile = jax.profiler.ProfileData.from_file(path)
    busy, unassigned = collections.Counter(), collections.Counter()
    matmul_intervals, executions = [], []
    for plane in profile.planes:
        for line in plane.lines:
            for event in line.events:
                interval = (event.start_ns, event.start_ns + event.duration_ns)
                if event.name == "ThunkExecutor::Execute (wait for completion)":
                    executions.append(interval)
                if "XLAEigen" not in line.name or event.name.startswith(
                    ("ThunkExecutor", "SlinkyThreadPool", "ThreadpoolListener")
                ):
                    continue
                instruction = event.name
                op_name = op_names.get(instruction, "")
                part = part_of(instruction, op_name)
                busy[part] += event.duration_ns
                if part in ("other element-wise", "matmul: other"):
                    # The op path without the step's own prefix.
                    unassigned[op_name.replace("jit(train_step)/", "")] += (
                        event.duration_ns
                    )
                if part.startswith("matmul"):
                    matmul_intervals.append(interval)
    return (
        busy,
        unassigned,
        union_ns(executions) / steps,
        union_ns(matmul_intervals) / steps,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        default="keras-attn",
        choices=["keras-attn", "keras-hub", "keras.layers.MHA"],
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny smoke config")
    parser.add_argument(
        "--show-unassigned",
        type=int,
        default=8,
        help="how many of the operations counted in no part to list",
    )
    args = parser.parse_args()

    dump_dir = tempfile.mkdtemp(prefix="xla_dump_")
    # Before JAX starts: dump the optimized HLO of the train step (for the
    # op names) and record one profiler event per HLO instruction.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_text"
        + " --xla_dump_hlo_module_re=.*train_step.*"
    )
    import common

    common.select_backend("jax")
    import jax
    import keras
    import train_throughput

    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    config = dict(train_throughput.QUICK if args.quick else train_throughput.FULL)
    builders = {
        "keras-attn": train_throughput.build_keras_attn,
        "keras-hub": train_throughput.build_keras_hub,
        "keras.layers.MHA": train_throughput.build_keras_mha,
    }
    keras.utils.set_random_seed(0)
    model = builders[args.model](config)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
        jit_compile=True,
    )
    batches = train_throughput.make_batches(config)
    for step in range(3):
        model.train_on_batch(*batches[step % len(batches)])
    trace_dir = tempfile.mkdtemp(prefix="jax_trace_")
    with jax.profiler.trace(trace_dir):
        start = time.perf_counter()
        for step in range(args.steps):
            model.train_on_batch(*batches[step % len(batches)])
        step_ms = (time.perf_counter() - start) / args.steps * 1e3

    busy, unassigned, device_ns, matmul_ns = summarize(
        trace_dir, read_op_names(dump_dir), args.steps
    )
    total = sum(busy.values())
    print(f"model: {args.model}, {args.steps} profiled steps")
    print(f"train_on_batch (Python included): {step_ms:.1f} ms per step")
    print(f"device wall: {device_ns / 1e6:.1f} ms per step")
    print(f"wall with a matrix product running: {matmul_ns / 1e6:.1f} ms per step")
    print(f"{'part':<42}{'thread ms':>10}{'share':>8}")
    for part, ns in busy.most_common():
        print(f"{part:<42}{ns / 1e6 / args.steps:>10.1f}{ns / total:>8.1%}")
    print(f"{'total':<42}{total / 1e6 / args.steps:>10.1f}")
    print("largest operations in no part (thread ms per step):")
    for op_name, ns in unassigned.most_common(args.show_unassigned):
        print(f"  {ns / 1e6 / args.steps:6.1f}  {op_name or '(no op_name)'}")


if __name__ == "__main__":
    main()
