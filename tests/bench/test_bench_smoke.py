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


def run_quick(script):
    backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        pytest.skip(f"benchmarks run on jax and tensorflow, not {backend}")
    result = subprocess.run(
        [sys.executable, str(BENCH / script), "--backend", backend, "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": backend},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_train_throughput_quick():
    out = run_quick("train_throughput.py")
    assert "matmul peak:" in out
    for name in ("keras-attn", "keras-hub", "keras.layers.MHA"):
        assert f"\n{name} " in out
    assert "ratio keras-attn/keras-hub:" in out
    assert "ratio keras-attn/keras.layers.MHA:" in out


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
