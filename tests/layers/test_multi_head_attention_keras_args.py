"""`MultiHeadAttention` as a drop-in for `keras.layers.MultiHeadAttention`:
each Keras argument against Keras's layer with copied weights, the
serialization round trip, the deprecated aliases and old saved files."""

import json
import os
import warnings
import zipfile

import h5py
import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import MultiHeadAttention


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def keras_and_ours(query, value, **kwargs):
    """Keras's layer and ours, built alike, with the same random weights."""
    theirs = keras.layers.MultiHeadAttention(**kwargs)
    ours = MultiHeadAttention(**kwargs)
    # With scores: Keras's own fused path fails for `value_dim != key_dim`.
    theirs(query, value, return_attention_scores=True)
    ours(query, value)
    assert [w.path.split("/", 1)[1] for w in theirs.weights] == [
        w.path.split("/", 1)[1] for w in ours.weights
    ]
    rng = np.random.default_rng(1)
    for mine, weight in zip(ours.weights, theirs.weights):
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
        mine.assign(weight)
    return theirs, ours


def assert_same_call(theirs, ours, query, value, **call_kwargs):
    expected, expected_scores = theirs(
        query, value, return_attention_scores=True, **call_kwargs
    )
    output, scores = ours(query, value, return_attention_scores=True, **call_kwargs)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(scores), expected_scores, atol=1e-5)
    # The fused path (no scores) gives the same output.
    fused = ours(query, value, **call_kwargs)
    np.testing.assert_allclose(ops.convert_to_numpy(fused), expected, atol=1e-5)


# --- Each argument against Keras's layer -------------------------------------

SEQUENCE = normal(2, 5, 8)
SOURCE = normal(2, 4, 8, seed=2)
IMAGE = normal(2, 3, 4, 8, seed=3)


# Eight arguments: side by side, each backend runs its share (`split_cases`),
# sequences and attention axes among them.
@pytest.mark.split_cases
@pytest.mark.parametrize(
    "kwargs, query, value",
    [
        (dict(output_shape=(3, 2)), SEQUENCE, SOURCE),
        (dict(output_shape=6, value_dim=3), SEQUENCE, SOURCE),
        (dict(use_gate=True), SEQUENCE, SOURCE),
        (dict(use_gate=True, use_bias=False, value_dim=3), SEQUENCE, SOURCE),
        (dict(attention_axes=(1, 2)), IMAGE, IMAGE),
        (dict(attention_axes=2), IMAGE, IMAGE),
        (dict(attention_axes=-3, use_gate=True), IMAGE, normal(2, 5, 4, 8, seed=4)),
        (dict(attention_axes=(2, 3)), normal(2, 2, 3, 2, 8), normal(2, 2, 2, 3, 8)),
    ],
)
def test_arguments_match_keras(kwargs, query, value):
    theirs, ours = keras_and_ours(query, value, num_heads=2, key_dim=4, **kwargs)
    assert_same_call(theirs, ours, query, value)


@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_sliding_window_matches_keras(use_causal_mask):
    theirs, ours = keras_and_ours(
        SEQUENCE, SEQUENCE, num_heads=2, key_dim=4, sliding_window=2
    )
    assert_same_call(theirs, ours, SEQUENCE, SEQUENCE, use_causal_mask=use_causal_mask)
    _, scores = ours(SEQUENCE, SEQUENCE, return_attention_scores=True)
    distance = np.abs(np.arange(5)[:, None] - np.arange(5)[None, :])
    np.testing.assert_array_equal(ops.convert_to_numpy(scores)[..., distance >= 2], 0)


def test_per_head_attention_mask_matches_keras():
    theirs, ours = keras_and_ours(SEQUENCE, SOURCE, num_heads=2, key_dim=4)
    rng = np.random.default_rng(5)
    mask = rng.random((2, 2, 5, 4)) > 0.3
    mask[..., 0] = True  # Every row attends somewhere (Keras differs on empty rows).
    assert_same_call(theirs, ours, SEQUENCE, SOURCE, attention_mask=mask)
    # A per-head mask whose heads agree is the 3-D mask.
    same = np.repeat(mask[:, :1], 2, axis=1)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ours(SEQUENCE, SOURCE, attention_mask=same)),
        ops.convert_to_numpy(ours(SEQUENCE, SOURCE, attention_mask=mask[:, 0])),
        atol=1e-6,
    )


def test_high_rank_attention_mask_matches_keras():
    theirs, ours = keras_and_ours(
        IMAGE, IMAGE, num_heads=2, key_dim=4, attention_axes=2
    )
    # (batch, other axis, query positions, key positions), broadcast over heads.
    mask = np.random.default_rng(6).random((2, 3, 4, 4)) > 0.3
    mask[..., 0] = True
    assert_same_call(theirs, ours, IMAGE, IMAGE, attention_mask=mask)


def test_key_mask_is_combined_with_value_mask():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    key = normal(2, 4, 8, seed=7)
    value_mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    key_mask = np.array([[1, 0, 1, 1], [1, 1, 0, 1]], bool)
    both = layer(SEQUENCE, SOURCE, key=key, value_mask=value_mask, key_mask=key_mask)
    explicit = layer(
        SEQUENCE, SOURCE, key=key, attention_mask=(value_mask & key_mask)[:, None, :]
    )
    np.testing.assert_allclose(ops.convert_to_numpy(both), explicit, atol=1e-6)


@pytest.mark.parametrize(
    "argument",
    ["kernel_regularizer", "bias_regularizer", "activity_regularizer"],
)
def test_regularizers_match_keras(argument):
    theirs, ours = keras_and_ours(
        SEQUENCE, SOURCE, num_heads=2, key_dim=4, use_gate=True, **{argument: "l2"}
    )
    theirs(SEQUENCE, SOURCE)
    ours(SEQUENCE, SOURCE)
    assert len(ours.losses) == len(theirs.losses) == 5
    np.testing.assert_allclose(
        sum(float(x) for x in ours.losses),
        sum(float(x) for x in theirs.losses),
        rtol=1e-5,
    )


def test_constraints_reach_every_projection():
    layer = MultiHeadAttention(
        num_heads=2,
        key_dim=4,
        use_gate=True,
        kernel_constraint="non_neg",
        bias_constraint="non_neg",
    )
    layer(SEQUENCE, SOURCE)
    for dense in (
        layer.query_dense,
        layer.key_dense,
        layer.value_dense,
        layer.gate_dense,
        layer.output_dense,
    ):
        assert isinstance(dense.kernel.constraint, keras.constraints.NonNeg)
        assert isinstance(dense.bias.constraint, keras.constraints.NonNeg)


def test_seed_generator_only_with_dropout_and_seed_repeats():
    assert MultiHeadAttention(num_heads=2, key_dim=4).seed_generator is None
    outputs = []
    for _ in range(2):
        layer = MultiHeadAttention(
            num_heads=2, key_dim=4, dropout=0.5, seed=3, kernel_initializer="ones"
        )
        outputs.append(ops.convert_to_numpy(layer(SEQUENCE, SOURCE, training=True)))
        assert len(layer.non_trainable_variables) == 1  # the seed generator's state
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_flash_attention_refuses_what_keras_refuses():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, flash_attention=True)
    assert layer.flash_attention is True
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(SEQUENCE, SOURCE)).shape, (2, 5, 8)
    )
    with pytest.raises(ValueError, match="Returning attention scores is not supported"):
        layer(SEQUENCE, SOURCE, return_attention_scores=True)


def test_key_length_different_from_value_length():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    message = r"`value` and `key`.*value_shape=\(2, 2, 8\) and key_shape=\(2, 1, 7\)"
    with pytest.raises(ValueError, match=message):
        layer(normal(2, 4, 8), normal(2, 2, 8), key=normal(2, 1, 7))
    with pytest.raises(ValueError, match=message):
        layer.compute_output_shape((2, 4, 8), (2, 2, 8), (2, 1, 7))
    layer(SEQUENCE, SOURCE)  # Built: the check still runs in `call`.
    with pytest.raises(ValueError, match=r"key_shape=\(2, 3, 8\)"):
        layer(SEQUENCE, SOURCE, key=normal(2, 3, 8))


@pytest.mark.parametrize("attention_axes", [None, 1, -2, (1,)])
def test_sequence_attention_keeps_the_2d_projections(attention_axes, monkeypatch):
    layer = MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=attention_axes)

    def einsum_call(self, inputs, training=None):
        raise AssertionError("EinsumDense.call ran")

    monkeypatch.setattr(keras.layers.EinsumDense, "call", einsum_call)
    if keras.backend.backend() == "torch":
        # torch runs `EinsumDense`'s one einsum call (`AttentionProjection`).
        with pytest.raises(AssertionError, match="EinsumDense.call ran"):
            layer(SEQUENCE, SOURCE, use_causal_mask=False)
    else:
        layer(SEQUENCE, SOURCE, use_causal_mask=False)


# --- Serialization -----------------------------------------------------------


@pytest.mark.parametrize(
    "init_kwargs, inputs",
    [
        (
            dict(
                output_shape=(3, 2),
                use_gate=True,
                sliding_window=3,
                dropout=0.1,
                seed=4,
                kernel_regularizer="l2",
                bias_constraint="non_neg",
            ),
            {"query": SEQUENCE, "value": SOURCE},
        ),
        (
            dict(attention_axes=(1, 2), flash_attention=False),
            {"query": IMAGE, "value": IMAGE},
        ),
    ],
)
def test_layer_contract_with_keras_arguments(init_kwargs, inputs):
    output_shape = (*inputs["query"].shape[:-1], *init_kwargs.get("output_shape", (8,)))
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=2, key_dim=4, **init_kwargs),
        inputs,
        expected_output_shape=output_shape,
        expected_num_trainable_weights=10 if init_kwargs.get("use_gate") else 8,
        run_mixed_precision=False,
    )


def test_config_round_trip_of_every_keras_argument():
    layer = MultiHeadAttention(
        num_heads=2,
        key_dim=4,
        value_dim=3,
        dropout=0.2,
        use_bias=False,
        output_shape=(3, 2),
        attention_axes=(1, 2),
        sliding_window=4,
        flash_attention=False,
        kernel_initializer="ones",
        bias_initializer="ones",
        kernel_regularizer="l2",
        bias_regularizer="l1",
        activity_regularizer="l2",
        kernel_constraint="non_neg",
        bias_constraint="unit_norm",
        use_gate=True,
        seed=5,
    )
    config = json.loads(json.dumps(layer.get_config()))
    restored = MultiHeadAttention.from_config(config)
    assert restored.get_config() == layer.get_config()
    assert restored._output_shape == (3, 2) and restored.attention_axes == (1, 2)
    # Keras's layer reads the same config (less the keras-attn extras).
    keras_config = {k: v for k, v in config.items() if k != "flash_attention"}
    keras.layers.MultiHeadAttention.from_config(keras_config)


# --- Files saved before the rename -------------------------------------------


def test_the_old_names_are_not_constructor_arguments():
    for old in ({"output_dim": 6}, {"use_fused_attention": False}):
        with pytest.raises(ValueError, match="Unrecognized keyword arguments"):
            MultiHeadAttention(num_heads=2, key_dim=4, **old)
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    assert not hasattr(layer, "output_dim")
    assert not hasattr(layer, "use_fused_attention")


def old_config(layer):
    """`layer`'s config as keras-attn wrote it before the rename."""
    config = layer.get_config()
    output_shape = config.pop("output_shape")
    config["output_dim"] = None if output_shape is None else output_shape[-1]
    config["use_fused_attention"] = config.pop("flash_attention") is not False
    for name in (
        "attention_axes",
        "sliding_window",
        "kernel_regularizer",
        "bias_regularizer",
        "activity_regularizer",
        "kernel_constraint",
        "bias_constraint",
        "use_gate",
        "seed",
    ):
        config.pop(name)
    return config


def test_old_config_loads():
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, output_shape=6, flash_attention=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the file is not the user's
        restored = MultiHeadAttention.from_config(old_config(layer))
    assert restored.get_config() == layer.get_config()


def test_old_keras_file_loads(tmp_path):
    query = keras.Input((5, 8))
    value = keras.Input((4, 8))
    layer = MultiHeadAttention(num_heads=2, key_dim=4, output_shape=6)
    model = keras.Model([query, value], layer(query, value))
    path = str(tmp_path / "new.keras")
    model.save(path)
    # Rewrite the file's config as keras-attn wrote it before the rename.
    old_path = str(tmp_path / "old.keras")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(old_path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                for entry in config["config"]["layers"]:
                    if entry["class_name"] == "MultiHeadAttention":
                        entry["config"] = old_config(layer)
                data = json.dumps(config).encode()
            target.writestr(item, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        loaded = keras.saving.load_model(old_path)
    inputs = [normal(2, 5, 8), normal(2, 4, 8, seed=1)]
    np.testing.assert_allclose(
        ops.convert_to_numpy(loaded(inputs)),
        ops.convert_to_numpy(model(inputs)),
        atol=1e-6,
    )
    os.remove(path)


# --- Keras's names and override point -----------------------------------------


def test_keras_private_names_read_the_same_sub_layers(tmp_path):
    layer = MultiHeadAttention(num_heads=2, key_dim=4, use_gate=True, dropout=0.1)
    layer(SEQUENCE, SOURCE)
    for name, layer_name in (
        ("query", "query"),
        ("key", "key"),
        ("value", "value"),
        ("output", "attention_output"),
        ("gate", "gate"),
    ):
        dense = getattr(layer, f"_{name}_dense")
        assert dense is getattr(layer, f"{name}_dense")
        assert dense.name == layer_name
    assert (layer._num_heads, layer._key_dim, layer._value_dim) == (2, 4, 4)
    assert (layer._dropout, layer._use_bias, layer._use_gate) == (0.1, True, True)
    assert layer._flash_attention is None and layer._sliding_window is None
    assert layer._inverse_sqrt_key_dim == pytest.approx(0.5)
    assert MultiHeadAttention(num_heads=2, key_dim=4).gate_dense is None
    # The public names are the saved paths (as before the private names).
    query = keras.Input((5, 8))
    model = keras.Model(query, layer(query, query))
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    with h5py.File(path) as weights:
        (saved,) = (
            set(group)
            for name, group in weights["layers"].items()
            if "attention" in name
        )
    assert {"query_dense", "key_dense", "value_dense", "gate_dense"} <= saved
    assert "output_dense" in saved and not any(n.startswith("_") for n in saved)


def test_projections_start_from_different_weights():
    # One unseeded initializer draws its seed once: shared by the sub-layers,
    # the query, key and value kernels would start equal.
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    layer(SEQUENCE, SEQUENCE)
    kernels = [
        ops.convert_to_numpy(dense.kernel)
        for dense in (layer.query_dense, layer.key_dense, layer.value_dense)
    ]
    assert not np.allclose(kernels[0], kernels[1])
    assert not np.allclose(kernels[0], kernels[2])


class Biased(MultiHeadAttention):
    """A variant through the override point: a fixed bias on every score."""

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
        attention_bias=None,
    ):
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        distance = ops.cast(
            ops.arange(key_length)[None, :] - ops.arange(query_length)[:, None],
            "float32",
        )
        return super()._compute_attention(
            query,
            key,
            value,
            attention_mask,
            training,
            return_attention_scores,
            use_causal_mask,
            attention_bias=-0.5 * ops.abs(distance),
        )


@pytest.mark.parametrize("path", ["call", "cached", "attention_axes"])
def test_compute_attention_override_serves_every_path(path):
    kwargs = dict(num_heads=2, key_dim=4, kernel_initializer="random_normal")
    query = IMAGE if path == "attention_axes" else SEQUENCE
    if path == "attention_axes":
        kwargs["attention_axes"] = 2
    plain, biased = MultiHeadAttention(**kwargs), Biased(**kwargs)
    plain(query, query)
    biased(query, query)
    for mine, theirs in zip(biased.weights, plain.weights):
        mine.assign(theirs)
    length = query.shape[-2]
    bias = -0.5 * np.abs(np.arange(length)[None, :] - np.arange(length)[:, None])
    if path == "cached":
        keys, values = biased.compute_key_value(query)
        output = biased.call_with_key_value(query, keys, values)
        expected = plain.call_with_key_value(
            query, keys, values, attention_bias=bias.astype("float32")
        )
    else:
        output = biased(query, query, use_causal_mask=True)
        expected = plain(
            query, query, use_causal_mask=True, attention_bias=bias.astype("float32")
        )
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(expected), atol=1e-5
    )
    unbiased = plain(query, query, use_causal_mask=path != "cached")
    difference = ops.convert_to_numpy(output) - ops.convert_to_numpy(unbiased)
    assert np.abs(difference).max() > 1e-3


def test_override_with_keras_older_signature_gets_the_merged_causal_mask():
    seen = []

    class Older(MultiHeadAttention):
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
        ):
            seen.append(attention_mask)
            return super()._compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )

    layer = Older(num_heads=2, key_dim=4)
    output = layer(SEQUENCE, SEQUENCE, use_causal_mask=True)
    causal = np.tril(np.ones((5, 5), bool))
    np.testing.assert_array_equal(
        ops.convert_to_numpy(seen[-1]), np.broadcast_to(causal, (2, 5, 5))
    )
    plain = MultiHeadAttention(num_heads=2, key_dim=4)
    plain(SEQUENCE, SEQUENCE)
    for mine, theirs in zip(plain.weights, layer.weights):
        mine.assign(theirs)
    np.testing.assert_allclose(
        ops.convert_to_numpy(plain(SEQUENCE, SEQUENCE, use_causal_mask=True)),
        ops.convert_to_numpy(output),
        atol=1e-6,
    )


def test_causal_mask_alone_reaches_the_kernel_as_a_flag(monkeypatch):
    calls = []
    original = ops.dot_product_attention

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", recording)
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    layer(SEQUENCE, SEQUENCE, use_causal_mask=True)
    assert calls[-1]["is_causal"] is True and calls[-1]["mask"] is None
    layer(SEQUENCE, SEQUENCE, use_causal_mask=True, value_mask=np.ones((2, 5), bool))
    assert calls[-1]["is_causal"] is False and calls[-1]["mask"] is not None
