"""TensorFlow: MirroredStrategy over 2 logical CPU devices, and a
MultiWorkerMirroredStrategy of two workers on loopback, against one device.

The distributed runs happen in subprocesses: logical devices must be set, and
`TF_CONFIG` read, before TensorFlow runs its first op.
"""

import json
import os
import sys

import keras
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from distributed_case import (  # noqa: E402
    HERE,
    free_ports,
    initial_weights,
    load_result,
    run_workers,
    subprocess_env,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="TensorFlow distribution tests",
    ),
]

WORKER = str(HERE / "tf_distributed_worker.py")


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Starts every TensorFlow run at once (they overlap on the CPU cores).

    One process with 2 logical CPU devices (no strategy, then
    MirroredStrategy), and two MultiWorkerMirroredStrategy workers from
    TF_CONFIG on 127.0.0.1 ports.
    """
    out_dir = tmp_path_factory.mktemp("tf_distribution")
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    worker_envs = [
        subprocess_env(
            TF_CONFIG=json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": i}}
            )
        )
        for i in range(2)
    ]
    codes_and_outputs = run_workers(
        [
            [WORKER, "mirrored", str(out_dir)],
            *([WORKER, "worker", str(out_dir / f"worker_{i}")] for i in range(2)),
        ],
        [subprocess_env(), *worker_envs],
        timeout=300,
    )
    return out_dir, codes_and_outputs


@pytest.fixture(scope="module")
def mirrored_results(workers):
    out_dir, ((code, output), *_) = workers
    assert code == 0, output[-4000:]
    return {name: load_result(out_dir / name) for name in ("single", "data")}


def assert_same_training(run, reference):
    (info, named), (reference_info, reference_named) = run, reference
    np.testing.assert_allclose(info["losses"], reference_info["losses"], rtol=1e-4)
    assert named.keys() == reference_named.keys()
    for path, value in named.items():
        np.testing.assert_allclose(
            value, reference_named[path], rtol=1e-5, atol=1e-5, err_msg=path
        )


def test_single_device_run_trains_unmirrored(mirrored_results):
    info, named = mirrored_results["single"]
    assert info["model_strategy"] == "_DefaultDistributionStrategy"
    assert len(info["losses"]) == 3 and np.all(np.isfinite(info["losses"]))
    start = initial_weights({path: value.shape for path, value in named.items()})
    moved = max(np.abs(named[path] - start[path]).max() for path in named)
    assert moved > 1e-2  # the comparisons below are not of untouched weights
    assert not any(v["distributed"] for v in info["variables"].values())


def test_mirrored_training_matches_single_device(mirrored_results):
    # keras_attn's MirroredStrategy, which refuses uneven batches.
    assert mirrored_results["data"][0]["model_strategy"] == "_MirroredStrategy"
    assert mirrored_results["data"][0]["num_replicas"] == 2
    assert_same_training(mirrored_results["data"], mirrored_results["single"])


def test_weights_and_optimizer_state_are_mirrored(mirrored_results):
    variables = mirrored_results["data"][0]["variables"]
    optimizer = [path for path in variables if path.startswith("adam")]
    assert len(optimizer) > len(variables) / 2  # moments, velocities, counters
    for path, variable in variables.items():
        assert variable["type"] == "MirroredVariable", path
        assert [d.rsplit(":", 2)[-2:] for d in variable["devices"]] == [
            ["CPU", "0"],
            ["CPU", "1"],
        ], path


def test_model_parallelism_is_rejected_on_tensorflow(mirrored_results):
    message = mirrored_results["data"][0]["model_parallel_error"]
    assert "`kind='model'` (model parallelism) is only supported on the JAX" in message


def test_batch_size_not_divisible_by_replicas_is_rejected(mirrored_results):
    message = mirrored_results["data"][0]["batch_error"]
    assert "`batch_size` must be divisible by the 2 data-parallel replicas" in message
    assert mirrored_results["single"][0]["batch_error"] is None


def test_batches_that_do_not_split_over_the_replicas_are_refused(mirrored_results):
    """TensorFlow splits them unevenly (a batch of 6 on 4 replicas failed in
    AddN); they are refused as on JAX, with the same message."""
    errors = mirrored_results["data"][0]["uneven_batch_errors"]
    kind, message = errors["static"]
    assert kind == "ValueError"
    assert message.startswith(
        "A batch of 3 rows does not split evenly over the 2 data-parallel replicas"
    )
    kind, message = errors["partial"]
    assert kind == "InvalidArgumentError"
    assert "A batch of 3 rows does not split evenly over the 2 data-parallel" in message


def test_devices_that_do_not_exist_are_refused_at_configure(mirrored_results):
    """`fit` on ["gpu:0", "gpu:1"] waited forever on a host without GPUs."""
    message = mirrored_results["data"][0]["missing_devices_error"]
    assert "`devices` names devices that this process does not have" in message
    assert "The devices that exist: ['cpu:0', 'cpu:1']" in message


def test_two_workers_match_single_device(workers, mirrored_results):
    """MultiWorkerMirroredStrategy from TF_CONFIG: 2 workers on 127.0.0.1."""
    out_dir, (_, *processes) = workers
    for code, output in processes:
        assert code == 0, output[-4000:]
    for i in range(2):
        run = load_result(out_dir / f"worker_{i}")
        assert run[0]["model_strategy"] == "_MultiWorkerMirroredStrategy"
        assert (run[0]["num_processes"], run[0]["process_id"]) == (2, i)
        assert run[0]["num_replicas"] == 2
        assert all(
            v["type"] == "MirroredVariable" for v in run[0]["variables"].values()
        )
        assert_same_training(run, mirrored_results["single"])
