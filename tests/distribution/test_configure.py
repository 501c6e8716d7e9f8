"""`keras_attn.distribution.configure` arguments, in the test process (1 device).

Multi-device behaviour is in test_jax_distribution.py and
test_tf_distribution.py, which start processes with several devices.
"""

import keras
import pytest

import keras_attn
from keras_attn.distribution import TrainingDistribution, configure, parse_mesh_shape

BACKEND = keras.backend.backend()


@pytest.mark.parametrize(
    "text, shape",
    [("2,4", (2, 4)), ("8", (8,)), (" 1, 2 ", (1, 2)), (None, None), ("", None)],
)
def test_parse_mesh_shape(text, shape):
    assert parse_mesh_shape(text) == shape


@pytest.mark.parametrize("text", ["2,x", "0,2", "1,2,3", "-1"])
def test_parse_mesh_shape_names_the_flag(text):
    with pytest.raises(ValueError, match="`mesh` must be one or two positive"):
        parse_mesh_shape(text)


def test_none_is_one_device_and_a_no_op_scope():
    distribution = configure("none")
    assert (distribution.kind, distribution.num_replicas) == ("none", 1)
    assert distribution.keras_distribution is None and distribution.tf_strategy is None
    with distribution.scope():
        assert keras.distribution.distribution() is None
    assert distribution.check_batch_size(7) == 7


@pytest.mark.skipif(BACKEND == "torch", reason="no keras.distribution on torch")
def test_data_on_the_one_test_device():
    distribution = configure("data")
    assert distribution.num_replicas == 1 and distribution.mesh_shape == (1,)
    assert distribution.num_processes == 1 and distribution.process_id == 0
    with distribution.scope():
        if BACKEND == "jax":
            assert isinstance(
                keras.distribution.distribution(), keras.distribution.DataParallel
            )
    assert keras.distribution.distribution() is None  # the scope restores


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(kind="pipeline"), ValueError, "`kind` must be one of"),
        (
            dict(kind="none", mesh_shape=(2,)),
            ValueError,
            "`mesh_shape` applies to kind='data'",
        ),
        (
            dict(kind="none", devices=["cpu:0"]),
            ValueError,
            "`devices` applies to kind='data'",
        ),
        (
            dict(kind="data", mesh_shape=(0,)),
            ValueError,
            "`mesh_shape` must be a tuple of positive",
        ),
        (dict(kind="data", mesh_shape=(3,)), ValueError, "`mesh_shape` must be"),
        # A wrong type is a TypeError, a wrong value a ValueError.
        (
            dict(kind="data", devices="cpu:0"),
            TypeError,
            "`devices` must be a non-empty list",
        ),
        (
            dict(kind="data", devices=[]),
            ValueError,
            "`devices` must be a non-empty list",
        ),
        (dict(kind="data", devices=[0]), TypeError, r"Received: devices=\[0\]"),
        (dict(kind="data", mesh_shape=(2.0,)), TypeError, r"mesh_shape=\(2.0,\)"),
        (dict(kind="data", mesh_shape=(True,)), TypeError, r"mesh_shape=\(True,\)"),
        (dict(kind="data", mesh_shape=(1, 1, 1)), ValueError, "mesh_shape=\\(1, 1, 1"),
        (dict(kind="data", mesh_shape=5), TypeError, "mesh_shape=5"),
        (dict(kind="model", layout_map="auto"), TypeError, "layout_map='auto'"),
        (dict(kind=["data"]), ValueError, r"Received: kind=\['data'\]"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    if BACKEND == "torch" and match == "`mesh_shape` must be":
        # Checked against the devices, which torch never gets to.
        match = "not available on the torch backend"
    with pytest.raises(error, match=match):
        configure(**kwargs)


@pytest.mark.parametrize(
    "batch_size, error",
    [(0, ValueError), (True, TypeError), ("8", TypeError), ([8, 2.5], TypeError)],
)
def test_check_batch_size_names_bad_sizes(batch_size, error):
    distribution = TrainingDistribution("data", "jax", (2,))
    with pytest.raises(error, match="Received: batch_size="):
        distribution.check_batch_size(batch_size)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX mesh shapes")
def test_jax_model_mesh_must_cover_the_devices():
    with pytest.raises(ValueError, match=r"\(batch, model\).*mesh_shape=\(2, 4\)"):
        configure("model", mesh_shape=(2, 4))
    distribution = configure("model", mesh_shape="1,1")
    assert distribution.mesh_shape == (1, 1) and distribution.model_parallel_size == 1


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow only")
def test_tensorflow_rejects_model_parallelism():
    with pytest.raises(ValueError, match="only supported on the JAX backend"):
        configure("model", mesh_shape=(1, 1))


@pytest.mark.skipif(BACKEND != "torch", reason="torch only")
@pytest.mark.parametrize("kind", ["data", "model"])
def test_torch_refuses_distribution_with_the_reason(kind):
    with pytest.raises(
        ValueError, match=f"`kind='{kind}'` is not available on the torch"
    ):
        configure(kind)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
def test_tf_strategy_needs_tensorflow():
    with pytest.raises(ValueError, match="`tf_strategy` needs the TensorFlow backend"):
        configure("data", tf_strategy=object())


def test_check_batch_size_lists_the_sizes_that_do_not_divide():
    distribution = TrainingDistribution("model", "jax", (4, 2))
    assert distribution.check_batch_size([8, 16]) == [8, 16]
    with pytest.raises(ValueError) as error:
        distribution.check_batch_size([8, 6, 12, 10], name="bucket batch sizes")
    message = str(error.value)
    assert "`bucket batch sizes` must be divisible by the 4 data-parallel" in message
    assert "axis 'batch' of mesh_shape=(4, 2)" in message
    assert "not divisible: [6, 10]" in message


def test_public_api():
    assert keras_attn.distribution.configure is configure
    assert keras_attn.distribution.KINDS == ("none", "data", "model")


def _has_gpu():
    if BACKEND == "jax":
        import jax

        return any(device.platform == "gpu" for device in jax.devices())
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_logical_devices("GPU"))
    return False


@pytest.mark.skipif(BACKEND == "torch", reason="no keras.distribution on torch")
@pytest.mark.parametrize(
    "devices",
    [
        # On TensorFlow these made `fit` wait forever on a host without GPUs;
        # on JAX `fit` failed with "Unknown backend: 'gpu'".
        pytest.param(
            ["gpu:0", "gpu:1"],
            marks=pytest.mark.skipif(_has_gpu(), reason="the host has GPUs"),
        ),
        ["cpu:0", "cpu:7"],  # the test process has one CPU device
        ["tpu:0"],
    ],
)
def test_devices_that_do_not_exist_are_refused_naming_those_that_do(devices):
    with pytest.raises(ValueError) as error:
        configure("data", devices=devices)
    message = str(error.value)
    assert "`devices` names devices that" in message
    missing = [name for name in devices if name != "cpu:0"]
    assert f"{missing}" in message
    assert "The devices that exist: [" in message and "'cpu:0'" in message
    assert f"Received: devices={devices!r}" in message


@pytest.mark.skipif(BACKEND == "torch", reason="no keras.distribution on torch")
@pytest.mark.parametrize(
    "devices", [["cpu:0", "cpu:0"], ["cpu:0", "CPU:0"], ["cpu:0", "cpu"]]
)
def test_a_device_named_twice_is_refused(devices):
    # Was a bare AssertionError from the mesh (JAX) or the strategy (TF).
    with pytest.raises(ValueError, match="`devices` must name each device once"):
        configure("data", devices=devices)


@pytest.mark.skipif(BACKEND == "torch", reason="no keras.distribution on torch")
def test_existing_devices_are_accepted_in_either_spelling():
    spelling = "/cpu:0" if BACKEND == "tensorflow" else "CPU:0"
    for devices in (["cpu:0"], [spelling]):
        distribution = configure("data", devices=devices)
        assert distribution.num_replicas == 1


@pytest.mark.skipif(BACKEND != "torch", reason="torch only")
def test_torch_refuses_devices_with_the_same_reason():
    with pytest.raises(ValueError, match="`kind='data'` is not available on the torch"):
        configure("data", devices=["gpu:0", "gpu:1"])


@pytest.mark.parametrize(
    "num_examples, replicas, last", [(18, 4, 2), (17, 2, 1), (9, 8, 1)]
)
def test_check_batch_size_finds_an_uneven_last_batch(num_examples, replicas, last):
    distribution = TrainingDistribution("data", BACKEND, (replicas,))
    with pytest.raises(ValueError) as error:
        distribution.check_batch_size(8, num_examples=num_examples)
    message = str(error.value)
    assert f"{num_examples} % 8 = {last} examples" in message
    assert f"over the {replicas} data-parallel replicas" in message
    assert f"Received: num_examples={num_examples}" in message


def test_check_batch_size_accepts_an_even_last_batch():
    distribution = TrainingDistribution("data", BACKEND, (4,))
    assert distribution.check_batch_size(8, num_examples=20) == 8  # last: 4
    assert distribution.check_batch_size(8, num_examples=24) == 8  # no last
    with pytest.raises(ValueError, match="`num_examples` needs one `batch_size`"):
        distribution.check_batch_size([8, 16], num_examples=20)
    with pytest.raises(ValueError, match="Received: num_examples=0"):
        distribution.check_batch_size(8, num_examples=0)
    with pytest.raises(TypeError, match="Received: num_examples=2.5"):
        distribution.check_batch_size(8, num_examples=2.5)
