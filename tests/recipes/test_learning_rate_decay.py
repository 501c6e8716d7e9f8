"""The translation recipe's `learning_rate_decay` setting."""

import numpy as np
import pytest
from keras import ops

from keras_attn.training import TransformerSchedule
from keras_attn_recipes.translation_config import TranslationConfig
from keras_attn_recipes.translation_steps import learning_rate_schedule


def rate(schedule, step):
    return float(ops.convert_to_numpy(schedule(step)))


def test_inverse_sqrt_is_the_papers_schedule():
    config = TranslationConfig(
        train_steps=100, warmup_steps=10, learning_rate_scale=2.0
    )
    schedule = learning_rate_schedule(config, hidden_dim=64)
    assert isinstance(schedule, TransformerSchedule)
    # Equation (3): scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5), 1-based.
    for step in (0, 9, 50):
        n = step + 1
        expected = 2.0 * 64**-0.5 * min(n**-0.5, n * 10**-1.5)
        np.testing.assert_allclose(rate(schedule, step), expected, rtol=1e-6)


def test_cosine_reaches_the_papers_peak_and_ends_at_zero():
    config = TranslationConfig(
        train_steps=100,
        warmup_steps=10,
        learning_rate_scale=2.0,
        learning_rate_decay="cosine",
    )
    schedule = learning_rate_schedule(config, hidden_dim=64)
    peak = 2.0 * (64 * 10) ** -0.5
    np.testing.assert_allclose(rate(schedule, 10), peak, rtol=1e-6)
    np.testing.assert_allclose(rate(schedule, 5), peak / 2, rtol=1e-6)
    np.testing.assert_allclose(rate(schedule, 55), peak / 2, rtol=1e-5)
    assert rate(schedule, 100) == pytest.approx(0.0, abs=1e-9)
    rates = [rate(schedule, s) for s in range(10, 101, 10)]
    assert rates == sorted(rates, reverse=True)


def test_cosine_needs_an_update_count_and_unknown_decays_are_named():
    with pytest.raises(ValueError, match="needs `train_steps`"):
        TranslationConfig(epochs=3, learning_rate_decay="cosine")
    with pytest.raises(ValueError, match="learning_rate_decay='linear'"):
        TranslationConfig(train_steps=3, learning_rate_decay="linear")
