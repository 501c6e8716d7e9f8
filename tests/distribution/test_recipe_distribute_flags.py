"""The translation recipe's `--distribute` / `--mesh` flags and its check that
every length bucket's batch splits evenly over the replicas (no training)."""

import pytest

from keras_attn.distribution import TrainingDistribution
from keras_attn_recipes import translate_multi30k, translation_steps
from keras_attn_recipes.translation_config import SETTINGS


@pytest.mark.parametrize("command", ["train", "all"])
def test_flags_reach_the_training_subcommands(command):
    args = translate_multi30k.parse_args(
        [command, "--distribute", "model", "--mesh", "2,4"]
    )
    assert (args.distribute, args.mesh) == ("model", (2, 4))
    args = translate_multi30k.parse_args([command])
    assert (args.distribute, args.mesh) == ("none", None)


@pytest.mark.parametrize("mesh", ["2,x", "0", "1,2,3"])
def test_bad_mesh_is_a_usage_error(mesh, capsys):
    with pytest.raises(SystemExit) as exit_info:
        translate_multi30k.parse_args(["train", "--mesh", mesh])
    assert exit_info.value.code == 2
    # The library's `parse_mesh_shape` message, as a usage error.
    err = capsys.readouterr().err
    assert "argument --mesh: `mesh` must be one or two positive integers" in err
    assert f"Received: mesh={mesh!r}" in err


def test_bucket_batch_sizes_are_the_pipelines():
    # tiny: 512-token batches, buckets 8, 12, 16, 24, 32, 48 and max_length 64.
    assert translation_steps._bucket_batch_sizes(SETTINGS["tiny"]) == [
        64,
        42,
        32,
        21,
        16,
        10,
        8,
    ]


def test_uneven_buckets_are_rejected_before_training_with_a_fix():
    eight = TrainingDistribution("data", "jax", (8,))
    with pytest.raises(ValueError) as error:
        translation_steps._check_batches_split_evenly(eight, SETTINGS["tiny"])
    message = str(error.value)
    assert "not divisible: [10, 21, 42]" in message
    assert "max_tokens_per_batch=N` with N a multiple of 1536" in message
    # 3072-token batches (384 x 8) split over 8 devices.
    quick_3072 = SETTINGS["quick"].replace(max_tokens_per_batch=3072)
    translation_steps._check_batches_split_evenly(eight, quick_3072)
    tiny_fixed = SETTINGS["tiny"].replace(max_tokens_per_batch=1536)
    translation_steps._check_batches_split_evenly(eight, tiny_fixed)


def test_r_drop_is_refused_with_data_parallel_replicas():
    eight = TrainingDistribution("data", "jax", (8,))
    r_drop = SETTINGS["tiny"].replace(r_drop_alpha=5.0)
    with pytest.raises(ValueError, match="Received: r_drop_alpha=5.0, 8 replicas"):
        translation_steps._check_r_drop_on_one_replica(eight, r_drop)
    one = TrainingDistribution("none", "jax", (1,))
    translation_steps._check_r_drop_on_one_replica(one, r_drop)
    translation_steps._check_r_drop_on_one_replica(eight, SETTINGS["tiny"])
