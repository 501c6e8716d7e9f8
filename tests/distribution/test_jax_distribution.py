"""JAX: DataParallel and ModelParallel on 8 simulated CPU devices, and two
processes joined by `jax.distributed` on loopback, against one device.

The distributed runs happen in subprocesses: `XLA_FLAGS` must be set before
JAX is imported, and `jax.distributed.initialize` before JAX computes.
"""

import json
import os
import sys

import keras
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from distributed_case import (  # noqa: E402
    GLOBAL_BATCH,
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
        keras.backend.backend() != "jax", reason="JAX distribution tests"
    ),
]

WORKER = str(HERE / "jax_distributed_worker.py")
EIGHT_DEVICES = "--xla_force_host_platform_device_count=8"

# What `transformer_layout_map` says, for the variables of an encoder block.
EXPECTED_MODEL_SPECS = {
    "token_embedding/token_embedding/embeddings": ["model", None],
    "encoder_block_0/self_attention/query/kernel": [None, "model", None],
    "encoder_block_0/self_attention/key/kernel": [None, "model", None],
    "encoder_block_0/self_attention/value/kernel": [None, "model", None],
    "encoder_block_0/self_attention/query/bias": ["model", None],
    "encoder_block_0/self_attention/attention_output/kernel": ["model", None, None],
    "encoder_block_0/self_attention/attention_output/bias": [None],
    "encoder_block_0/feed_forward/intermediate_dense/kernel": [None, "model"],
    "encoder_block_0/feed_forward/intermediate_dense/bias": ["model"],
    "encoder_block_0/feed_forward/output_dense/kernel": ["model", None],
    "encoder_block_0/feed_forward/output_dense/bias": [None],
    "encoder_block_0/self_attention_norm/gamma": [None],
    "decoder_block_0/cross_attention/query/kernel": [None, "model", None],
    "decoder_block_0/cross_attention/attention_output/kernel": ["model", None, None],
    "decoder_block_0/feed_forward/intermediate_dense/kernel": [None, "model"],
}


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Starts every JAX run at once (they overlap on the CPU cores).

    One process with 8 devices (single-device, DataParallel(8) and
    ModelParallel(2, 4) runs, one after the other), and two processes with 2
    devices each joined by `jax.distributed` on 127.0.0.1.
    """
    out_dir = tmp_path_factory.mktemp("jax_distribution")
    (port,) = free_ports(1)
    two = subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    codes_and_outputs = run_workers(
        [
            [WORKER, "mesh", str(out_dir)],
            *(
                [WORKER, "process", str(i), str(port), str(out_dir / f"process_{i}")]
                for i in range(2)
            ),
        ],
        [subprocess_env(XLA_FLAGS=EIGHT_DEVICES), two, two],
        timeout=300,
    )
    return out_dir, codes_and_outputs


@pytest.fixture(scope="module")
def mesh_results(workers):
    out_dir, ((code, output), *_) = workers
    assert code == 0, output[-4000:]
    results = {
        name: load_result(out_dir / name) for name in ("single", "data", "model")
    }
    return {**results, "dir": out_dir}


def assert_same_training(run, reference):
    (info, named), (reference_info, reference_named) = run, reference
    np.testing.assert_allclose(info["losses"], reference_info["losses"], rtol=1e-4)
    assert named.keys() == reference_named.keys()
    for path, value in named.items():
        np.testing.assert_allclose(
            value, reference_named[path], rtol=1e-5, atol=1e-5, err_msg=path
        )


def test_single_device_run_trains(mesh_results):
    info, named = mesh_results["single"]
    assert len(info["losses"]) == 3 and np.all(np.isfinite(info["losses"]))
    start = initial_weights({path: value.shape for path, value in named.items()})
    moved = max(np.abs(named[path] - start[path]).max() for path in named)
    assert moved > 1e-2  # the comparisons below are not of untouched weights
    assert all(layout["spec"] is None for layout in info["layouts"].values())


@pytest.mark.parametrize("kind", ["data", "model"])
def test_parallel_training_matches_single_device(mesh_results, kind):
    assert_same_training(mesh_results[kind], mesh_results["single"])


def test_data_parallel_replicates_every_variable_on_8_devices(mesh_results):
    info, _ = mesh_results["data"]
    assert info["num_replicas"] == 8
    for path, layout in info["layouts"].items():
        assert layout["num_devices"] == 8, path
        assert all(axis is None for axis in layout["spec"]), path


def test_model_parallel_shards_kernels_as_the_layout_map_says(mesh_results):
    info, _ = mesh_results["model"]
    layouts = info["layouts"]
    assert info["num_replicas"] == 2
    for path, spec in EXPECTED_MODEL_SPECS.items():
        assert layouts[path]["spec"] == spec, path
        assert layouts[path]["num_devices"] == 8, path
    # A (32, 4 heads, 8) kernel sharded 4 ways keeps one head per device.
    query = layouts["encoder_block_0/self_attention/query/kernel"]
    assert query["shard_shape"] == [32, 1, 8]
    ffn = layouts["encoder_block_0/feed_forward/intermediate_dense/kernel"]
    assert ffn["shard_shape"] == [32, 16]


def test_optimizer_moments_follow_the_weight_layouts(mesh_results):
    layouts = mesh_results["model"][0]["layouts"]
    weight_paths = {
        path.replace("/", "_"): path for path in layouts if not path.startswith("adam")
    }
    checked = 0
    for path, layout in layouts.items():
        name = path.split("/", 1)[-1]
        for suffix in ("_momentum", "_velocity"):
            if path.startswith("adam") and name.endswith(suffix):
                weight = weight_paths[name.removesuffix(suffix)]
                assert layout["spec"] == layouts[weight]["spec"], path
                assert layout["shard_shape"] == layouts[weight]["shard_shape"], path
                checked += 1
    assert checked == 2 * len(weight_paths)


def test_batch_size_not_divisible_by_replicas_is_rejected(mesh_results):
    message = mesh_results["data"][0]["batch_error"]
    assert "`batch_size` must be divisible by the 8 data-parallel replicas" in message
    assert "Received: batch_size=12" in message
    assert mesh_results["model"][0]["batch_error"] is None  # 12 = 6 x 2 replicas
    assert GLOBAL_BATCH % 8 == 0


def test_mesh_that_does_not_divide_the_heads_is_named(mesh_results):
    message = (mesh_results["dir"] / "indivisible_error.txt").read_text()
    assert message.startswith(
        "Variable `encoder_block_0/self_attention/query/kernel` of shape (32, 4, 8) "
        "is sharded (None, 'model', None) on a mesh {'batch': 1, 'model': 8}, "
        "but dimension 1 (4) is not divisible by 8."
    )


def test_batches_that_do_not_split_over_the_replicas_are_refused(mesh_results):
    """As on TensorFlow, with the same message: a batch of 12 on 8 replicas."""
    errors = json.loads((mesh_results["dir"] / "uneven_batch_errors.json").read_text())
    kind, message = errors["arrays"]
    assert kind == "ValueError"  # was JAX's IndivisibleError about a sharding
    assert message.startswith(
        "A batch of 12 rows does not split evenly over the 8 data-parallel replicas"
    )
    kind, message = errors["dataset"]
    assert kind == "InvalidArgumentError"  # checked in the tf.data pipeline
    assert (
        "A batch of 12 rows does not split evenly over the 8 data-parallel" in message
    )


def test_two_processes_match_single_device(workers, mesh_results):
    """`jax.distributed` over 127.0.0.1: 2 processes x 2 CPU devices."""
    out_dir, (_, *processes) = workers
    for code, output in processes:
        assert code == 0, output[-4000:]
    for i in range(2):
        run = load_result(out_dir / f"process_{i}")
        assert run[0]["num_processes"] == 2 and run[0]["local_devices"] == 2
        assert run[0]["num_replicas"] == 4
        assert_same_training(run, mesh_results["single"])
