import keras
import numpy as np
import pytest

from keras_attn.models import Transformer
from keras_attn.training import MaskedSparseCategoricalCrossentropy, RDropLoss
from keras_attn.training.r_drop import symmetric_kl_divergence

BATCH, SEQ, VOCAB = 3, 4, 6
PAD = 0


def reference_r_drop_loss(labels, logits, alpha, eps):
    """The R-Drop paper's per-token loss, halved, averaged over real tokens.

    `CE(a) + CE(b) + alpha / 2 * (KL(a || b) + KL(b || a))` with the
    label-smoothed cross-entropy against `(1 - eps) * one_hot + eps / K`,
    computed in float64 from its definition.
    """
    x = np.asarray(logits, "float64")
    log_p = x - x.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    target = (1.0 - eps) * np.eye(VOCAB)[labels] + eps / VOCAB
    cross_entropy = -(target * log_p).sum(-1)  # (2 * batch, seq)
    half = len(labels) // 2
    p = np.exp(log_p)
    kl_ab = (p[:half] * (log_p[:half] - log_p[half:])).sum(-1)
    kl_ba = (p[half:] * (log_p[half:] - log_p[:half])).sum(-1)
    per_token = (
        cross_entropy[:half] + cross_entropy[half:] + alpha / 2 * (kl_ab + kl_ba)
    )
    valid = labels[:half] != PAD
    return per_token[valid].sum() / valid.sum() / 2


def make_batch(seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, VOCAB, size=(BATCH, SEQ))
    labels[0, 2:] = PAD
    labels = np.concatenate([labels, labels])  # the two passes' labels
    logits = rng.normal(scale=2.0, size=(2 * BATCH, SEQ, VOCAB)).astype("float32")
    return labels, logits


@pytest.mark.parametrize("alpha", [0.0, 1.0, 5.0])
def test_matches_the_papers_loss(alpha):
    labels, logits = make_batch()
    loss = RDropLoss(alpha=alpha, label_smoothing=0.1, ignore_class=PAD)
    np.testing.assert_allclose(
        float(loss(labels, logits)),
        reference_r_drop_loss(labels, logits, alpha, 0.1),
        rtol=1e-5,
    )


def test_identical_passes_give_the_plain_cross_entropy():
    labels, logits = make_batch(seed=1)
    logits[BATCH:] = logits[:BATCH]
    plain = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    np.testing.assert_allclose(
        float(RDropLoss(alpha=5.0)(labels, logits)),
        float(plain(labels[:BATCH], logits[:BATCH])),
        rtol=1e-6,
    )


def test_symmetric_kl_divergence_is_the_sum_of_both_directions():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 5, VOCAB))
    p, q = (np.exp(x) / np.exp(x).sum(-1, keepdims=True) for x in (a, b))
    expected = (p * np.log(p / q)).sum(-1) + (q * np.log(q / p)).sum(-1)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(symmetric_kl_divergence(a, b)), expected, rtol=1e-5
    )


def test_config_round_trip():
    loss = RDropLoss(alpha=2.5, label_smoothing=0.2, ignore_class=3, name="rd")
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(loss)
    )
    assert isinstance(restored, RDropLoss)
    assert restored.get_config() == loss.get_config()
    labels, logits = make_batch(seed=3)
    np.testing.assert_allclose(
        float(restored(labels, logits)), float(loss(labels, logits)), rtol=1e-6
    )


@pytest.mark.parametrize("alpha", [-1.0, float("nan"), "5"])
def test_rejects_a_bad_alpha(alpha):
    with pytest.raises((TypeError, ValueError), match="alpha"):
        RDropLoss(alpha=alpha)


def test_a_model_trains_on_repeated_batches_and_reloads(tmp_path):
    """fit on `[x; x]` batches: dropout makes the passes differ (KL > 0)."""
    model = Transformer(
        vocabulary_size=VOCAB,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.3,
        max_sequence_length=8,
    )
    model.compile(optimizer="adam", loss=RDropLoss(alpha=5.0))
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, VOCAB, size=(2, 5)).astype("int32")
    inputs = {
        "encoder_tokens": np.concatenate([tokens] * 2),
        "decoder_tokens": np.concatenate([tokens] * 2),
    }
    labels = np.concatenate([tokens] * 2)
    logits = model(inputs, training=True)
    divergence = symmetric_kl_divergence(logits[:2], logits[2:])
    assert float(keras.ops.min(divergence)) > 0
    history = model.fit(inputs, labels, batch_size=4, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.loss.alpha == 5.0
