"""Host time per training step: Keras's own work when compute is negligible.

    python bench/host_overhead.py --backend jax
    python bench/host_overhead.py --backend tensorflow
    python bench/host_overhead.py --backend jax --quick   # smoke run

The three builds of `bench/train_throughput.py` (keras-attn, keras-hub's
layers, `keras.layers.MultiHeadAttention` blocks), plus keras-attn at equal
work (`attention_dropout` equal to keras-hub's `dropout`), at a tiny size
(d 16, 1 + 1 layers, 2 heads, ff 32, vocabulary 64, batch 2 x 8): a step's
arithmetic is a few hundred kFLOP, so its time is what Keras and the backend
do around it: dispatching the compiled step, passing the model's state
(every variable, seed generators included) in and out, the data adapter and
the callbacks. Each model is timed in three ways, interleaved with the
others in rotating order:

- `train_on_batch`: one call per step;
- `fit`, `steps_per_execution=1`: one epoch of `--batches` batches, divided
  by its steps;
- `fit`, `steps_per_execution=N` (`--steps-per-execution`, default 16).

It prints the per-step state (trainable and non-trainable variables, seed
generators, optimizer variables) of each model, the median microseconds per
step of each way, and the ratios to keras-attn. Steps are timed in this
process's CPU time (all threads) by default, which other jobs on a shared
machine do not inflate as they do wall time (`--clock wall`).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402
import train_throughput  # noqa: E402

TINY = dict(
    hidden_dim=16,
    num_layers=1,
    num_heads=2,
    intermediate_dim=32,
    vocabulary_size=64,
    dropout=0.1,
    batch_size=2,
    length=8,
    num_batches=64,
    warmup=2,
    windows=9,
)
QUICK = dict(TINY, num_batches=4, warmup=1, windows=1)


def state_counts(model):
    """Variables carried through every step, by kind."""
    seed_states = [
        v for v in model.non_trainable_variables if "seed_generator" in v.path
    ]
    return {
        "trainable": len(model.trainable_variables),
        "non-trainable": len(model.non_trainable_variables),
        "seed generators": len(seed_states),
        "optimizer": len(model.optimizer.variables),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow"])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--steps-per-execution", type=int, default=16)
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: this process's CPU time, all threads (default: host "
        "overhead is CPU work, and other jobs on a shared machine do not "
        "inflate it); wall: elapsed time",
    )
    common.add_host_memory_flag(parser)
    args = parser.parse_args(argv)
    print(common.select_backend(args.backend, args.system_malloc), flush=True)

    import keras
    import numpy as np

    from keras_attn.training import MaskedSparseCategoricalCrossentropy

    c = dict(QUICK if args.quick else TINY)
    if args.windows:
        c["windows"] = args.windows
    n = min(args.steps_per_execution, 2) if args.quick else args.steps_per_execution
    if n < 1:
        parser.error(
            "--steps-per-execution must be >= 1. "
            f"Received: --steps-per-execution={args.steps_per_execution}"
        )
    c["num_batches"] += -c["num_batches"] % n  # whole executions only
    keras.utils.set_random_seed(0)
    batches = train_throughput.make_batches(c)
    x = {k: np.concatenate([b[0][k] for b in batches]) for k in batches[0][0]}
    y = np.concatenate([b[1] for b in batches])
    ways = {"train_on_batch": None, "fit": 1, f"fit spe={n}": n}
    builders = dict(train_throughput.BUILDERS)
    if args.quick:  # a start-up check: two builds, two ways
        ways.pop("fit")
        builders = {k: builders[k] for k in ("keras-attn", "keras-hub")}
    functions, counts = {}, {}
    for name, build in builders.items():
        for way, steps_per_execution in ways.items():
            model = build(c)
            model.compile(
                optimizer=keras.optimizers.Adam(1e-4),
                loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.0),
                jit_compile=True,
                steps_per_execution=steps_per_execution or 1,
            )
            if steps_per_execution is None:
                counter = [0]

                def run(model=model, counter=counter):
                    batch_x, batch_y = batches[counter[0] % len(batches)]
                    counter[0] += 1
                    model.train_on_batch(batch_x, batch_y)

                steps = 1
            else:

                def run(model=model):
                    model.fit(
                        x,
                        y,
                        batch_size=c["batch_size"],
                        epochs=1,
                        shuffle=False,
                        verbose=0,
                    )

                steps = c["num_batches"]
            for _ in range(c["warmup"]):
                run()
            functions[(name, way)] = (run, steps)
        counts[name] = state_counts(model)

    print(f"backend: {args.backend} (keras {keras.__version__})")
    print(
        f"tiny model: d {c['hidden_dim']}, {c['num_layers']}+{c['num_layers']} "
        f"layers, batch {c['batch_size']} x {c['length']}; fit epochs of "
        f"{c['num_batches']} batches; median of {c['windows']} windows"
    )
    print(f"\n{'model':<25}" + "".join(f"{k:>17}" for k in counts["keras-attn"]))
    for name, row in counts.items():
        print(f"{name:<25}" + "".join(f"{v:>17}" for v in row.values()))

    calls = {key: run for key, (run, _) in functions.items()}
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    medians = common.interleaved_medians(calls, c["windows"], 1, clock=clock)
    per_step = {key: medians[key] / functions[key][1] for key in medians}
    print(f"\nmicroseconds per step ({args.clock} time)")
    print(f"{'model':<25}" + "".join(f"{w:>18}" for w in ways))
    for name in builders:
        row = "".join(f"{per_step[(name, w)] * 1e6:>18.0f}" for w in ways)
        print(f"{name:<25}{row}")
    for name in [k for k in ("keras-hub", "keras.layers.MHA") if k in builders]:
        ratios = ", ".join(
            f"{w} {per_step[(name, w)] / per_step[('keras-attn', w)]:.2f}x"
            for w in ways
        )
        print(f"ratio keras-attn/{name}: {ratios}")
    if "keras-attn (equal work)" in builders:
        equal = "keras-attn (equal work)"
        ratios = ", ".join(
            f"{w} {per_step[('keras-hub', w)] / per_step[(equal, w)]:.2f}x"
            for w in ways
        )
        print(f"ratio keras-attn/keras-hub at equal work: {ratios}")
    for name in builders if "fit" in ways else ():
        gain = per_step[(name, "fit")] / per_step[(name, f"fit spe={n}")]
        print(f"{name}: fit spe={n} is {gain:.2f}x fit spe=1 per step")


if __name__ == "__main__":
    main()
