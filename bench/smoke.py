"""Runs several benchmarks' smoke configurations in one process.

    python bench/smoke.py --backend jax "host_overhead.py --quick" \
        "decoding_throughput.py --config base-gpu --smoke"

Each argument is one benchmark's command line (the script and its flags,
without `--backend`, which this runner adds). They run one after the other
in this process, so the interpreter, Keras, TensorFlow and keras-hub start
once (and, on JAX, the malloc restart of `bench/common.select_backend`
happens once) instead of once per benchmark: the smoke tests
(`tests/bench/test_bench_smoke.py`) spend their time in the benchmarks'
code paths rather than in start-up. Between two benchmarks the global dtype
policy goes back to `float32` and the Keras session is cleared, so each
starts as it would in a fresh process.

Every benchmark's output is framed by `=== start <script> ===` and either
`=== ok <script> (<seconds> s) ===` or `=== failed <script> (...) ===` (its
traceback then precedes it on stdout); the exit status is 1 if any failed. A benchmark that
must set flags before its backend starts (`profile_step.py`: XLA dump
flags) cannot share a process and is refused here.
"""

import argparse
import importlib
import shlex
import sys
import time
import traceback

import common

# Benchmarks that set process-wide flags before the backend starts.
NEEDS_ITS_OWN_PROCESS = ("profile_step.py",)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "tensorflow"])
    parser.add_argument(
        "commands", nargs="+", help='one benchmark command line each: "x.py --quick"'
    )
    args = parser.parse_args(argv)
    args.commands = [shlex.split(command) for command in args.commands]
    for command in args.commands:
        if not command[0].endswith(".py"):
            parser.error(
                f"each command starts with a bench script. Received: {command}"
            )
        if command[0] in NEEDS_ITS_OWN_PROCESS:
            parser.error(f"{command[0]} sets XLA flags at start: run it on its own")
    return args


def run_one(command, backend):
    """Runs `command` (script and flags) in this process; True if it worked."""
    import keras

    script, flags = command[0], command[1:]
    # Scripts that read no `--backend` (cost_analysis.py, JAX only) take none.
    takes_backend = script != "cost_analysis.py"
    argv = [*flags, "--backend", backend] if takes_backend else flags
    print(f"=== start {script} ===", flush=True)
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()
    saved_argv, start = sys.argv, time.perf_counter()
    # Some mains read `sys.argv`, the others take `argv`.
    sys.argv = [script, *argv]
    try:
        module = importlib.import_module(script.removesuffix(".py"))
        module.main()
        ok = True
    except BaseException:  # SystemExit from argparse included
        traceback.print_exc(file=sys.stdout)
        ok = False
    finally:
        sys.argv = saved_argv
    seconds = time.perf_counter() - start
    print(f"=== {'ok' if ok else 'failed'} {script} ({seconds:.1f} s) ===", flush=True)
    return ok


def main(argv=None):
    args = parse_args(argv)
    # Once, before any output: on JAX this may restart the process.
    print(common.select_backend(args.backend), flush=True)
    results = [run_one(command, args.backend) for command in args.commands]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
