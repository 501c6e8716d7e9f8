"""The shared argument checks (`keras_attn.validation`): the exception type
follows the value's type, the message names the argument and the value, and
accepted values come back in their canonical Python type."""

import math

import numpy as np
import pytest
from hostile_values import (
    NOT_A_BOOL,
    NOT_A_FINITE_NUMBER,
    NOT_A_POSITIVE_INT,
    NOT_A_RATE,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attn import validation


@pytest.mark.parametrize(
    "check, value, expected",
    [
        (validation.check_positive_int, 3, 3),
        (validation.check_positive_int, np.int64(3), 3),
        (validation.check_rate, 0, 0.0),
        (validation.check_rate, np.float32(0.5), 0.5),
        (validation.check_bool, np.bool_(True), True),
        (validation.check_seed, 2**32 - 1, 2**32 - 1),
        (validation.check_non_negative_int, 0, 0),
        (validation.check_positive_float, 1, 1.0),
    ],
)
def test_accepted_values_come_back_canonical(check, value, expected):
    result = check(value, "arg")
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "check, value, error",
    [
        (validation.check_positive_int, True, TypeError),
        (validation.check_positive_int, 2.0, TypeError),
        (validation.check_positive_int, "2", TypeError),
        (validation.check_positive_int, 0, ValueError),
        (validation.check_positive_int, -1, ValueError),
        (validation.check_rate, 1.0, ValueError),
        (validation.check_rate, math.nan, ValueError),
        (validation.check_rate, "0.1", TypeError),
        (validation.check_positive_float, math.inf, ValueError),
        (validation.check_positive_float, 0.0, ValueError),
        (validation.check_bool, "no", TypeError),
        (validation.check_bool, 1, TypeError),
        (validation.check_seed, -1, ValueError),
        (validation.check_seed, 2**32, ValueError),
        (validation.check_string, 3, TypeError),
    ],
)
def test_refused_values_name_argument_and_value(check, value, error):
    with pytest.raises(error) as info:
        check(value, "arg")
    assert f"Received: arg={value!r}" in str(info.value)


def test_ranges_and_none():
    assert validation.check_int(None, "n", allow_none=True) is None
    assert validation.check_float(0.0, "x", min_value=0.0) == 0.0
    with pytest.raises(ValueError, match=r"x` must be a finite number > 0.0"):
        validation.check_float(0.0, "x", min_value=0.0, include_min=False)
    with pytest.raises(ValueError, match=r"in \[0, 4\]"):
        validation.check_int(5, "n", min_value=0, max_value=4)
    with pytest.raises(ValueError, match=r"\[0, vocabulary_size=8\)"):
        validation.check_token_id(8, "pad_id", 8)
    with pytest.raises(TypeError, match="pad_id"):
        validation.check_token_id(1.5, "pad_id", 8)
    with pytest.raises(ValueError, match="must be one of"):
        validation.check_choice(["a"], "mode", {"a", "b"})


@PROPERTY_SETTINGS
@given(value=NOT_A_POSITIVE_INT)
def test_no_hostile_value_passes_as_a_positive_int(value):
    with pytest.raises((TypeError, ValueError)) as info:
        validation.check_positive_int(value, "num_heads")
    assert_names_argument(info.value, "num_heads")


@PROPERTY_SETTINGS
@given(value=NOT_A_RATE)
def test_no_hostile_value_passes_as_a_rate(value):
    with pytest.raises((TypeError, ValueError)) as info:
        validation.check_rate(value, "dropout")
    assert_names_argument(info.value, "dropout")


@PROPERTY_SETTINGS
@given(value=NOT_A_FINITE_NUMBER)
def test_no_hostile_value_passes_as_a_finite_number(value):
    with pytest.raises((TypeError, ValueError)) as info:
        validation.check_float(value, "temperature")
    assert_names_argument(info.value, "temperature")


@PROPERTY_SETTINGS
@given(value=NOT_A_BOOL)
def test_no_hostile_value_passes_as_a_bool(value):
    with pytest.raises(TypeError) as info:
        validation.check_bool(value, "normalize_first")
    assert_names_argument(info.value, "normalize_first")


@PROPERTY_SETTINGS
@given(value=st.integers(1, 2**40))
def test_every_positive_int_passes(value):
    assert validation.check_positive_int(value, "n") == value


@pytest.mark.parametrize(
    "value, error, match",
    [
        ("A dog.", TypeError, "not a single string"),
        (b"A dog.", TypeError, "not a single string"),
        (3, TypeError, "texts=3"),
        (["a", 3], TypeError, r"texts\[1\]=3"),
        ([], ValueError, "must not be empty"),
    ],
)
def test_check_string_list_refuses_by_name(value, error, match):
    with pytest.raises(error, match=match):
        validation.check_string_list(value, "texts", allow_empty=False)


def test_check_string_list_returns_a_list():
    assert validation.check_string_list(("a", np.str_("b")), "texts") == ["a", "b"]
    assert validation.check_string_list([], "texts") == []


def test_check_string_pairs_names_both_arguments():
    pairs = validation.check_string_pairs(("a",), ["b"], "sources", "targets")
    assert pairs == (["a"], ["b"])
    with pytest.raises(ValueError, match=r"len\(sources\)=2, len\(targets\)=1"):
        validation.check_string_pairs(["a", "b"], ["c"], "sources", "targets")
    with pytest.raises(ValueError, match="`sources` and `targets` must not be empty"):
        validation.check_string_pairs([], [], "sources", "targets")
    with pytest.raises(TypeError, match="targets"):
        validation.check_string_pairs(["a"], "b", "sources", "targets")


@pytest.mark.parametrize(
    "value, error",
    [
        (8, TypeError),
        ("8,16", TypeError),
        ([8, 2.5], TypeError),
        ((8, True), TypeError),
        ([8, None], TypeError),
        ([], ValueError),
        ((8, 0), ValueError),
        ([-1], ValueError),
    ],
)
def test_positive_int_sequence_refuses(value, error):
    with pytest.raises(
        error, match=r"`sizes` must be a non-empty sequence .*Received: sizes="
    ):
        validation.check_positive_int_sequence(value, "sizes")


def test_positive_int_sequence_comes_back_as_a_tuple_of_ints():
    result = validation.check_positive_int_sequence(np.array([16, 8]), "sizes")
    assert result == (16, 8) and all(type(size) is int for size in result)
