"""Hostile arguments to the training API (schedule, optimizer, loss, metric,
backup, checkpoint averaging): refused with TypeError/ValueError naming the
argument, never another exception; accepted values give finite results."""

import math

import keras
import numpy as np
import pytest
from hostile_values import (
    NOT_A_BOOL,
    NOT_A_FINITE_NUMBER,
    NOT_A_NUMBER,
    NOT_A_POSITIVE_INT,
    NOT_A_RATE,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given
from hypothesis import strategies as st

from keras_attn.training import (
    AtomicBackupAndRestore,
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
    average_checkpoints,
    paper_adam,
)

NOT_AN_INT_OR_NONE = st.one_of(
    NOT_A_NUMBER.filter(lambda x: x is not None),
    st.sampled_from([True, 1.5, 2.0, math.nan]),
)
NOT_POSITIVE = st.one_of(
    NOT_A_FINITE_NUMBER, st.floats(max_value=0.0, allow_infinity=False)
)

CONSTRUCTORS = [
    (lambda v: TransformerSchedule(d_model=v), "d_model", NOT_A_POSITIVE_INT),
    (
        lambda v: TransformerSchedule(d_model=8, warmup_steps=v),
        "warmup_steps",
        NOT_A_POSITIVE_INT,
    ),
    (lambda v: TransformerSchedule(d_model=8, scale=v), "scale", NOT_POSITIVE),
    (lambda v: paper_adam(d_model=v), "d_model", NOT_A_POSITIVE_INT),
    (
        lambda v: MaskedSparseCategoricalCrossentropy(label_smoothing=v),
        "label_smoothing",
        NOT_A_RATE,
    ),
    (
        lambda v: MaskedSparseCategoricalCrossentropy(ignore_class=v),
        "ignore_class",
        NOT_AN_INT_OR_NONE,
    ),
    (
        lambda v: MaskedSparseCategoricalCrossentropy(from_logits=v),
        "from_logits",
        NOT_A_BOOL,
    ),
    (lambda v: MaskedAccuracy(ignore_class=v), "ignore_class", NOT_AN_INT_OR_NONE),
    (
        lambda v: AtomicBackupAndRestore("backup", delete_checkpoint=v),
        "delete_checkpoint",
        NOT_A_BOOL,
    ),
]


@PROPERTY_SETTINGS
@given(data=st.data(), case=st.sampled_from(CONSTRUCTORS))
def test_training_arguments_are_refused_by_name(data, case):
    make, name, values = case
    with pytest.raises((TypeError, ValueError)) as info:
        make(data.draw(values))
    assert_names_argument(info.value, name)


@PROPERTY_SETTINGS
@given(
    paths=st.one_of(
        st.sampled_from(["model.keras", b"model.keras", 3, None, [], [None], [3]]),
        st.lists(st.integers(), min_size=1, max_size=2),
    )
)
def test_checkpoint_paths_are_refused_by_name(paths):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises((TypeError, ValueError)) as info:
        average_checkpoints(model, paths)
    assert_names_argument(info.value, "checkpoint_paths")


@PROPERTY_SETTINGS
@given(
    label_smoothing=st.floats(0.0, 0.99),
    padded=st.lists(st.booleans(), min_size=3, max_size=3),
    garbage=st.sampled_from([math.nan, math.inf, -math.inf, 1e30]),
)
def test_loss_is_finite_whatever_padded_logits_hold(label_smoothing, padded, garbage):
    labels = np.where(padded, 0, 5).reshape(1, 3)
    logits = np.random.default_rng(0).normal(size=(1, 3, 7)).astype("float32")
    logits[0, np.asarray(padded)] = garbage
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing)
    value = float(loss(labels, logits))
    assert math.isfinite(value)
    if all(padded):
        assert value == 0.0
