"""Smoke runs of the benchmarks' `--quick` configurations (no timing asserted).

Each script runs in a subprocess on the current `KERAS_BACKEND` and must
print its result lines; this keeps `bench/` from rotting.
"""

import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_quick(script, *flags):
    """Runs `script --backend <current> <flags>` (default `--quick`)."""
    backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        pytest.skip(f"benchmarks run on jax and tensorflow, not {backend}")
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


def test_train_throughput_base_gpu_smoke():
    # The GPU command's code path (mixed_bfloat16, `fit` with
    # steps_per_execution, both MFU columns) at the quick sizes; the
    # `train_on_batch` path runs in test_host_overhead_quick.
    out = run_quick("train_throughput.py", "--config", "base-gpu", "--smoke")
    assert "mixed_bfloat16, fit with steps_per_execution=2" in out
    assert "matmul peak:" in out and "(bfloat16, measured)" in out
    assert "device peak: 989 TFLOP/s" in out and "MFU dev" in out
    for name in ("keras-attn", "keras-hub", "keras.layers.MHA"):
        assert f"\n{name} " in out
    assert "\nkeras-attn (equal work) " in out
    assert "ratio keras-attn/keras-hub:" in out
    assert "ratio keras-attn/keras.layers.MHA:" in out
    assert "ratio keras-attn/keras-hub at equal work (attention_dropout=0.1):" in out


def test_host_overhead_quick():
    out = run_quick("host_overhead.py")
    assert "seed generators" in out
    for name in ("keras-attn", "keras-hub"):
        assert f"\n{name} " in out
    assert "ratio keras-attn/keras-hub: train_on_batch " in out
    assert "fit spe=2 " in out


def test_decoding_throughput_base_gpu_smoke():
    out = run_quick("decoding_throughput.py", "--config", "base-gpu", "--smoke")
    assert "dtype policy mixed_bfloat16" in out
    for name in ("greedy, cached", "greedy, uncached", "beam 4, cached"):
        assert f"\n{name} " in out
    assert "cached / uncached greedy speedup:" in out


def test_cost_analysis_quick():
    if keras.backend.backend() != "jax":
        pytest.skip("XLA's cost analysis is read through JAX")
    result = subprocess.run(
        [sys.executable, str(BENCH / "cost_analysis.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train step: " in result.stdout and "MB accessed" in result.stdout
    assert "fusions: " in result.stdout
    assert "LayerNorm(x + Dropout(y))" in result.stdout
    assert "loss on the output projection" in result.stdout


def test_real_tokens_quick():
    out = run_quick("real_tokens.py")
    assert "\npadded " in out and "\nbucketed " in out
    assert "ratio bucketed/padded:" in out


def test_attention_scaling_quick():
    out = run_quick("attention_scaling.py")
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
