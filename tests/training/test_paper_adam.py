import keras
import numpy as np
import pytest

from keras_attn.training import TransformerSchedule, paper_adam


def paper_rate(step_num, d_model, warmup_steps):
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


def test_defaults_are_the_papers():
    optimizer = paper_adam()
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert optimizer.beta_1 == 0.9
    assert optimizer.beta_2 == 0.98
    assert optimizer.epsilon == 1e-9

    lr_config = optimizer.get_config()["learning_rate"]
    assert lr_config["registered_name"] == "keras_attn>TransformerSchedule"
    assert lr_config["config"] == {"d_model": 512, "warmup_steps": 4000, "scale": 1.0}
    # Before the first update, the rate is the paper's step_num = 1.
    np.testing.assert_allclose(
        float(optimizer.learning_rate), paper_rate(1, 512, 4000), rtol=1e-6
    )


def test_schedule_follows_iterations():
    optimizer = paper_adam(d_model=16, warmup_steps=10)
    variable = keras.Variable(np.ones((3,), "float32"))
    optimizer.build([variable])
    optimizer.apply([keras.ops.ones((3,))], [variable])
    assert int(optimizer.iterations) == 1
    np.testing.assert_allclose(
        float(optimizer.learning_rate), paper_rate(2, 16, 10), rtol=1e-6
    )


def test_learning_rate_and_kwargs_override():
    optimizer = paper_adam(learning_rate=1e-3, beta_2=0.999, clipnorm=1.0)
    np.testing.assert_allclose(float(optimizer.learning_rate), 1e-3)
    assert optimizer.beta_1 == 0.9
    assert optimizer.beta_2 == 0.999
    assert optimizer.clipnorm == 1.0

    schedule = TransformerSchedule(d_model=64, warmup_steps=7, scale=2.0)
    optimizer = paper_adam(learning_rate=schedule)
    assert optimizer.get_config()["learning_rate"]["config"] == schedule.get_config()


def test_invalid_schedule_arguments():
    with pytest.raises(ValueError, match="Received: warmup_steps=0"):
        paper_adam(warmup_steps=0)
