"""Round 3: device names and uneven batches at the distribution's boundary.

`configure` given device names that do not exist, or one device twice,
refuses them with a `ValueError` naming `devices` (it used to accept them,
then `fit` hung on TensorFlow, failed with "Unknown backend" on JAX, or the
mesh raised a bare `AssertionError`). A batch that the replicas do not
divide is refused on both engines with one message (JAX could not shard it,
TensorFlow split it unevenly or failed in `AddN`).
"""

import keras
import pytest
from hostile_values import PROPERTY_SETTINGS, assert_names_argument
from hypothesis import given
from hypothesis import strategies as st

from keras_attn import distribution
from keras_attn.distribution.even_batches import check_rows

BACKEND = keras.backend.backend()

DEVICE_NAMES = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        [
            "cpu:0",
            "CPU:0",
            "/cpu:0",
            "cpu",
            "cpu:1",
            "cpu:-1",
            "cpu:0:1",
            "gpu:0",
            "tpu:3",
            ":0",
            "/job:worker/task:1/device:CPU:0",
        ]
    ),
)


@PROPERTY_SETTINGS
@given(devices=st.lists(DEVICE_NAMES, min_size=1, max_size=3))
def test_configure_takes_only_devices_that_exist_once(devices):
    try:
        result = distribution.configure("data", devices=devices)
    except Exception as error:  # noqa: BLE001 (the type is what is tested)
        if BACKEND == "torch":
            assert "not available on the torch backend" in str(error)
            return
        assert_names_argument(error, "devices")
    else:
        # The test process has one CPU device: only it, named once, works.
        assert len(devices) == 1 and result.num_replicas == 1


@pytest.mark.skipif(BACKEND == "torch", reason="no keras.distribution on torch")
@pytest.mark.parametrize("devices", [["cpu:0", "cpu:0"], ["cpu:0", "gpu:0"]])
def test_configure_refusals_are_value_errors(devices):
    with pytest.raises(ValueError, match=r"Received: devices=\["):
        distribution.configure("data", devices=devices)


@PROPERTY_SETTINGS
@given(rows=st.integers(0, 100), replicas=st.integers(1, 16))
def test_a_batch_is_refused_exactly_when_the_replicas_do_not_divide_it(rows, replicas):
    if rows % replicas:
        with pytest.raises(ValueError, match=f"A batch of {rows} rows"):
            check_rows(rows, replicas)
    else:
        check_rows(rows, replicas)


@PROPERTY_SETTINGS
@given(
    batch_size=st.integers(1, 64),
    num_examples=st.integers(1, 500),
    replicas=st.sampled_from([1, 2, 4, 8]),
)
def test_check_batch_size_with_num_examples_agrees_with_every_batch(
    batch_size, num_examples, replicas
):
    data_parallel = distribution.TrainingDistribution("data", BACKEND, (replicas,))
    sizes = [batch_size] * (num_examples // batch_size)
    sizes += [num_examples % batch_size] if num_examples % batch_size else []
    if all(size % replicas == 0 for size in sizes):
        data_parallel.check_batch_size(batch_size, num_examples=num_examples)
    else:
        with pytest.raises(ValueError):
            data_parallel.check_batch_size(batch_size, num_examples=num_examples)
