"""`RotaryEmbedding` / `apply_rotary` against NumPy and keras-hub's layer."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import RotaryEmbedding, apply_rotary


def numpy_rope(x, positions, max_wavelength=10000, scaling_factor=1.0, rotary_dim=None):
    """RoFormer's rotation of the feature pairs `(i, i + d/2)` (rotate half),
    in float64; `x` is `(batch, length, heads, head_dim)`.
    """
    x = np.asarray(x, "float64")
    batch, length = x.shape[:2]
    dim = rotary_dim or x.shape[-1]
    half = dim // 2
    theta = max_wavelength ** (-2.0 * np.arange(half) / dim) / scaling_factor
    positions = np.broadcast_to(np.asarray(positions, "float64"), (batch, length))
    out = x.copy()
    for i in range(half):
        angle = positions[:, :, None] * theta[i]  # (batch, length, 1)
        cos, sin = np.cos(angle), np.sin(angle)
        first, second = x[..., i], x[..., i + half]
        out[..., i] = first * cos - second * sin
        out[..., i + half] = second * cos + first * sin
    return out


def random(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def to_numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize(
    "rotary_dim, scaling_factor, positions",
    [
        (None, 1.0, np.arange(5) + 3),
        (4, 2.5, np.arange(5)),
        (6, 1.0, np.array([[0, 1, 2, 3, 4], [7, 7, 9, 30, 2]])),
    ],
)
def test_apply_rotary_equals_the_numpy_reference(rotary_dim, scaling_factor, positions):
    x = random((2, 5, 3, 8))
    actual = apply_rotary(
        x, positions, scaling_factor=scaling_factor, rotary_dim=rotary_dim
    )
    expected = numpy_rope(x, positions, 10000, scaling_factor, rotary_dim)
    np.testing.assert_allclose(to_numpy(actual), expected, rtol=1e-5, atol=1e-5)
    # Partial rotary: the features after `rotary_dim` pass unchanged.
    if rotary_dim:
        np.testing.assert_array_equal(
            to_numpy(actual)[..., rotary_dim:], x[..., rotary_dim:]
        )


def test_apply_rotary_on_heads_first_layout():
    x = random((2, 5, 3, 8))  # (batch, length, heads, head_dim)
    positions = np.arange(5) + 2
    heads_first = np.transpose(x, (0, 2, 1, 3))  # (batch, heads, length, head_dim)
    actual = apply_rotary(heads_first, positions, max_wavelength=100, sequence_axis=2)
    expected = apply_rotary(x, positions, max_wavelength=100)
    np.testing.assert_allclose(
        to_numpy(actual), np.transpose(to_numpy(expected), (0, 2, 1, 3)), atol=1e-6
    )


def test_rotated_scores_depend_only_on_the_distance():
    q, k = random((1, 1, 1, 8), 1), random((1, 1, 1, 8), 2)

    def score(query_position, key_position):
        rotated_q = apply_rotary(q, np.array([query_position]))
        rotated_k = apply_rotary(k, np.array([key_position]))
        return float(ops.sum(rotated_q * rotated_k))

    np.testing.assert_allclose(score(3, 1), score(40, 38), rtol=1e-4)
    np.testing.assert_allclose(score(0, 0), float(np.sum(q * k)), rtol=1e-5)


def test_layer_equals_the_numpy_reference():
    x = random((2, 4, 3, 6))
    layer = RotaryEmbedding(max_wavelength=500, scaling_factor=2.0)
    np.testing.assert_allclose(
        to_numpy(layer(x, start_index=7)),
        numpy_rope(x, np.arange(4) + 7, 500, 2.0),
        rtol=1e-5,
        atol=1e-5,
    )
    positions = np.array([[0, 5, 5, 9], [3, 2, 1, 0]])
    np.testing.assert_allclose(
        to_numpy(layer(x, positions=positions)),
        numpy_rope(x, positions, 500, 2.0),
        rtol=1e-5,
        atol=1e-5,
    )


PEER_CONFIGS = [
    {},
    {"max_wavelength": 1000, "scaling_factor": 4.0},
    {"rope_type": "dynamic", "scaling_factor": 3.0},
    {"rope_type": "yarn", "scaling_factor": 4.0, "original_max_position_embeddings": 8},
    {
        "rope_type": "yarn",
        "scaling_factor": 8.0,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "original_max_position_embeddings": 32,
        "truncate": False,
    },
    {"denominator_dim": 12},
    {"sequence_axis": 2, "feature_axis": 1},
]


# Seven configurations: side by side, each backend runs its share
# (`split_cases`).
@pytest.mark.split_cases
@pytest.mark.parametrize("config", PEER_CONFIGS, ids=str)
def test_layer_equals_keras_hub(config):
    x = random((2, 5, 3, 8))
    if "feature_axis" in config:
        x = np.transpose(x, (0, 3, 1, 2))  # (batch, dim, length, heads)
    ours, peer = RotaryEmbedding(**config), keras_hub.layers.RotaryEmbedding(**config)
    for kwargs in ({}, {"start_index": 11}):
        np.testing.assert_allclose(
            to_numpy(ours(x, **kwargs)), to_numpy(peer(x, **kwargs)), atol=1e-6
        )
    if "feature_axis" not in config:
        positions = np.array([[4, 0, 2, 9, 1], [1, 2, 3, 4, 5]], "float32")
        np.testing.assert_allclose(
            to_numpy(ours(x, positions=positions)),
            to_numpy(peer(x, positions=positions)),
            atol=1e-6,
        )
        assert ours.get_config() == peer.get_config() | {"name": ours.name}


def test_cached_steps_equal_the_full_pass():
    x = random((2, 6, 2, 4))
    layer = RotaryEmbedding(scaling_factor=2.0)
    full = to_numpy(layer(x))
    steps = [to_numpy(layer(x[:, i : i + 1], start_index=i)) for i in range(6)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-6)


@pytest.mark.parametrize(
    "init_kwargs, shape",
    [({"max_wavelength": 1000, "scaling_factor": 2.0}, (2, 4, 6)), ({}, (2, 3, 2, 4))],
)
def test_layer_contract(init_kwargs, shape):
    run_layer_test(
        RotaryEmbedding,
        init_kwargs,
        random(shape),
        expected_output_shape=shape,
        expected_num_trainable_weights=0,
    )


def test_mixed_precision_rotates_in_float32():
    x = random((1, 3, 1, 8))
    layer = RotaryEmbedding(dtype="mixed_bfloat16")
    outputs = layer(x, start_index=1000)
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    # Only the final rounding to bfloat16: bfloat16 inputs, float32 angles.
    rounded = to_numpy(ops.cast(x, "bfloat16"))
    expected = numpy_rope(rounded, np.arange(3) + 1000)
    np.testing.assert_allclose(to_numpy(outputs), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RotaryEmbedding(rope_type="ntk"), "rope_type='ntk'"),
        (lambda: RotaryEmbedding(max_wavelength=0), "max_wavelength=0"),
        (lambda: RotaryEmbedding(scaling_factor=-1.0), "scaling_factor=-1.0"),
        (lambda: RotaryEmbedding(sequence_axis=2, feature_axis=2), "feature_axis=2"),
        (lambda: RotaryEmbedding()(random((2, 3, 5))), "inputs.shape[2]=5"),
        (lambda: RotaryEmbedding()(random((3, 4))), "inputs.shape=(3, 4)"),
        (lambda: RotaryEmbedding(feature_axis=3)(random((2, 3, 4))), "feature_axis=3"),
        (
            lambda: apply_rotary(random((1, 2, 1, 4)), [0, 1], rotary_dim=6),
            "rotary_dim=6",
        ),
        (
            lambda: apply_rotary(random((1, 2, 1, 8)), [0, 1], rotary_dim=3),
            "rotary_dim=3",
        ),
        (
            lambda: apply_rotary(random((1, 2, 4)), [0, 1], sequence_axis=2),
            "sequence_axis=2",
        ),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert message in str(error.value)
