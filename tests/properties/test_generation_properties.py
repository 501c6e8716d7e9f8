"""Hostile arguments to the decoding entry points and the samplers: each
call works (results of the documented shape) or raises TypeError/ValueError
naming the argument the user passed; never another exception, never NaN."""

import math

import numpy as np
import pytest
from hostile_values import (
    BOOLEANS,
    NOT_A_BOOL,
    NOT_A_FINITE_NUMBER,
    NOT_A_NUMBER,
    NOT_A_POSITIVE_INT,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given
from hypothesis import strategies as st

import keras_attn
from keras_attn.generation import (
    BeamSampler,
    RandomSampler,
    SequenceGenerator,
    TopKSampler,
    TopPSampler,
    beam_search,
    generate_lm,
    generate_seq2seq,
    greedy_search,
    sample,
)

VOCABULARY_SIZE = 12
NOT_A_SEED = st.one_of(
    NOT_A_NUMBER.filter(lambda x: x is not None),
    BOOLEANS,
    st.integers(max_value=-1),
    st.integers(min_value=2**32),
    st.just(1.0),
)
NOT_A_TOKEN_ID = st.one_of(
    NOT_A_NUMBER,
    BOOLEANS,
    st.integers(max_value=-1),
    st.integers(min_value=VOCABULARY_SIZE),
    st.just(3.0),
)
# Not a probability in (0, 1].
NOT_A_NUCLEUS = st.one_of(
    NOT_A_FINITE_NUMBER.filter(lambda x: x is not None),
    st.floats(min_value=1.0, exclude_min=True, allow_infinity=False),
    st.floats(max_value=0.0, allow_infinity=False),
)
NOT_POSITIVE = st.one_of(
    NOT_A_FINITE_NUMBER.filter(lambda x: x is not None),
    st.floats(max_value=0.0, allow_infinity=False),
)
NOT_NON_NEGATIVE = st.one_of(
    NOT_A_FINITE_NUMBER.filter(lambda x: x is not None),
    st.floats(max_value=-1e-9, allow_infinity=False),
)


@pytest.fixture(scope="module")
def seq2seq():
    return keras_attn.models.Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE
    )


@pytest.fixture(scope="module")
def lm():
    return keras_attn.models.TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY_SIZE
    )


SAMPLER_ARGUMENTS = [
    (BeamSampler, "num_beams", NOT_A_POSITIVE_INT),
    (BeamSampler, "length_penalty_alpha", NOT_NON_NEGATIVE),
    (BeamSampler, "return_all_beams", NOT_A_BOOL),
    (RandomSampler, "temperature", NOT_POSITIVE),
    (RandomSampler, "seed", NOT_A_SEED),
    (TopKSampler, "k", NOT_A_POSITIVE_INT),
    (TopPSampler, "p", NOT_A_NUCLEUS),
    (TopPSampler, "k", NOT_A_POSITIVE_INT.filter(lambda x: x is not None)),
]


@PROPERTY_SETTINGS
@given(data=st.data(), case=st.sampled_from(SAMPLER_ARGUMENTS))
def test_sampler_arguments_are_refused_by_name(data, case):
    sampler_class, name, values = case
    value = data.draw(values)
    with pytest.raises((TypeError, ValueError)) as info:
        sampler_class(**{name: value})
    assert_names_argument(info.value, name)


# Options of the seq2seq shorthands, each refused before any decoding.
OPTION_ARGUMENTS = [
    (greedy_search, "start_id", NOT_A_TOKEN_ID),
    (greedy_search, "end_id", NOT_A_TOKEN_ID),
    (greedy_search, "max_length", NOT_A_POSITIVE_INT.filter(lambda x: x is not None)),
    (greedy_search, "use_cache", NOT_A_BOOL),
    (beam_search, "beam_size", NOT_A_POSITIVE_INT),
    (beam_search, "length_penalty_alpha", NOT_NON_NEGATIVE),
    (sample, "temperature", NOT_POSITIVE),
    (sample, "top_p", NOT_A_NUCLEUS),
    (sample, "top_k", NOT_A_POSITIVE_INT.filter(lambda x: x is not None)),
    (sample, "seed", NOT_A_SEED),
]


@PROPERTY_SETTINGS
@given(data=st.data(), case=st.sampled_from(OPTION_ARGUMENTS))
def test_decoding_options_are_refused_by_name(seq2seq, data, case):
    search, name, values = case
    arguments = dict(
        encoder_tokens=np.ones((1, 3), "int32"), start_id=2, end_id=3, max_length=3
    )
    arguments[name] = data.draw(values)
    with pytest.raises((TypeError, ValueError)) as info:
        search(seq2seq, **arguments)
    assert_names_argument(info.value, name)


@PROPERTY_SETTINGS
@given(data=st.data(), name=st.sampled_from(["max_length", "end_id", "use_cache"]))
def test_lm_options_are_refused_by_name(lm, data, name):
    values = {
        "max_length": NOT_A_POSITIVE_INT.filter(lambda x: x is not None),
        # A non-empty list may be valid: several end ids (checked one by
        # one in tests/generation/test_logits_processors.py).
        "end_id": NOT_A_TOKEN_ID.filter(
            lambda x: x is not None and not (isinstance(x, list) and x)
        ),
        "use_cache": NOT_A_BOOL,
    }[name]
    arguments = dict(prompt_tokens=np.full((1, 2), 4, "int32"), max_length=4)
    arguments[name] = data.draw(values)
    with pytest.raises((TypeError, ValueError)) as info:
        generate_lm(lm, **arguments)
    assert_names_argument(info.value, name)


def _hostile_token_batches():
    """Token batches of every wrong kind, and the empty batch (valid)."""
    return st.one_of(
        st.sampled_from(
            [
                np.full((2, 3), 4.0),  # float ids, even whole ones
                np.full((2, 3), 4.5, "float32"),
                np.ones((2, 3), bool),
                np.ones((3,), "int32"),
                np.ones((1, 2, 3), "int32"),
                np.full((2, 3), VOCABULARY_SIZE, "int32"),
                np.full((2, 3), -1, "int64"),
                np.ones((2, 0), "int32"),
                [[4, 5, 6], [4, 5]],  # ragged
                [["a", "b"]],
                np.zeros((0, 3), "int32"),  # empty batch: empty results
                np.zeros((0, 3), "uint8"),
            ]
        ),
        st.integers(min_value=VOCABULARY_SIZE, max_value=2**31 - 1).map(
            lambda i: [[4, i]]
        ),
    )


ENTRY_POINTS = ["greedy", "beam", "sample", "generate_seq2seq", "generator", "lm"]


def _decode(entry_point, seq2seq, lm, tokens):
    if entry_point == "lm":
        return generate_lm(lm, tokens, max_length=5), "prompt_tokens"
    if entry_point == "generator":
        generator = SequenceGenerator(seq2seq, sampler="greedy", max_length=4)
        return generator.generate(tokens), "encoder_tokens"
    search = {
        "greedy": greedy_search,
        "beam": beam_search,
        "sample": sample,
        "generate_seq2seq": generate_seq2seq,
    }[entry_point]
    return search(seq2seq, tokens, 2, 3, max_length=4), "encoder_tokens"


@PROPERTY_SETTINGS
@given(tokens=_hostile_token_batches(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_hostile_token_batches_are_refused_or_give_empty_results(
    seq2seq, lm, tokens, entry_point
):
    name = "prompt_tokens" if entry_point == "lm" else "encoder_tokens"
    try:
        result, name = _decode(entry_point, seq2seq, lm, tokens)
    except Exception as error:  # noqa: BLE001 - the property is the type.
        assert_names_argument(error, name)
        return
    # Only an empty batch decodes: empty results of the documented shapes.
    assert np.asarray(tokens).shape[0] == 0
    max_length = 5 if entry_point == "lm" else 4
    assert np.asarray(result["tokens"]).shape == (0, max_length)
    assert np.asarray(result["scores"]).shape == (0,)
    assert str(np.asarray(result["tokens"]).dtype) == "int32"
    if entry_point == "beam":
        assert np.asarray(result["beam_tokens"]).shape == (0, 4, max_length)
    assert all(math.isfinite(x) for x in np.asarray(result["scores"]).ravel())
