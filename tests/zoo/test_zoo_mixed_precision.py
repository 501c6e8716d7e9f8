"""Every model under mixed precision: finite, close to float32, trainable.

Inputs include an all-padding row (for token models), the case where a
fully masked softmax row could produce NaN in half precision.
"""

import keras
import numpy as np
import pytest

from keras_attn import models, training

TOKENS = np.array([[2, 5, 6, 7, 0, 0], [2, 8, 9, 10, 11, 12], [0] * 6], "int32")
IMAGES = np.random.default_rng(0).random((3, 8, 8, 1)).astype("float32")


def build(name, dtype):
    keras.utils.set_random_seed(0)
    if name == "transformer":
        return models.Transformer.from_preset(
            "transformer_tiny", vocabulary_size=16, dtype=dtype
        )
    if name == "classifier":
        return models.TransformerEncoderClassifier.from_preset(
            "encoder_classifier_tiny", vocabulary_size=16, num_classes=3, dtype=dtype
        )
    if name == "lm":
        return models.TransformerLM.from_preset(
            "lm_tiny", vocabulary_size=16, dtype=dtype
        )
    return models.VisionTransformer.from_preset(
        "vit_tiny", num_classes=3, image_size=(8, 8), num_channels=1, dtype=dtype
    )


def inputs_and_labels(name):
    if name == "transformer":
        inputs = {"encoder_tokens": TOKENS, "decoder_tokens": TOKENS}
        return inputs, np.roll(TOKENS, -1, axis=1)
    if name == "lm":
        return TOKENS, np.roll(TOKENS, -1, axis=1)
    labels = np.array([0, 1, 2], "int32")
    return (IMAGES if name == "vit" else TOKENS), labels


def to_numpy(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


# Side by side, the cases are dealt out in this order (`split_cases`: jax,
# tensorflow, torch, jax, ...): each backend gets both policies and two or
# three of the models. Attention in bfloat16 and float16 is compared with
# float32 on every backend in tests/layers/test_attention_properties.py.
@pytest.mark.split_cases
@pytest.mark.parametrize(
    "name, policy",
    [
        ("transformer", "mixed_float16"),
        ("transformer", "mixed_bfloat16"),
        ("classifier", "mixed_float16"),
        ("classifier", "mixed_bfloat16"),
        ("vit", "mixed_float16"),
        ("vit", "mixed_bfloat16"),
        ("lm", "mixed_float16"),
        ("lm", "mixed_bfloat16"),
    ],
)
def test_mixed_precision_is_finite_close_to_float32_and_trains(name, policy):
    reference = build(name, "float32")
    model = build(name, policy)
    model.set_weights(reference.get_weights())
    assert all(v.dtype == "float32" for v in model.weights)
    inputs, labels = inputs_and_labels(name)

    expected = to_numpy(reference(inputs))
    actual = to_numpy(model(inputs))
    assert np.isfinite(actual).all()
    # Half precision keeps 8 (bfloat16) or 11 (float16) mantissa bits.
    tolerance = 0.1 if policy == "mixed_bfloat16" else 0.02
    np.testing.assert_allclose(actual, expected, atol=tolerance, rtol=tolerance)

    sequence_labels = name in ("transformer", "lm")
    loss = (
        training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
        if sequence_labels
        else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    logs = model.train_on_batch(inputs, labels, return_dict=True)
    assert np.isfinite(logs["loss"])
    assert all(np.isfinite(to_numpy(w)).all() for w in model.trainable_weights)


# Dealt out side by side in this order: each backend gets one length-1
# and one length-256 case, of two different policies.
@pytest.mark.split_cases
@pytest.mark.parametrize(
    "length, policy",
    [
        (1, "mixed_bfloat16"),
        (1, "mixed_float16"),
        (1, "float32"),
        (256, "mixed_float16"),
        (256, "float32"),
        (256, "mixed_bfloat16"),
    ],
)
def test_very_short_and_very_long_sequences_train_finitely(policy, length):
    """One token, or 256 (4x the tiny preset's learned-position table, so
    sinusoidal positions), half of the batch padding: finite loss and weights."""
    keras.utils.set_random_seed(0)
    model = models.Transformer.from_preset(
        "transformer_tiny", vocabulary_size=16, position="sinusoidal", dtype=policy
    )
    rng = np.random.default_rng(length)
    tokens = rng.integers(1, 16, size=(2, length)).astype("int32")
    tokens[1, max(1, length // 2) :] = 0
    if length == 1:
        tokens[1] = 0  # A row that is all padding.
    inputs = {"encoder_tokens": tokens, "decoder_tokens": tokens}
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
    )
    logs = model.train_on_batch(inputs, np.roll(tokens, -1, axis=1), return_dict=True)
    assert np.isfinite(logs["loss"])
    assert np.isfinite(to_numpy(model(inputs))).all()
    assert all(np.isfinite(to_numpy(w)).all() for w in model.trainable_weights)
