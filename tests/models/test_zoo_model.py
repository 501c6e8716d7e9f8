"""`ZooModel`, the base of the four models: config, dtype policy, inputs.

Each model built with `dtype="mixed_bfloat16"` comes back with that policy
(and the same outputs) through `get_config`/`from_config` and a `.keras`
file; the config holds exactly the constructor's arguments; the model's
call refuses inputs it would misread and answers empty batches with empty
results, the same on every backend.
"""

import inspect

import keras
import numpy as np
import pytest
from zoo_cases import VOCABULARY_SIZE, ZOO_MODELS, make_inputs, make_model

from keras_attn import layers, models
from keras_attn.models import vision_transformer


def to_numpy(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def layer_policies(model):
    return {layer.path: layer.dtype_policy.name for layer in model.layers}


@pytest.mark.parametrize("kind", ZOO_MODELS)
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
        ("classifier", dict(use_fused_attention="yes"), "use_fused_attention='yes'"),
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
