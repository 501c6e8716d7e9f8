import keras
import numpy as np
import pytest

from keras_attn.training import TransformerSchedule

# Step numbers as the paper counts them (the first update is step_num = 1).
PAPER_STEPS = [1, 10, 100, 4000, 4001, 10000, 100000]


def reference_rate(step_num, d_model, warmup_steps, scale=1.0):
    """Equation (3), section 5.3 of Vaswani et al. (2017), in float64."""
    step_num = np.asarray(step_num, dtype="float64")
    return (
        scale
        * d_model**-0.5
        * np.minimum(step_num**-0.5, step_num * warmup_steps**-1.5)
    )


def as_float(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype="float64")


@pytest.mark.parametrize("step_num", PAPER_STEPS)
def test_matches_paper_formula_at_paper_steps(step_num):
    schedule = TransformerSchedule(d_model=512)
    # Keras passes the 0-based `optimizer.iterations`.
    got = as_float(schedule(step_num - 1))
    np.testing.assert_allclose(got, reference_rate(step_num, 512, 4000), rtol=1e-6)


def test_matches_paper_formula_vectorized_with_scale():
    schedule = TransformerSchedule(d_model=64, warmup_steps=100, scale=2.5)
    step_nums = np.array(PAPER_STEPS)
    got = as_float(schedule(keras.ops.convert_to_tensor(step_nums - 1, "int32")))
    np.testing.assert_allclose(
        got, reference_rate(step_nums, 64, 100, scale=2.5), rtol=1e-6
    )


def test_step_zero_is_paper_step_one_and_finite():
    schedule = TransformerSchedule(d_model=512)
    got = as_float(schedule(0))
    assert np.isfinite(got) and got > 0
    np.testing.assert_allclose(got, reference_rate(1, 512, 4000), rtol=1e-6)


def test_peaks_at_warmup():
    d_model, warmup_steps = 16, 50
    schedule = TransformerSchedule(d_model=d_model, warmup_steps=warmup_steps)
    rates = as_float(schedule(np.arange(3 * warmup_steps)))
    assert int(np.argmax(rates)) == warmup_steps - 1
    np.testing.assert_allclose(rates.max(), (d_model * warmup_steps) ** -0.5, rtol=1e-6)
    # Rising during warmup, falling after.
    assert np.all(np.diff(rates[:warmup_steps]) > 0)
    assert np.all(np.diff(rates[warmup_steps:]) < 0)


def test_config_round_trip():
    schedule = TransformerSchedule(d_model=256, warmup_steps=123, scale=0.5)
    config = schedule.get_config()
    assert config == {"d_model": 256, "warmup_steps": 123, "scale": 0.5}
    restored = TransformerSchedule.from_config(config)
    assert restored.get_config() == config

    serialized = keras.saving.serialize_keras_object(schedule)
    assert serialized["registered_name"] == "keras_attn>TransformerSchedule"
    restored = keras.saving.deserialize_keras_object(serialized)
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == config
    np.testing.assert_allclose(as_float(restored(7)), as_float(schedule(7)))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"d_model": 0},
            ValueError,
            "`d_model` must be a positive integer. Received: d_model=0",
        ),
        ({"d_model": -8}, ValueError, "Received: d_model=-8"),
        ({"d_model": 8.5}, TypeError, "Received: d_model=8.5"),
        ({"d_model": True}, TypeError, "Received: d_model=True"),
        (
            {"d_model": 8, "warmup_steps": 0},
            ValueError,
            "`warmup_steps` must be a positive integer. Received: warmup_steps=0",
        ),
        (
            {"d_model": 8, "warmup_steps": 10.0},
            TypeError,
            "Received: warmup_steps=10.0",
        ),
        ({"d_model": 8, "scale": 0}, ValueError, "`scale` must be a finite number > 0"),
        ({"d_model": 8, "scale": -1.0}, ValueError, "Received: scale=-1.0"),
        ({"d_model": 8, "scale": float("inf")}, ValueError, "Received: scale=inf"),
        ({"d_model": 8, "scale": "1"}, TypeError, "Received: scale='1'"),
    ],
)
def test_invalid_arguments(kwargs, error, message):
    with pytest.raises(error, match=message.replace(".", r"\.")):
        TransformerSchedule(**kwargs)
