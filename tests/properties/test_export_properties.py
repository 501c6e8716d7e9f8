"""Hostile arguments for the export, distribution and saving entry points.

Each call either works or raises `TypeError`/`ValueError` whose message
names the argument; never another exception type. Nothing heavy runs: the
export's arguments are all checked before a SavedModel is traced, so the
tokenizer here is a stand-in with the attributes those checks read.
"""

import functools
import types

import pytest
from hostile_values import (
    NOT_A_BOOL,
    NOT_A_FINITE_NUMBER,
    NOT_A_NUMBER,
    NOT_A_POSITIVE_INT,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attn import distribution, saving
from keras_attn.export import export_translator
from keras_attn.models import Transformer

VOCABULARY_SIZE = 16


def _valid_buckets(value):
    return (
        value is None
        or isinstance(value, (list, tuple))
        and value
        and all(type(size) is int and size > 0 for size in value)
    )


# A hostile bucket list: not a sequence, or a sequence of non-positive-ints.
NOT_BUCKETS = st.one_of(
    NOT_A_POSITIVE_INT,
    st.lists(NOT_A_POSITIVE_INT, min_size=1, max_size=3),
    st.lists(NOT_A_POSITIVE_INT, min_size=1, max_size=3).map(tuple),
).filter(lambda value: not _valid_buckets(value))
# Not a path, nor `None` where a default stands for it.
NOT_A_PATH = NOT_A_NUMBER.filter(lambda value: not isinstance(value, str))


@functools.cache
def tiny_model():
    return Transformer.from_preset("transformer_tiny", vocabulary_size=VOCABULARY_SIZE)


def tokenizer_stand_in():
    return types.SimpleNamespace(
        vocabulary_size=VOCABULARY_SIZE, start_id=1, end_id=2, pad_id=0
    )


def assert_export_refuses(tmp_path_factory, name, value):
    directory = tmp_path_factory.mktemp("export") / "x"
    kwargs = {"directory": directory, "max_source_length": 16, name: value}
    with pytest.raises(Exception) as info:
        export_translator(tiny_model(), tokenizer_stand_in(), **kwargs)
    assert_names_argument(info.value, name)
    assert not directory.exists()


@PROPERTY_SETTINGS
@given(
    name=st.sampled_from(["beam_size", "max_source_length"]), value=NOT_A_POSITIVE_INT
)
def test_export_positive_ints(tmp_path_factory, name, value):
    if name == "max_source_length" and value is None:
        return  # the default: the model's max_sequence_length
    assert_export_refuses(tmp_path_factory, name, value)


@PROPERTY_SETTINGS
@given(value=NOT_A_FINITE_NUMBER)
def test_export_length_penalty(tmp_path_factory, value):
    assert_export_refuses(tmp_path_factory, "length_penalty_alpha", value)


@PROPERTY_SETTINGS
@given(
    name=st.sampled_from(["source_length_buckets", "batch_size_buckets"]),
    value=NOT_BUCKETS,
)
def test_export_buckets(tmp_path_factory, name, value):
    assert_export_refuses(tmp_path_factory, name, value)


@PROPERTY_SETTINGS
@given(
    name=st.sampled_from(
        ["strategy", "verbose", "directory", "jax_platforms", "overwrite"]
    ),
    value=st.one_of(NOT_A_BOOL, NOT_A_PATH),
)
def test_export_other_arguments(tmp_path_factory, name, value):
    if name == "strategy" and value in ("beam", "greedy"):
        return
    if name == "jax_platforms" and value is None:
        return  # the default
    if name == "directory":
        value = value if not isinstance(value, str) else 0
    assert_export_refuses(tmp_path_factory, name, value)


@PROPERTY_SETTINGS
@given(
    name=st.sampled_from(["kind", "mesh_shape", "devices", "layout_map"]),
    value=st.one_of(
        NOT_A_POSITIVE_INT.filter(lambda value: value is not None),
        st.lists(NOT_A_POSITIVE_INT, min_size=1, max_size=3).map(tuple),
    ),
)
def test_configure(name, value):
    kwargs = {"kind": "data", name: value}
    try:
        result = distribution.configure(**kwargs)
    except Exception as error:  # noqa: BLE001 (the type is what is tested)
        if "torch" in str(error):
            return  # no distribution on torch: refused whatever the arguments
        assert_names_argument(error, name)
    else:
        # e.g. mesh_shape="1" on the test's one device.
        assert isinstance(result, distribution.TrainingDistribution)


@PROPERTY_SETTINGS
@given(
    value=st.one_of(
        NOT_A_POSITIVE_INT, st.lists(NOT_A_POSITIVE_INT, min_size=1, max_size=3)
    )
)
def test_check_batch_size(value):
    data_parallel = distribution.TrainingDistribution("data", "jax", (2,))
    with pytest.raises(Exception) as info:
        data_parallel.check_batch_size(value)
    assert_names_argument(info.value, "batch_size")


@PROPERTY_SETTINGS
@given(text=st.one_of(NOT_A_POSITIVE_INT, st.text(max_size=5)))
def test_parse_mesh_shape(text):
    try:
        shape = distribution.parse_mesh_shape(text)
    except Exception as error:  # noqa: BLE001 (the type is what is tested)
        assert_names_argument(error, "mesh")
    else:
        assert shape is None or (
            1 <= len(shape) <= 2 and all(type(n) is int and n > 0 for n in shape)
        )


@PROPERTY_SETTINGS
@given(
    name=st.sampled_from(["filepath", "compile", "safe_mode"]),
    value=st.one_of(NOT_A_PATH, NOT_A_BOOL),
)
def test_load_model(tmp_path_factory, name, value):
    kwargs = {"filepath": tmp_path_factory.getbasetemp() / "absent.keras"}
    if name == "filepath" and isinstance(value, str):
        value = 0
    kwargs[name] = value
    with pytest.raises(Exception) as info:
        saving.load_model(**kwargs)
    assert_names_argument(info.value, name)
