"""Property tests of the models' constructors and calls (issue #18).

For every constructor argument of the four models, a hostile value of its
kind either builds a model or raises `TypeError`/`ValueError` naming the
argument; for every call, a hostile batch of token ids either gives finite
outputs of the documented shape or raises naming the input. Constructors
refuse before building a layer, so most examples cost microseconds; the
calls run on four tiny models built once.
"""

import math

import keras
import numpy as np
import pytest
from hostile_values import (
    BOOLEANS,
    FLOAT_SPECIALS,
    NOT_A_BOOL,
    NOT_A_NUMBER,
    NOT_A_POSITIVE_INT,
    NOT_A_RATE,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attn import models

VOCABULARY_SIZE = 11
TINY = dict(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8, dropout=0.0)
BUILDERS = {
    "Transformer": lambda **kw: models.Transformer(
        **{"vocabulary_size": VOCABULARY_SIZE, **TINY, "max_sequence_length": 8, **kw}
    ),
    "TransformerLM": lambda **kw: models.TransformerLM(
        **{"vocabulary_size": VOCABULARY_SIZE, **TINY, "max_sequence_length": 8, **kw}
    ),
    "TransformerEncoderClassifier": lambda **kw: models.TransformerEncoderClassifier(
        **{
            "vocabulary_size": VOCABULARY_SIZE,
            "num_classes": 3,
            **TINY,
            "max_sequence_length": 8,
            **kw,
        }
    ),
    "VisionTransformer": lambda **kw: models.VisionTransformer(
        **{
            "num_classes": 3,
            "image_size": 4,
            "patch_size": 2,
            "num_channels": 1,
            **TINY,
            **kw,
        }
    ),
}


# Constructor arguments by kind: a name means the same kind of value in
# every model of the zoo.
POSITIVE_INT_ARGUMENTS = (
    "vocabulary_size",
    "num_classes",
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "max_sequence_length",
    "patch_size",
    "num_channels",
)
RATE_ARGUMENTS = ("dropout",)
BOOL_ARGUMENTS = (
    "normalize_first",
    "tie_embeddings",
)
# The settings of every model's `attention` (a dict of `AttentionSettings`
# fields): hostile values of each kind, refused naming the setting (the
# attention weights' `dropout` as `attention_dropout`).
ATTENTION_SETTINGS = st.one_of(
    st.tuples(st.just("dropout"), NOT_A_RATE),
    st.tuples(st.just("flash_attention"), NOT_A_BOOL),
    st.tuples(st.just("qk_norm"), NOT_A_BOOL),
    st.tuples(
        st.just("num_key_value_heads"),
        NOT_A_POSITIVE_INT.filter(lambda x: x is not None),
    ),
)


def arguments_of(names):
    """(model, argument) pairs of every model with an argument in `names`."""
    return [
        (model, name)
        for model in BUILDERS
        for name in names
        if name in getattr(models, model).__init__.__code__.co_varnames
    ]


def check_constructor(model, name, value):
    """Either a model, or a TypeError/ValueError that names `name`."""
    try:
        BUILDERS[model](**{name: value})
    except Exception as error:  # noqa: BLE001 - the type is the assertion.
        assert_names_argument(error, name)


POSITIVE_INTS = arguments_of(POSITIVE_INT_ARGUMENTS)
RATES = arguments_of(RATE_ARGUMENTS)
BOOLS = arguments_of(BOOL_ARGUMENTS)
CHOICES = [
    (model, name)
    for model in BUILDERS
    for name in ("position", "pooling", "activation", "num_encoder_layers")
    if name in getattr(models, model).__init__.__code__.co_varnames
]
TOKEN_IDS = [(model, "pad_id") for model in BUILDERS if model != "VisionTransformer"]


def test_every_argument_kind_is_covered():
    assert len(POSITIVE_INTS) >= 20 and len(RATES) == 4 and len(BOOLS) >= 5
    assert all(
        "attention" in getattr(models, model).__init__.__code__.co_varnames
        for model in BUILDERS
    )
    assert len(TOKEN_IDS) == 3


@PROPERTY_SETTINGS
@given(st.sampled_from(POSITIVE_INTS), NOT_A_POSITIVE_INT)
def test_sizes_refuse_what_is_not_a_positive_int(argument, value):
    model, name = argument
    with pytest.raises((TypeError, ValueError)) as info:
        BUILDERS[model](**{name: value})
    assert_names_argument(info.value, name)


@PROPERTY_SETTINGS
@given(st.sampled_from(RATES), NOT_A_RATE)
def test_rates_refuse_what_is_not_in_0_1(argument, value):
    model, name = argument
    with pytest.raises((TypeError, ValueError)) as info:
        BUILDERS[model](**{name: value})
    assert_names_argument(info.value, name)


@PROPERTY_SETTINGS
@given(st.sampled_from(BOOLS), NOT_A_BOOL)
def test_flags_refuse_what_is_not_a_bool(argument, value):
    model, name = argument
    with pytest.raises(TypeError) as info:
        BUILDERS[model](**{name: value})
    assert_names_argument(info.value, name)


@PROPERTY_SETTINGS
@given(st.sampled_from(list(BUILDERS)), ATTENTION_SETTINGS)
def test_attention_settings_refuse_what_is_not_of_their_kind(model, setting):
    field, value = setting
    with pytest.raises((TypeError, ValueError)) as info:
        BUILDERS[model](attention={field: value})
    assert_names_argument(
        info.value, "attention_" + field if field == "dropout" else field
    )


@PROPERTY_SETTINGS
@given(
    st.sampled_from([*CHOICES, *TOKEN_IDS]),
    st.one_of(
        NOT_A_NUMBER.filter(lambda x: x is not None),
        BOOLEANS,
        FLOAT_SPECIALS,
        st.sampled_from([-1, 0.5, VOCABULARY_SIZE, "rotary", "max", -3]),
    ),
)
def test_choices_and_ids_refuse_or_build(argument, value):
    model, name = argument
    check_constructor(model, name, value)


@PROPERTY_SETTINGS
@given(
    st.sampled_from(list(BUILDERS)),
    st.one_of(NOT_A_NUMBER, BOOLEANS, FLOAT_SPECIALS, st.floats(max_value=0.0)),
)
def test_layer_norm_epsilon_refuses_what_is_not_positive(model, value):
    if value is None:
        return
    with pytest.raises((TypeError, ValueError)) as info:
        BUILDERS[model](layer_norm_epsilon=value)
    assert_names_argument(info.value, "layer_norm_epsilon")


# --- Calls ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def built():
    keras.utils.set_random_seed(0)
    return {name: builder() for name, builder in BUILDERS.items()}


TOKEN_BATCHES = st.tuples(
    st.integers(0, 2),  # batch
    st.integers(0, 3),  # length
    st.sampled_from(["int32", "int64", "float32", "bool"]),
    st.integers(-2, 1),  # ids from `low` ...
    st.integers(VOCABULARY_SIZE - 2, VOCABULARY_SIZE + 1),  # ... to `high`
)


def token_batch(batch, length, dtype, low, high):
    ids = np.linspace(low, high, num=batch * length).round().reshape(batch, length)
    return ids.astype(dtype)


def assert_finite_or_names(call, names, expected_shape):
    try:
        outputs = call()
    except (TypeError, ValueError) as error:
        assert any(f"`{name}`" in str(error) for name in names), str(error)
        return
    outputs = keras.ops.convert_to_numpy(keras.ops.cast(outputs, "float32"))
    assert outputs.shape == expected_shape
    assert np.isfinite(outputs).all()


@PROPERTY_SETTINGS
@given(
    TOKEN_BATCHES, st.sampled_from(["TransformerLM", "TransformerEncoderClassifier"])
)
def test_token_models_answer_any_batch_finitely_or_name_the_input(built, spec, model):
    tokens = token_batch(*spec)
    batch, length = tokens.shape
    shape = (batch, length, VOCABULARY_SIZE) if model == "TransformerLM" else (batch, 3)
    assert_finite_or_names(lambda: built[model](tokens), ["token_ids"], shape)


@PROPERTY_SETTINGS
@given(TOKEN_BATCHES, TOKEN_BATCHES)
def test_transformer_answers_any_pair_finitely_or_names_the_input(
    built, encoder_spec, decoder_spec
):
    inputs = {
        "encoder_tokens": token_batch(*encoder_spec),
        "decoder_tokens": token_batch(*decoder_spec),
    }
    shape = (decoder_spec[0], decoder_spec[1], VOCABULARY_SIZE)
    assert_finite_or_names(lambda: built["Transformer"](inputs), list(inputs), shape)


@PROPERTY_SETTINGS
@given(st.integers(0, 2), st.sampled_from([math.nan, math.inf, 1e30, 0.0]))
def test_vision_transformer_answers_any_batch_with_the_documented_shape(
    built, batch, value
):
    images = np.full((batch, 4, 4, 1), value, "float32")
    outputs = keras.ops.convert_to_numpy(built["VisionTransformer"](images))
    assert outputs.shape == (batch, 3)
    if math.isfinite(value) and abs(value) < 1e6:
        assert np.isfinite(outputs).all()
