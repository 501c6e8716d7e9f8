"""`ZooModel`, the base of the four models: config, dtype policy, inputs.

Each model built with `dtype="mixed_bfloat16"` comes back with that policy
(and the same outputs) through `get_config`/`from_config` and a `.keras`
file; the config holds exactly the constructor's arguments; the model's
call refuses inputs it would misread and answers empty batches with empty
results, the same on every backend.
"""

import dataclasses
import inspect
import typing

import keras
import numpy as np
import pytest
from keras import ops
from zoo_cases import (
    SPLIT_ZOO_MODELS,
    VOCABULARY_SIZE,
    ZOO_MODELS,
    make_inputs,
    make_model,
)

from keras_attn import layers, models
from keras_attn.layers import position_schemes
from keras_attn.models import vision_transformer


def to_numpy(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def layer_policies(model):
    return {layer.path: layer.dtype_policy.name for layer in model.layers}


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", SPLIT_ZOO_MODELS)
def test_mixed_precision_policy_round_trips_config_and_keras_file(kind, tmp_path):
    keras.utils.set_random_seed(0)
    model = make_model(kind, dtype="mixed_bfloat16")
    inputs = make_inputs(kind, batch_size=2)
    expected = to_numpy(model(inputs))
    assert set(layer_policies(model).values()) >= {"mixed_bfloat16"}

    from_config = type(model).from_config(model.get_config())
    from_config.set_weights(model.get_weights())
    path = tmp_path / f"{kind}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)

    for restored in (from_config, loaded):
        assert type(restored) is type(model)
        assert restored.get_config()["dtype"] == model.get_config()["dtype"]
        assert restored._layers_dtype_policy.name == "mixed_bfloat16"
        assert layer_policies(restored) == layer_policies(model)
        np.testing.assert_array_equal(to_numpy(restored(inputs)), expected)


@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_config_is_the_constructor_arguments_chained_to_keras(kind):
    model = make_model(kind)
    config = model.get_config()
    parameters = inspect.signature(type(model).__init__).parameters
    arguments = set(parameters) - {"self", "kwargs"}
    # `keras.Model.get_config` gives `name` and `trainable`.
    assert set(config) == arguments | {"name", "trainable"}
    assert config["name"] == model.name


@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_get_config_round_trips_with_the_same_outputs(kind):
    keras.utils.set_random_seed(0)
    model = make_model(kind, name=f"my_{kind}")
    config = model.get_config()
    restored = type(model).from_config(config)
    assert restored.get_config() == config
    restored.set_weights(model.get_weights())
    inputs = make_inputs(kind, batch_size=2)
    np.testing.assert_array_equal(to_numpy(restored(inputs)), to_numpy(model(inputs)))


@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_an_unknown_keyword_argument_is_a_type_error_naming_it(kind):
    with pytest.raises(TypeError, match=r"'hidden_dm' \(did you mean 'hidden_dim'"):
        make_model(kind, hidden_dm=8)
    config = {**make_model(kind).get_config(), "num_head": 2}
    # A misnamed key of a saved config: a TypeError listing the valid
    # arguments, not a KeyError.
    with pytest.raises(
        TypeError, match=r"'num_head'.*Valid arguments: \[.*'num_heads'"
    ):
        type(make_model(kind)).from_config(config)


@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_flash_attention_reaches_every_block_and_use_fused_attention_is_gone(kind):
    model = make_model(kind, attention={"flash_attention": False})
    assert model.attention.flash_attention is False
    assert model.get_config()["attention"]["flash_attention"] is False
    blocks = [layer for layer in model.layers if "_block_" in layer.name]
    assert blocks and all(block.flash_attention is False for block in blocks)
    # The deprecated alias was removed; saved configs still load (below).
    with pytest.raises(TypeError, match="'use_fused_attention'"):
        make_model(kind, use_fused_attention=False)


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", ZOO_MODELS)
@pytest.mark.parametrize("fused, flash", [(True, None), (False, False)])
def test_a_config_saved_with_use_fused_attention_loads(kind, fused, flash):
    config = make_model(kind).get_config()
    del config["attention"]
    # As main at 5c2228a saved it: the attention arguments flat.
    config.update(attention_dropout=0.0, use_fused_attention=fused)
    restored = type(make_model(kind)).from_config(config)
    assert restored.attention.flash_attention is flash
    assert restored.get_config()["attention"]["flash_attention"] is flash


# The layers each model holds as attributes: attribute -> layer name(s).
LAYER_ATTRIBUTES = {
    "transformer": {
        "encoder_padding_mask_layer": "encoder_padding_mask",
        "decoder_padding_mask_layer": "decoder_padding_mask",
        "encoder_embedding": "token_embedding",
        "decoder_embedding": "token_embedding",
        "token_embedding": "token_embedding",
        "encoder_embedding_dropout": "encoder_embedding_dropout",
        "decoder_embedding_dropout": "decoder_embedding_dropout",
        "encoder_position_bias": None,
        "decoder_position_bias": None,
        "encoder_blocks": ["encoder_block_0", "encoder_block_1"],
        "decoder_blocks": ["decoder_block_0", "decoder_block_1"],
        "encoder_output_norm": None,
        "decoder_output_norm": None,
        "output_projection": "logits",
    },
    "lm": {
        "padding_mask_layer": "padding_mask",
        "token_embedding": "token_embedding",
        "embedding_dropout": "embedding_dropout",
        "position_bias": None,
        "blocks": ["decoder_block_0", "decoder_block_1"],
        "output_norm": "output_norm",
        "output_projection": "logits",
    },
    "classifier": {
        "padding_mask_layer": "padding_mask",
        "token_embedding": "token_embedding",
        "embedding_norm": "embedding_norm",
        "embedding_dropout": "embedding_dropout",
        "position_bias": None,
        "blocks": ["encoder_block_0", "encoder_block_1"],
        "output_norm": None,
        "sequence_pooling": "pooling",
        "pooled_dropout": "pooled_dropout",
        "classification_head": "logits",
    },
    "vit": {
        "patch_embedding": "patch_embedding",
        "patch_sequence": "patch_sequence",
        "class_token": "class_token",
        "position_embedding": "position_embedding",
        "add_position_embedding": "add_position_embedding",
        "embedding_dropout": "embedding_dropout",
        "blocks": ["encoder_block_0", "encoder_block_1"],
        "output_norm": "output_norm",
        "class_token_output": "class_token_output",
        "classification_head": "logits",
    },
}


@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_the_layers_are_attributes_of_the_model(zoo, kind):
    model = zoo[kind]
    for attribute, names in LAYER_ATTRIBUTES[kind].items():
        value = getattr(model, attribute)
        if names is None:
            assert value is None, attribute
        elif isinstance(names, list):
            assert list(value) == [model.get_layer(name) for name in names]
        else:
            assert value is model.get_layer(names), attribute
    # The graph's layers, each reachable by an attribute.
    held = set()
    for attribute in LAYER_ATTRIBUTES[kind]:
        value = getattr(model, attribute)
        held.update(map(id, value if isinstance(value, list) else [value]))
    inputs = {tensor.name for tensor in model.inputs}
    assert {layer.name for layer in model.layers if id(layer) not in held} == inputs


def test_one_initial_cache_in_the_layers_compute_dtype():
    # The encoder-decoder and the decoder-only model share one cache
    # allocation: the same slots, dtype and length check.
    lm = make_model("lm", dtype="mixed_bfloat16")
    keys, values = lm.initial_cache(2, 5)["self_attention"][0]
    assert tuple(keys.shape) == (2, 5, lm.num_heads, lm.hidden_dim // lm.num_heads)
    assert keras.backend.standardize_dtype(values.dtype) == "bfloat16"
    transformer = make_model("transformer", position="learned")
    encoder_output, mask = transformer.encode(
        make_inputs("transformer")["encoder_tokens"]
    )
    for model, arguments in ((lm, (1,)), (transformer, (encoder_output, mask))):
        with pytest.raises(ValueError, match=r"max_sequence_length=64.*max_length=65"):
            model.initial_cache(*arguments, max_length=65)
        with pytest.raises(TypeError, match="max_length='5'"):
            model.initial_cache(*arguments, max_length="5")


def test_class_token_moved_to_layers_under_its_old_registered_name():
    assert keras.saving.get_registered_name(layers.ClassToken) == (
        "keras_attn>ClassToken"
    )
    assert vision_transformer.ClassToken is layers.ClassToken
    layer = layers.ClassToken(initializer="ones")
    restored = layers.ClassToken.from_config(layer.get_config())
    outputs = restored(np.zeros((2, 3, 4), "float32"))
    assert tuple(outputs.shape) == (2, 4, 4)
    np.testing.assert_array_equal(to_numpy(outputs)[:, 0], np.ones((2, 4)))


# --- Arguments -----------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (dict(num_encoder_layers=0), ValueError, "Received: num_encoder_layers=0"),
        (dict(num_decoder_layers=True), TypeError, "num_decoder_layers=True"),
        (dict(pad_id=1.5), TypeError, "Received: pad_id=1.5"),
        (dict(pad_id=True), TypeError, "Received: pad_id=True"),
        (dict(normalize_first="no"), TypeError, "normalize_first='no'"),
        (dict(tie_embeddings=1), TypeError, "tie_embeddings=1"),
        (dict(max_sequence_length="64"), TypeError, "max_sequence_length='64'"),
        (dict(layer_norm_epsilon=float("nan")), ValueError, "layer_norm_epsilon"),
        (dict(activation="swishy"), ValueError, "activation='swishy'"),
        (
            dict(hidden_dim=9, num_heads=3, position="sinusoidal"),
            ValueError,
            "`hidden_dim` must be even .* Received: hidden_dim=9",
        ),
    ],
)
def test_transformer_arguments_are_checked_by_their_public_name(
    overrides, error, message
):
    with pytest.raises(error, match=message):
        models.Transformer.from_preset(
            "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, **overrides
        )


@pytest.mark.parametrize(
    "kind, overrides, message",
    [
        ("lm", dict(num_layers=0), "Received: num_layers=0"),
        ("classifier", dict(pooling="max"), "pooling='max'"),
        (
            "classifier",
            dict(attention={"flash_attention": "yes"}),
            "flash_attention='yes'",
        ),
        ("vit", dict(image_size=(8, 0)), "image_size=0"),
        ("vit", dict(patch_size=3), "image_size=.*patch_size=3"),
        ("vit", dict(num_channels=2.0), "num_channels=2.0"),
    ],
)
def test_zoo_arguments_are_checked_by_their_public_name(kind, overrides, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make_model(kind, **overrides)


# --- Inputs --------------------------------------------------------------------


@pytest.fixture(scope="module")
def zoo():
    return {kind: make_model(kind) for kind in ZOO_MODELS}


@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_an_empty_batch_gives_an_empty_result(zoo, kind):
    model = zoo[kind]
    inputs = make_inputs(kind, batch_size=0)
    outputs = model(inputs)
    expected = model.compute_output_spec(
        keras.tree.map_structure(lambda x: keras.KerasTensor(x.shape, x.dtype), inputs)
    )
    assert tuple(outputs.shape) == tuple(expected.shape)
    assert outputs.shape[0] == 0


def test_empty_sequences_keep_their_positions_or_are_refused(zoo):
    tokens = np.ones((2, 0), "int32")
    assert tuple(zoo["lm"](tokens).shape) == (2, 0, VOCABULARY_SIZE)
    pair = {"encoder_tokens": np.ones((2, 3), "int32"), "decoder_tokens": tokens}
    assert tuple(zoo["transformer"](pair).shape) == (2, 0, VOCABULARY_SIZE)
    with pytest.raises(ValueError, match=r"token_ids.shape=\(2, 0\)"):
        zoo["classifier"](tokens)
    pair = {"encoder_tokens": tokens, "decoder_tokens": np.ones((2, 3), "int32")}
    with pytest.raises(ValueError, match=r"encoder_tokens.shape=\(2, 0\)"):
        zoo["transformer"](pair)


def test_unknown_or_missing_input_keys_are_refused(zoo):
    tokens = make_inputs("lm")
    inputs = {"encoder_tokens": tokens, "decoder_tokens": tokens, "labels": tokens}
    with pytest.raises(ValueError, match=r"unknown: \['labels'\]"):
        zoo["transformer"](inputs)
    with pytest.raises(ValueError, match=r"missing: \['decoder_tokens'\]"):
        zoo["transformer"]({"encoder_tokens": tokens})
    with pytest.raises(TypeError, match="must be a dict"):
        zoo["transformer"](tokens)
    with pytest.raises(ValueError, match=r"unknown: \['tokens'\]"):
        zoo["lm"]({"tokens": tokens})
    np.testing.assert_array_equal(
        to_numpy(zoo["lm"]({"token_ids": tokens})), to_numpy(zoo["lm"](tokens))
    )


@pytest.mark.parametrize("kind", ["lm", "classifier"])
def test_bool_ids_and_ragged_lists_are_refused(zoo, kind):
    with pytest.raises(TypeError, match="`token_ids` must hold integer token ids"):
        zoo[kind](np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="`token_ids` must be a rectangular batch"):
        zoo[kind]([[1, 2, 3], [1, 2]])
    as_list = [[1, 2, 3], [4, 5, 6]]
    np.testing.assert_array_equal(
        to_numpy(zoo[kind](as_list)), to_numpy(zoo[kind](np.array(as_list, "int32")))
    )


def test_inputs_longer_than_the_learned_positions_are_named(zoo):
    tokens = np.ones((2, 65), "int32")  # The tiny presets learn 64 positions.
    with pytest.raises(ValueError, match=r"`token_ids` is longer than max_seq"):
        zoo["lm"](tokens)
    with pytest.raises(ValueError, match=r"token_ids.shape=\(2, 65\)"):
        zoo["classifier"](tokens)


# --- Position schemes ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConstantBias(position_schemes.SinusoidalPositions):
    """Sinusoids plus one constant added to every score, calls recorded.

    A constant shifts every score of a row alike, so softmax, and the
    model's outputs, do not change; NaN poisons every score it reaches.
    """

    name: typing.ClassVar[str] = "test_constant_bias"
    biases_attention_scores: typing.ClassVar[bool] = True
    value: float = 3.0
    calls: list = dataclasses.field(default_factory=list, compare=False)

    @classmethod
    def for_model(cls, sequence_length=None, num_heads=None):
        return SCHEME_IN_USE[0]

    def attention_bias(
        self, query_length, key_length, query_offset=0, bidirectional=False
    ):
        self.calls.append((query_length, key_length, query_offset, bidirectional))
        # (batch, heads, query, key)
        return ops.full((1, 1, query_length, key_length), self.value)


SCHEME_IN_USE = []


@pytest.fixture
def biased(monkeypatch):
    """`position="test_constant_bias"` gives the scheme `biased(value)` made."""
    monkeypatch.setitem(position_schemes._SCHEMES, ConstantBias.name, ConstantBias)

    def use(value):
        SCHEME_IN_USE[:] = [ConstantBias(value=value)]
        return SCHEME_IN_USE[0]

    yield use
    SCHEME_IN_USE.clear()


# Each stack's bias layer, and whether its queries see later keys.
BIAS_LAYERS = {
    "transformer": {"encoder_position_bias": True, "decoder_position_bias": False},
    "lm": {"position_bias": False},
    "classifier": {"position_bias": True},
}


@pytest.mark.parametrize("kind", sorted(BIAS_LAYERS))
def test_a_scheme_bias_reaches_every_block(biased, kind):
    keras.utils.set_random_seed(0)
    plain = make_model(kind, position="sinusoidal")
    inputs = make_inputs(kind, batch_size=2)
    expected = to_numpy(plain(inputs))

    scheme = biased(3.0)
    model = make_model(kind, position="test_constant_bias")
    assert model.position_scheme is scheme
    for attribute, bidirectional in BIAS_LAYERS[kind].items():
        layer = model.get_layer(attribute)
        assert getattr(model, attribute) is layer
        assert layer.bidirectional is bidirectional
    model.set_weights(plain.get_weights())
    del scheme.calls[:]
    np.testing.assert_allclose(to_numpy(model(inputs)), expected, atol=1e-5)
    # One bias per stack and call, for the lengths of this call.
    if kind == "transformer":
        source = inputs["encoder_tokens"].shape[1]
        target = inputs["decoder_tokens"].shape[1]
        expected_calls = [(source, source, 0, True), (target, target, 0, False)]
    else:
        length = inputs.shape[1]
        expected_calls = [(length, length, 0, BIAS_LAYERS[kind]["position_bias"])]
    assert [(int(q), int(k), o, b) for q, k, o, b in scheme.calls] == expected_calls

    biased(float("nan"))
    poisoned = make_model(kind, position="test_constant_bias")
    poisoned.set_weights(plain.get_weights())
    assert np.isnan(to_numpy(poisoned(inputs))).all()


@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_a_cached_step_asks_the_bias_at_its_cache_index(biased, kind):
    scheme = biased(3.0)
    model = make_model(kind, position="test_constant_bias")
    inputs = make_inputs(kind, batch_size=2)
    if kind == "transformer":
        encoded = model.encode(inputs["encoder_tokens"])
        tokens = inputs["decoder_tokens"]
        full = to_numpy(model.decode(tokens, *encoded))
        cache = model.initial_cache(*encoded, max_length=7)
    else:
        tokens = inputs
        full = to_numpy(model(tokens))
        cache = model.initial_cache(2, max_length=7)
    del scheme.calls[:]
    first, cache = model.decode_step(tokens[:, :3], cache, 0)
    second, cache = model.decode_step(tokens[:, 3:4], cache, 3)
    assert scheme.calls == [(3, 7, 0, False), (1, 7, 3, False)]
    np.testing.assert_allclose(to_numpy(first), full[:, :3], atol=1e-5)
    np.testing.assert_allclose(to_numpy(second), full[:, 3:4], atol=1e-5)


def test_positions_are_asked_of_the_scheme_not_compared_by_name(zoo):
    assert zoo["lm"].position_scheme == position_schemes.LearnedPositions(64)
    assert zoo["transformer"].position_scheme == position_schemes.SinusoidalPositions()
    # ViT learns one position per patch and one for the class token.
    assert zoo["vit"].position_scheme.max_length == 16 + 1
