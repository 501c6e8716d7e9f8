"""Where a training step's time goes: a JAX profile grouped by model part.

    python bench/profile_step.py --backend jax                      # keras-attn
    python bench/profile_step.py --backend jax --model keras-hub    # the peer
    python bench/profile_step.py --backend tensorflow
    python bench/profile_step.py --backend jax --quick              # smoke run

Builds one model of `train_throughput.py` (same shapes, loss, optimizer,
`jit_compile=True`, so both backends run an XLA program), warms it up, then
records `--steps` training steps with the backend's profiler
(`jax.profiler.trace`, `tf.profiler.experimental`). XLA:CPU records one event
per executed HLO instruction; each is mapped, through the optimized HLO that
XLA dumps, to the operation it came from (its `op_name`, e.g.
`jvp(decoder_block_2)/cross_attention_dropout/...` on JAX) and counted in one
part of the model:

* matrix products by layer (attention projections, attention scores,
  feed-forward, vocabulary projection) and the rest by kind (dropout random
  numbers, dropout masks, layer norms, the loss, the optimizer, ...);
* "thread ms" is busy time summed over the threads that ran XLA
  instructions (XLA's two workers on a 2-core machine, and the calling
  thread for the instructions it runs inline), per step;
* the wall time per step during which XLA's threads ran anything, the wall
  time during which at least one matrix product ran, and the training step
  as Keras runs it (`train_on_batch`, Python included).

Both profilers write an XSpace protocol buffer; it is read with
`jax.profiler.ProfileData`, so JAX must be installed for either backend.
"""

import argparse
import collections
import contextlib
import glob
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

# (substrings of the op_name, part), first match wins; matrix products and
# element-wise work are told apart by the HLO instructions themselves.
OTHER_PARTS = (
    (
        (
            "_uniform",
            "_bernoulli",
            "threefry",
            "random_bits",
            "Stateless",
            "Philox",
            "RandomUniform",
        ),
        "dropout: random numbers",
    ),
    (("dropout",), "dropout: masks and scaling"),
    (("compile_loss", "crossentropy"), "loss"),
    (("logits", "/dense/", "(dense)"), "vocabulary projection: bias, layout"),
    (("norm",), "layer norm"),
    (("embedding",), "embeddings"),
    (("adam", "optimizer", "apply"), "optimizer (Adam)"),
    (
        (
            "attention",
            "vmap",
            "dot_product",
            "einsum",
            "softmax",
            "/query/",
            "/key/",
            "/value/",
        ),
        "attention: softmax, masks, biases, layout",
    ),
    (("feed_forward", "feedforward"), "feed-forward: bias, ReLU, layout"),
)
# Philox-4x32's multipliers, in TensorFlow's stateless random-bit fusions.
PHILOX_CONSTANTS = ("constant(3528531795)", "constant(3449720151)")
MATMUL_PARTS = (
    (("feed_forward", "feedforward"), "matmul: feed-forward"),
    (("logits", "/dense/", "(dense)"), "matmul: vocabulary projection"),
    (
        ("/query/", "/key/", "/value/", "/attention_output/"),
        "matmul: attention projections",
    ),
    (
        ("attention", "vmap", "dot_product", "einsum"),
        "matmul: attention scores and values",
    ),
)


def part_of(op_name, is_matmul):
    """The model part an HLO instruction's time is counted in."""
    # TensorFlow numbers repeated names ("decoder_block_0_1/key_1/MatMul"):
    # drop the counters so that both backends read "/decoder_block_0/key/".
    op_name = "/" + re.sub(r"_\d+(?=/|$)", "", op_name) + "/"
    for needles, part in MATMUL_PARTS if is_matmul else OTHER_PARTS:
        if any(needle in op_name for needle in needles):
            return part
    return "matmul: other" if is_matmul else "other element-wise"


def read_instructions(dump_dir):
    """HLO instruction name -> `(op_name, is_matmul)` for the train step.

    The train step is the largest module XLA compiled in the process. An
    instruction is a matrix product if it is a `dot`, a library matmul
    custom call (oneDNN), or a fusion whose fused computation holds either.
    """
    path = max(
        glob.glob(os.path.join(dump_dir, "*cpu_after_optimizations.txt")),
        key=os.path.getsize,
    )
    with open(path) as hlo:
        lines = hlo.read().splitlines()
    computation = re.compile(r"(?:ENTRY )?%([\w.\-]+) \(")
    definition = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = .*? ([\w-]+)\(")
    op_name = re.compile(r'op_name="([^"]*)"')
    calls = re.compile(r"calls=%([\w.\-]+)")
    referenced = re.compile(r"(?:calls|to_apply)=%([\w.\-]+)")

    def is_product(line):
        return " dot(" in line or ("custom-call(" in line and "matmul" in line.lower())

    # Per computation: whether it holds a product, and a stand-in op_name
    # for the fusions and wrappers that carry none: the op_names and called
    # computations' names inside it (a reduction's `to_apply` computation is
    # named after its op), or "Philox" for TensorFlow's random-bit fusions.
    with_product, inner_names, current = set(), collections.defaultdict(list), None
    for line in lines:
        start = computation.match(line)
        if start:
            current = start.group(1)
            continue
        if is_product(line):
            with_product.add(current)
        inner_names[current] += op_name.findall(line) + referenced.findall(line)
        if any(constant in line for constant in PHILOX_CONSTANTS):
            inner_names[current].append("Philox")
    instructions = {}
    for line in lines:
        match = definition.match(line)
        if not match:
            continue
        called = calls.search(line)
        called = called.group(1) if called else None
        found = op_name.search(line)
        instructions[match.group(1)] = (
            found.group(1) if found else "/".join(inner_names.get(called, [])),
            is_product(line) or called in with_product,
        )
    return instructions


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


def summarize(trace_dir, instructions, steps):
    import jax

    (path,) = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    profile = jax.profiler.ProfileData.from_file(path)
    # name -> op_name, and name -> part, classified once per instruction.
    parts = {name: part_of(*found) for name, found in instructions.items()}
    op_names = {name: op_name for name, (op_name, _) in instructions.items()}
    busy, unassigned = collections.Counter(), collections.Counter()
    matmul_intervals, busy_intervals = [], []
    for plane in profile.planes:
        for line in plane.lines:
            # Every thread: XLA's workers ("tf_XLAEigen/...", "..._Eigen/...")
            # run most instructions, the calling thread runs some inline.
            for event in line.events:
                if event.name not in parts:  # runtime bookkeeping
                    continue
                interval = (event.start_ns, event.start_ns + event.duration_ns)
                busy_intervals.append(interval)
                op_name, part = op_names[event.name], parts[event.name]
                busy[part] += event.duration_ns
                if part in ("other element-wise", "matmul: other"):
                    # The op path without the step's own prefix, or else
                    # the HLO instruction's kind ("copy", "transpose_fusion").
                    label = op_name.replace("jit(train_step)/", "") or (
                        "HLO " + re.sub(r"\.\d+$", "", event.name)
                    )
                    unassigned[label] += event.duration_ns
                if part.startswith("matmul"):
                    matmul_intervals.append(interval)
    return (
        busy,
        unassigned,
        union_ns(busy_intervals) / steps,
        union_ns(matmul_intervals) / steps,
    )


@contextlib.contextmanager
def backend_profiler(backend, trace_dir):
    """Records the backend's profile of the enclosed steps into `trace_dir`."""
    if backend == "jax":
        import jax

        with jax.profiler.trace(trace_dir):
            yield
    else:
        import tensorflow as tf

        tf.profiler.experimental.start(trace_dir)
        try:
            yield
        finally:
            tf.profiler.experimental.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        default="keras-attn",
        choices=[
            "keras-attn",
            "keras-attn (equal work)",
            "keras-hub",
            "keras.layers.MHA",
        ],
    )
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny smoke config")
    common.add_host_memory_flag(parser)
    parser.add_argument(
        "--show-unassigned",
        type=int,
        default=8,
        help="how many of the operations counted in no part to list",
    )
    args = parser.parse_args()
    # Before the backend starts: dump the optimized HLO of the train step
    # (for the op names; the module is `jit_train_step` on JAX and
    # `..._one_step_on_data_...` on TensorFlow). When `select_backend` has
    # restarted this script (JAX), the flags are in its environment already.
    flags = os.environ.get("XLA_FLAGS", "")
    dumped = re.search(r"--xla_dump_to=(\S+)", flags)
    dump_dir = dumped.group(1) if dumped else tempfile.mkdtemp(prefix="xla_dump_")
    if not dumped:
        step_module = "train_step" if args.backend == "jax" else "one_step_on_data"
        os.environ["XLA_FLAGS"] = (
            flags
            + f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_text"
            + f" --xla_dump_hlo_module_re=.*{step_module}.*"
        )
    # XLA dumps only what it compiles: a program found in JAX's persistent
    # compilation cache (which leaves the dump flags out of its key) would
    # leave the dump empty.
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    host_memory = common.select_backend(args.backend, args.system_malloc)
    print(host_memory, flush=True)
    import keras
    import train_throughput

    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    config = dict(train_throughput.QUICK if args.quick else train_throughput.FULL)
    config["batch_size"], config["length"] = config["shapes"][0]
    keras.utils.set_random_seed(0)
    model = train_throughput.BUILDERS[args.model](config)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
        jit_compile=True,
    )
    batches = train_throughput.make_batches(config)
    for step in range(3):
        model.train_on_batch(*batches[step % len(batches)])
    trace_dir = tempfile.mkdtemp(prefix="xla_trace_")
    with backend_profiler(args.backend, trace_dir):
        start = time.perf_counter()
        for step in range(args.steps):
            model.train_on_batch(*batches[step % len(batches)])
        step_ms = (time.perf_counter() - start) / args.steps * 1e3

    busy, unassigned, device_ns, matmul_ns = summarize(
        trace_dir, read_instructions(dump_dir), args.steps
    )
    total = sum(busy.values())
    print(f"backend: {args.backend}, model: {args.model}, {args.steps} profiled steps")
    print(f"train_on_batch (Python included): {step_ms:.1f} ms per step")
    print(f"XLA busy wall: {device_ns / 1e6:.1f} ms per step")
    print(f"wall with a matrix product running: {matmul_ns / 1e6:.1f} ms per step")
    print(f"{'part':<42}{'thread ms':>10}{'share':>8}")
    for part, ns in busy.most_common():
        print(f"{part:<42}{ns / 1e6 / args.steps:>10.1f}{ns / total:>8.1%}")
    print(f"{'total':<42}{total / 1e6 / args.steps:>10.1f}")
    print("largest operations in no part (thread ms per step):")
    for op_name, ns in unassigned.most_common(args.show_unassigned):
        print(f"  {ns / 1e6 / args.steps:6.1f}  {op_name}")


if __name__ == "__main__":
    main()
