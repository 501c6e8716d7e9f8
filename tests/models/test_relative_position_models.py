"""`position="relative"`: T5's relative position bias as a position scheme.

T5's bias is one registered `PositionScheme` (`keras_attn.layers.positions.position_schemes`)
whose bias has weights: the scheme gives the models a layer of its own
(`attention_bias_layer`), one per stack, shared by the stack's blocks as in
T5. The models, blocks and attention layers are those of every other scheme.
References: `RelativePositionBias` with the model's weights (its buckets are
checked against T5's formula in NumPy in
tests/layers/test_relative_position_bias.py), the same model's full pass
(cached decoding), its `.keras` file, and training (the weights move).
"""

import keras
import numpy as np
import pytest
from zoo_cases import copy_task, decode_in_steps, make_inputs, make_model, to_numpy

from keras_attn.layers import (
    RelativePositionBias,
    TokenAndPositionEmbedding,
    position_schemes,
)
from keras_attn.layers.positions.position_schemes import RelativeBias, RelativePositions

THREE_HEADS = dict(hidden_dim=24, num_heads=3, intermediate_dim=48)
# Each stack's blocks, its bias layer, and whether its queries see later keys.
STACKS = {
    "transformer": {
        "encoder_block": ("encoder_position_bias", True),
        "decoder_block": ("decoder_position_bias", False),
    },
    "lm": {"decoder_block": ("position_bias", False)},
    "classifier": {"encoder_block": ("position_bias", True)},
}


def reference_bias(
    model, layer_name, bidirectional, query_length, key_length, offset=0
):
    """`RelativePositionBias` holding the model's weights of `layer_name`."""
    bias_layer = getattr(model, layer_name)
    reference = RelativePositionBias(3, bidirectional=bidirectional)
    reference.set_weights(bias_layer.get_weights())
    return to_numpy(
        reference(query_length=query_length, key_length=key_length, query_offset=offset)
    )


# --- The scheme ----------------------------------------------------------------


def test_relative_is_a_registered_scheme_with_a_bias_layer():
    assert "relative" in position_schemes.names()
    scheme = position_schemes.get("relative", sequence_length=64, num_heads=3)
    assert scheme == RelativePositions(num_heads=3)
    assert scheme.biases_attention_scores and not scheme.adds_to_embeddings
    assert scheme.block_arguments() == {}  # no rotation
    assert scheme.max_length is None  # distances past max_distance share a bucket
    assert scheme.position_layer() is None
    layer = scheme.attention_bias_layer(False, name="position_bias")
    assert isinstance(layer, RelativeBias) and layer.name == "position_bias"
    assert not layer.bidirectional and layer.num_heads == 3
    # The bias has weights: no value without the layer that holds them.
    with pytest.raises(ValueError, match="attention_bias_layer"):
        scheme.attention_bias(3, 3)


def test_bad_sizes_are_refused_by_name():
    with pytest.raises(ValueError, match="num_heads=0"):
        RelativePositions(0)
    with pytest.raises(ValueError, match="num_buckets=2"):
        RelativePositions(2, num_buckets=2)  # an encoder needs 4
    with pytest.raises(ValueError, match="max_distance=8"):
        RelativePositions(2, num_buckets=32, max_distance=8)
    # One scalar per bucket and head: the scheme is not made without them.
    with pytest.raises(TypeError, match="num_heads=None"):
        position_schemes.get("relative", sequence_length=6)


def test_the_embedding_adds_no_positions():
    layer = TokenAndPositionEmbedding(11, 6, 8, position=RelativePositions(2))
    assert layer.position_encoding is None
    ids = np.array([[3, 1, 4], [4, 1, 3]], "int32")
    outputs = to_numpy(layer(ids))
    np.testing.assert_array_equal(outputs[0, 0], outputs[1, 2])


def test_the_bias_layer_config_round_trips():
    layer = RelativeBias(2, num_buckets=8, max_distance=20, bidirectional=False)
    config = layer.get_config()
    assert RelativeBias.from_config(config).get_config() == config
    # The arguments are `RelativePositionBias`'s, checked by it.
    assert config == {
        **config,
        **{
            name: value
            for name, value in layer.relative_position_bias.get_config().items()
            if name not in ("name", "dtype", "trainable")
        },
    }
    with pytest.raises(ValueError, match="num_heads=0"):
        RelativeBias(0)


def test_each_stacks_weight_is_saved_under_its_bias_layer():
    # The paths of the files saved since `position="relative"` exists.
    model = make_model("transformer", position="relative")
    paths = sorted(w.path for w in model.weights if "position_bias" in w.path)
    assert paths == [
        "decoder_position_bias/relative_position_bias/embeddings",
        "encoder_position_bias/relative_position_bias/embeddings",
    ]


def test_an_unknown_position_lists_relative():
    with pytest.raises(ValueError, match=r"must be one of \[.*'relative'.*\]"):
        make_model("lm", position="t5")


# --- What the models' blocks receive ---------------------------------------------


# The cases of the tests below that take a `kind` are dealt out among the
# backends run side by side (`split_cases`: the i-th case on the i-th of
# jax, tensorflow, torch): the bias layer's buckets are checked against T5
# on every backend (tests/layers); here, what each model does with it.
@pytest.mark.split_cases
@pytest.mark.parametrize("kind", sorted(STACKS))
def test_every_block_receives_t5s_bias_with_the_models_weights(received_biases, kind):
    model = make_model(kind, position="relative", **THREE_HEADS)
    assert model.position_scheme == RelativePositions(3)
    inputs = make_inputs(kind, batch_size=2)
    model(inputs)
    if kind == "transformer":
        lengths = {
            "encoder_block": inputs["encoder_tokens"].shape[1],
            "decoder_block": inputs["decoder_tokens"].shape[1],
        }
    else:
        lengths = {name: inputs.shape[1] for name in STACKS[kind]}
    names = [name for name, _ in received_biases]
    assert sorted(names) == sorted(
        f"{stack}_{i}" for stack in STACKS[kind] for i in range(model.num_layers)
    )
    for name, bias in received_biases:
        stack = name.rsplit("_", 1)[0]
        layer_name, bidirectional = STACKS[kind][stack]
        length = lengths[stack]
        expected = reference_bias(model, layer_name, bidirectional, length, length)
        np.testing.assert_allclose(to_numpy(bias), expected, rtol=1e-6, err_msg=name)
    if kind == "transformer":
        # One table per stack, as T5: the encoder's and decoder's differ.
        encoder, decoder = (
            to_numpy(model.encoder_position_bias.weights[0]),
            to_numpy(model.decoder_position_bias.weights[0]),
        )
        assert not np.allclose(encoder, decoder)


def test_a_cached_step_receives_the_bias_at_its_cache_index(received_biases):
    model = make_model("lm", position="relative", **THREE_HEADS)
    tokens = make_inputs("lm", batch_size=2)
    cache = model.initial_cache(2, max_length=9)
    _, cache = model.decode_step(tokens[:, :4], cache, 0)
    del received_biases[:]
    model.decode_step(tokens[:, 4:5], cache, 4)
    assert len(received_biases) == model.num_layers
    # The new position (4) against every slot of the cache (9 keys).
    expected = reference_bias(model, "position_bias", False, 1, 9, offset=4)
    for name, bias in received_biases:
        np.testing.assert_allclose(to_numpy(bias), expected, rtol=1e-6, err_msg=name)


# --- Weights: trainable and saved -------------------------------------------------


# One kind per backend when they run side by side (`split_cases`: the i-th
# case on the i-th of jax, tensorflow, torch): each backend trains a bias
# layer once, and the transformer, the costliest to compile, runs on torch.
@pytest.mark.split_cases
@pytest.mark.parametrize("kind", sorted(STACKS))
def test_the_bias_weights_are_trainable_and_train(kind):
    keras.utils.set_random_seed(0)
    model = make_model(kind, position="relative")
    layers = [getattr(model, name) for name, _ in STACKS[kind].values()]
    tables = [layer.weights[0] for layer in layers]
    trainable = {id(weight) for weight in model.trainable_weights}
    assert all(id(table) in trainable for table in tables)
    before = [to_numpy(table) for table in tables]
    inputs, targets = copy_task(kind, batch_size=8)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(inputs, targets, epochs=2, batch_size=8, verbose=0)
    for table, start in zip(tables, before):
        assert not np.allclose(to_numpy(table), start), table.path


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", sorted(STACKS))
def test_keras_file_round_trip_gives_identical_outputs(kind, tmp_path):
    model = make_model(kind, position="relative")
    inputs = make_inputs(kind, batch_size=2)
    path = tmp_path / f"{kind}_relative.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["position"] == "relative"
    assert loaded.position_scheme == model.position_scheme
    for layer_name, _ in STACKS[kind].values():
        np.testing.assert_array_equal(
            getattr(loaded, layer_name).get_weights()[0],
            getattr(model, layer_name).get_weights()[0],
        )
    np.testing.assert_array_equal(to_numpy(loaded(inputs)), to_numpy(model(inputs)))


# --- Cached decoding, length -------------------------------------------------------


def test_lm_cached_decoding_equals_the_full_pass():
    model = make_model("lm", position="relative", **THREE_HEADS)
    tokens = make_inputs("lm", batch_size=2, length=8)
    full = to_numpy(model(tokens))
    # The cache and prefill of test_a_cached_step_receives_the_bias_at_its_
    # cache_index (JAX compiles each op once for each shape it meets).
    cache = model.initial_cache(2, max_length=9)
    cached = decode_in_steps(model, tokens, cache, prefill=4)
    np.testing.assert_allclose(cached, full, atol=1e-5)


def test_transformer_cached_decoding_equals_the_full_pass():
    model = make_model("transformer", position="relative", **THREE_HEADS)
    inputs = make_inputs("transformer", batch_size=2, length=7)
    full = to_numpy(model(inputs))
    encoded = model.encode(inputs["encoder_tokens"])
    cache = model.initial_cache(*encoded, max_length=9)
    cached = decode_in_steps(model, inputs["decoder_tokens"], cache)
    np.testing.assert_allclose(cached, full, atol=1e-5)


def test_sequences_longer_than_max_sequence_length_run():
    model = make_model("lm", position="relative", max_sequence_length=8)
    inputs = make_inputs("lm", batch_size=2, length=12)
    outputs = to_numpy(model(inputs))
    assert np.isfinite(outputs).all()
    cache = model.initial_cache(2, max_length=12)
    np.testing.assert_allclose(
        decode_in_steps(model, inputs, cache, prefill=5), outputs, atol=1e-5
    )
