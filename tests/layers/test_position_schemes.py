"""`keras_attn.layers.positions.position_schemes`: the registry, the first two schemes
and rotary's answers.

What a model asks of its position scheme is answered the same way for the
paper's sinusoids and for learned positions, and their layers give what
`TokenAndPositionEmbedding` added before the schemes existed (NumPy
references of section 3.5). A scheme registered from outside plugs into
`TokenAndPositionEmbedding` without touching it. The rotary scheme's
models: tests/models/test_modern_models.py.
"""

import dataclasses
import math
import typing

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
    position_schemes,
)
from keras_attn.layers.positions.position_schemes import (
    AlibiPositions,
    LearnedPositions,
    PositionScheme,
    RelativePositions,
    RotaryPositions,
    SinusoidalPositions,
)


def sinusoids(length, dim, start=0):
    """The paper's PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos."""
    pos = np.arange(start, start + length)[:, None]
    i = np.arange(dim // 2)[None, :]
    angle = pos / 10000.0 ** (2 * i / dim)
    encoding = np.zeros((length, dim))
    encoding[:, 0::2], encoding[:, 1::2] = np.sin(angle), np.cos(angle)
    return encoding


# --- The registry ------------------------------------------------------------


def test_the_config_strings_of_today_name_the_two_schemes():
    assert set(position_schemes.names()) >= {"sinusoidal", "learned"}
    assert position_schemes.get("sinusoidal") == SinusoidalPositions()
    learned = position_schemes.get("learned", sequence_length=7, num_heads=2)
    assert learned == LearnedPositions(7)


def test_a_scheme_object_is_returned_as_it_is():
    scheme = LearnedPositions(5)
    assert position_schemes.get(scheme) is scheme


@pytest.mark.parametrize(
    "scheme",
    [
        SinusoidalPositions(max_wavelength=500.0),
        LearnedPositions(8, initializer="zeros"),
        AlibiPositions(2, alibi_bias_max=4.0),
        RelativePositions(2, num_buckets=8, max_distance=20),
        RotaryPositions(4, scaling_factor=2.0),
    ],
    ids=lambda scheme: scheme.name,
)
def test_a_schemes_config_builds_it_again(scheme):
    # The model's sizes are fields of the config: `get` needs no others.
    config = scheme.get_config()
    assert config["name"] == scheme.name
    assert position_schemes.get(config) == scheme
    # Set in the config, they win over the sizes `get` is given.
    assert position_schemes.get(config, sequence_length=99, num_heads=99) == scheme


def test_the_model_sizes_fill_only_the_schemes_fields():
    # A model gives both sizes; each scheme takes those it has.
    assert position_schemes.get("sinusoidal", 7, 2) == SinusoidalPositions()
    assert position_schemes.get("alibi", 7, 2) == AlibiPositions(2)
    fields = {"name": "rotary", "max_wavelength": 500.0}
    assert position_schemes.get(fields, 7, 2) == RotaryPositions(2, 500.0)
    with pytest.raises(ValueError, match=r"takes the fields .*Received: position="):
        position_schemes.get({"name": "learned", "num_heads": 2}, 7, 2)
    # A model's `position` argument may not set the sizes the model sets.
    with pytest.raises(ValueError, match="takes the fields"):
        position_schemes.check_position({"name": "alibi", "num_heads": 2})


@pytest.mark.parametrize("identifier", ["rope", "", None, ["learned"]])
def test_an_unknown_name_lists_the_known_ones(identifier):
    known = r"\['alibi', 'learned', 'relative', 'rotary', 'sinusoidal'\]"
    with pytest.raises(ValueError, match=r"must be one of " + known):
        position_schemes.get(identifier, sequence_length=4)


def test_learned_positions_need_a_positive_length():
    with pytest.raises(TypeError, match="sequence_length=None"):
        position_schemes.get("learned")
    with pytest.raises(ValueError, match="sequence_length=0"):
        LearnedPositions(0)


# --- What a model asks ----------------------------------------------------------


@pytest.mark.parametrize(
    "scheme, max_length",
    [(SinusoidalPositions(), None), (LearnedPositions(12), 12)],
    ids=["sinusoidal", "learned"],
)
def test_what_a_model_asks_of_the_paper_schemes(scheme, max_length):
    assert scheme.adds_to_embeddings is True
    assert scheme.block_arguments() == {}  # no rotation
    assert scheme.max_length == max_length
    # No score bias, at a cache index either: the blocks get nothing.
    assert not scheme.biases_attention_scores
    assert scheme.attention_bias(4, 4) is None
    assert scheme.attention_bias(1, 12, query_offset=5) is None
    assert scheme.attention_bias_layer(bidirectional=True) is None


def test_the_interface_alone_encodes_nothing():
    scheme = PositionScheme()
    assert not scheme.adds_to_embeddings and scheme.position_layer() is None
    assert scheme.max_length is None and scheme.attention_bias(3, 3) is None
    assert scheme.check_embedding_dim(7, "hidden_dim") == 7
    assert scheme.block_arguments() == {}


@pytest.mark.parametrize(
    "scheme",
    [
        SinusoidalPositions(),
        LearnedPositions(8),
        AlibiPositions(2),
        RelativePositions(2),
    ],
    ids=["sinusoidal", "learned", "alibi", "relative"],
)
def test_only_rotary_gives_the_blocks_arguments(scheme):
    # The models build their blocks with these: `{}` keeps today's blocks.
    assert scheme.block_arguments() == {}


# --- Rotary ----------------------------------------------------------------------


def test_rotary_is_registered_and_sized_by_the_models_heads():
    scheme = position_schemes.get("rotary", sequence_length=16, num_heads=4)
    assert scheme == RotaryPositions(num_heads=4)
    assert scheme.block_arguments()  # the rotation
    # Nothing learned per position: no length limit, no layer, no bias.
    assert scheme.max_length is None and not scheme.adds_to_embeddings
    assert scheme.position_layer() is None
    assert not scheme.biases_attention_scores
    assert scheme.attention_bias(3, 3) is None
    assert scheme.attention_bias_layer(bidirectional=False) is None


def test_rotary_block_arguments_are_the_blocks_rotation():
    assert RotaryPositions(4).block_arguments() == {"rotary_max_wavelength": 10000.0}
    scaled = RotaryPositions(4, max_wavelength=500, scaling_factor=2)
    assert scaled.block_arguments() == {
        "rotary_max_wavelength": 500.0,
        "rotary_scaling_factor": 2.0,
    }


def test_rotary_needs_an_even_head_size_named_by_the_caller():
    assert RotaryPositions(4).check_embedding_dim(64, "hidden_dim") == 64
    # 12 / 4 = 3 features a head: they cannot rotate in pairs.
    with pytest.raises(
        ValueError, match=r"`hidden_dim` / `num_heads`.*hidden_dim=12, num_heads=4"
    ):
        RotaryPositions(4).check_embedding_dim(12, "hidden_dim")
    with pytest.raises(ValueError, match="hidden_dim=10, num_heads=4"):
        RotaryPositions(4).check_embedding_dim(10, "hidden_dim")
    # An odd model dimension is fine when each head's share is even.
    assert RotaryPositions(3).check_embedding_dim(6, "hidden_dim") == 6
    # The check needs the heads: the scheme is not made without them.
    with pytest.raises(TypeError, match="num_heads=None"):
        position_schemes.get("rotary", sequence_length=16)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(num_heads=0), "num_heads=0"),
        (dict(max_wavelength=0.0), "max_wavelength=0.0"),
        (dict(scaling_factor=-1.0), "scaling_factor=-1.0"),
    ],
)
def test_rotary_refuses_bad_sizes_by_name(arguments, message):
    with pytest.raises(ValueError, match=message):
        RotaryPositions(**{"num_heads": 4, **arguments})


def test_the_embedding_adds_nothing_with_rotary_positions():
    scheme = RotaryPositions(num_heads=2)
    layer = TokenAndPositionEmbedding(11, 6, 8, position=scheme)
    assert layer.position_scheme is scheme and layer.position_encoding is None
    ids = np.array([[3, 1, 4]], "int32")
    outputs = ops.convert_to_numpy(layer(ids))
    tokens = ops.convert_to_numpy(layer.token_embedding.embeddings)[ids[0]]
    np.testing.assert_allclose(outputs[0], tokens * math.sqrt(8), rtol=1e-6)
    # Its config names the scheme with its heads, and builds it again.
    config = layer.get_config()
    assert config["position"] == {
        "name": "rotary",
        "num_heads": 2,
        "max_wavelength": 10000.0,
        "scaling_factor": 1.0,
    }
    restored = TokenAndPositionEmbedding.from_config(config)
    assert restored.position_scheme == scheme
    # A name alone does not say the heads: the layer refuses it by name.
    with pytest.raises(TypeError, match=r"position='rotary', num_heads=None") as error:
        TokenAndPositionEmbedding(11, 6, 8, position="rotary")
    assert "{'name': 'rotary', 'num_heads': 8}" in str(error.value)
    # Rotary's check of the head size, where the scheme enters the layer.
    with pytest.raises(ValueError, match="embedding_dim=6, num_heads=2"):
        TokenAndPositionEmbedding(11, 6, 6, position=scheme)


def test_sinusoids_need_an_even_dimension_named_by_the_caller():
    with pytest.raises(ValueError, match=r"`hidden_dim` must be even .*hidden_dim=9"):
        SinusoidalPositions().check_embedding_dim(9, "hidden_dim")
    assert SinusoidalPositions().check_embedding_dim(8, "hidden_dim") == 8
    assert LearnedPositions(4).check_embedding_dim(9, "hidden_dim") == 9


@pytest.mark.parametrize("start", [0, 3])
def test_sinusoidal_layer_is_the_papers_encoding(start):
    layer = SinusoidalPositions().position_layer(dtype="float32")
    assert isinstance(layer, SinusoidalPositionEncoding)
    assert layer.name == "position_encoding"  # the saved name
    outputs = layer(np.zeros((2, 5, 8), "float32"), start_index=start)
    np.testing.assert_allclose(
        ops.convert_to_numpy(outputs)[1], sinusoids(5, 8, start), atol=1e-5
    )


def test_learned_layer_holds_one_vector_per_position():
    initializer = keras.initializers.RandomNormal(stddev=0.02, seed=1)
    layer = LearnedPositions(6, initializer=initializer).position_layer()
    assert isinstance(layer, PositionEmbedding)
    assert layer.name == "position_embedding"  # the saved name
    assert layer.sequence_length == 6 and layer.initializer is initializer
    outputs = ops.convert_to_numpy(layer(np.zeros((2, 4, 3)), start_index=2))
    table = ops.convert_to_numpy(layer.position_embeddings)
    np.testing.assert_array_equal(outputs[0], table[2:6])


# --- Through `TokenAndPositionEmbedding` ---------------------------------------


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_the_embedding_asks_the_scheme_its_config_names(position):
    # The outputs against the paper's equations:
    # tests/layers/test_token_and_position_embedding.py.
    layer = TokenAndPositionEmbedding(11, 6, 8, position=position)
    assert layer.position_scheme == position_schemes.get(position, sequence_length=6)
    assert layer.get_config()["position"] == position


@dataclasses.dataclass(frozen=True)
class NoPositions(PositionScheme):
    """A scheme that leaves the embeddings alone (as ALiBi or rotary do)."""

    name: typing.ClassVar[str] = "test_no_positions"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(position_schemes._SCHEMES, NoPositions.name, NoPositions)


def test_a_new_scheme_is_one_registered_class(registered):
    layer = TokenAndPositionEmbedding(11, 6, 8, position="test_no_positions")
    assert layer.position_encoding is None
    ids = np.array([[3, 1, 4]], "int32")
    outputs = ops.convert_to_numpy(layer(ids))
    tokens = ops.convert_to_numpy(layer.token_embedding.embeddings)[ids[0]]
    np.testing.assert_allclose(outputs[0], tokens * math.sqrt(8), rtol=1e-6)
    restored = TokenAndPositionEmbedding.from_config(layer.get_config())
    assert restored.position_scheme == NoPositions()


@dataclasses.dataclass(frozen=True)
class DistanceBias(PositionScheme):
    """`key_position - query_position` on every score (ALiBi with slope 1)."""

    name: typing.ClassVar[str] = "test_distance_bias"
    biases_attention_scores: typing.ClassVar[bool] = True

    def attention_bias(
        self, query_length, key_length, query_offset=0, bidirectional=False
    ):
        queries = ops.arange(query_length) + query_offset
        distance = ops.arange(key_length)[None, :] - queries[:, None]
        if bidirectional:
            distance = -ops.abs(distance)
        # (1, 1, query, key)
        return ops.cast(distance, "float32")[None, None]


@pytest.mark.parametrize("bidirectional", [False, True])
def test_the_bias_layer_gives_the_schemes_bias_for_its_inputs(bidirectional):
    layer = DistanceBias().attention_bias_layer(bidirectional, name="position_bias")
    assert isinstance(layer, position_schemes.PositionBias)
    assert layer.name == "position_bias" and not layer.weights
    queries, cache = np.zeros((2, 2, 8), "float32"), np.zeros((2, 5, 2, 4), "float32")
    bias = ops.convert_to_numpy(layer(queries, cache, query_offset=3))
    expected = np.arange(5)[None, :] - np.array([3, 4])[:, None]  # (query, key)
    if bidirectional:
        expected = -np.abs(expected)
    np.testing.assert_array_equal(bias, expected[None, None])
    # Self-attention: the keys are the queries; symbolic lengths too.
    assert tuple(layer(queries).shape) == (1, 1, 2, 2)
    symbolic = layer(keras.Input((None, 8)))
    assert tuple(symbolic.shape)[:2] == (1, 1)
