import keras
import numpy as np
import pytest

from keras_attn.training import MaskedAccuracy

PAD = 0


def make_batch(seed, batch=2, seq=4, vocab=5):
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, vocab, size=(batch, seq))
    labels[0, 2:] = PAD
    logits = rng.normal(size=(batch, seq, vocab)).astype("float32")
    # Make some predictions right so the accuracy is not trivially 0.
    logits[1, :2] = 10.0 * np.eye(vocab)[labels[1, :2]]
    return labels, logits


def reference_accuracy(batches, ignore_class=PAD):
    correct = count = 0.0
    for labels, logits, weights in batches:
        valid = (
            np.ones(labels.shape) if ignore_class is None else labels != ignore_class
        )
        if weights is not None:
            weights = np.asarray(weights, "float64")
            valid = valid * (weights[:, None] if weights.ndim == 1 else weights)
        correct += ((logits.argmax(-1) == labels) * valid).sum()
        count += valid.sum()
    return correct / count if count else 0.0


def result(metric):
    return float(keras.ops.convert_to_numpy(metric.result()))


def test_matches_numpy_over_two_updates():
    batches = [(*make_batch(0), None), (*make_batch(1), None)]
    metric = MaskedAccuracy()
    for labels, logits, _ in batches:
        metric.update_state(labels, logits)
    expected = reference_accuracy(batches)
    assert 0.0 < expected < 1.0
    np.testing.assert_allclose(result(metric), expected, rtol=1e-6)
    assert len(metric.variables) == 2


def test_sample_weight():
    labels, logits = make_batch(2)
    per_sequence = np.array([0.25, 2.0], "float32")
    per_token = np.linspace(0.1, 1.0, labels.size, dtype="float32").reshape(
        labels.shape
    )
    batches = [(labels, logits, per_sequence), (labels, logits, per_token)]
    metric = MaskedAccuracy()
    for labels_, logits_, weights in batches:
        metric.update_state(labels_, logits_, sample_weight=weights)
    np.testing.assert_allclose(result(metric), reference_accuracy(batches), rtol=1e-6)


def test_reset_and_all_padding():
    labels, logits = make_batch(3)
    metric = MaskedAccuracy()
    metric.update_state(labels, logits)
    assert result(metric) > 0.0
    metric.reset_state()
    assert result(metric) == 0.0
    metric.update_state(np.zeros_like(labels), logits)
    assert result(metric) == 0.0


def test_ignore_class_none_counts_every_token():
    labels, logits = make_batch(4)
    metric = MaskedAccuracy(ignore_class=None)
    metric.update_state(labels, logits)
    expected = reference_accuracy([(labels, logits, None)], ignore_class=None)
    np.testing.assert_allclose(result(metric), expected, rtol=1e-6)


def test_config_round_trip():
    metric = MaskedAccuracy(ignore_class=3, name="acc")
    config = metric.get_config()
    assert config["ignore_class"] == 3 and config["name"] == "acc"
    restored = keras.metrics.deserialize(keras.metrics.serialize(metric))
    assert isinstance(restored, MaskedAccuracy)
    assert restored.get_config() == config


def test_invalid_ignore_class():
    with pytest.raises(TypeError, match="Received: ignore_class=0.5"):
        MaskedAccuracy(ignore_class=0.5)
