import keras
import numpy as np
import pytest

from keras_attn.training import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    paper_adam,
)

BATCH, SEQ, VOCAB = 2, 5, 7
PAD = 0


def make_batch(seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, VOCAB, size=(BATCH, SEQ))
    labels[0, 3:] = PAD
    labels[1, 1] = PAD  # Padding need not be trailing.
    logits = rng.normal(scale=2.0, size=(BATCH, SEQ, VOCAB)).astype(dtype)
    return labels, logits


def reference_token_losses(labels, logits, eps, from_logits=True):
    """Cross-entropy against q' = (1 - eps) * one_hot + eps / K, in float64."""
    x = np.asarray(logits, dtype="float64")
    if from_logits:
        x = x - x.max(axis=-1, keepdims=True)
        log_probs = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    else:
        log_probs = np.log(x / x.sum(axis=-1, keepdims=True))
    vocab = x.shape[-1]
    target = (1.0 - eps) * np.eye(vocab)[labels] + eps / vocab
    return -(target * log_probs).sum(axis=-1)


def reference_loss(labels, logits, eps, ignore_class=PAD, from_logits=True):
    """Mean over the tokens whose label is not `ignore_class`."""
    token_losses = reference_token_losses(labels, logits, eps, from_logits)
    if ignore_class is None:
        return token_losses.mean()
    valid = labels != ignore_class
    return token_losses[valid].sum() / max(valid.sum(), 1)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def value_and_grad(fn, x):
    """Value and gradient of a scalar function of one array, on any backend."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        value, grad = jax.value_and_grad(fn)(jax.numpy.asarray(x))
    elif backend == "tensorflow":
        import tensorflow as tf

        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        grad = tape.gradient(value, x)
    elif backend == "torch":
        import torch

        x = torch.tensor(x, requires_grad=True)
        value = fn(x)
        (grad,) = torch.autograd.grad(value, x)
    else:
        pytest.skip(f"No gradient helper for backend {backend}.")
    return to_numpy(value), to_numpy(grad)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_matches_numpy_reference(eps):
    labels, logits = make_batch()
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=eps)
    np.testing.assert_allclose(
        to_numpy(loss(labels, logits)),
        reference_loss(labels, logits, eps),
        rtol=1e-5,
        atol=1e-5,
    )


def test_reductions():
    labels, logits = make_batch()
    valid = labels != PAD
    token_losses = reference_token_losses(labels, logits, 0.1)

    per_token = MaskedSparseCategoricalCrossentropy(reduction=None)(labels, logits)
    expected = np.where(valid, token_losses, 0.0)
    np.testing.assert_allclose(to_numpy(per_token), expected, rtol=1e-5, atol=1e-6)

    summed = MaskedSparseCategoricalCrossentropy(reduction="sum")(labels, logits)
    np.testing.assert_allclose(
        to_numpy(summed), token_losses[valid].sum(), rtol=1e-5, atol=1e-5
    )


def test_labels_with_trailing_axis_and_out_of_vocab_ignore_class():
    labels, logits = make_batch()
    loss = MaskedSparseCategoricalCrossentropy()
    expected = reference_loss(labels, logits, 0.1)
    np.testing.assert_allclose(
        to_numpy(loss(labels[..., None], logits)), expected, rtol=1e-5
    )
    # An ignored id outside the vocabulary must never be gathered.
    labels_255 = np.where(labels == PAD, 255, labels)
    loss_255 = MaskedSparseCategoricalCrossentropy(ignore_class=255)
    np.testing.assert_allclose(
        to_numpy(loss_255(labels_255, logits)), expected, rtol=1e-5
    )


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
@pytest.mark.parametrize("ignore_class", [PAD, None])
def test_equals_keras_categorical_crossentropy_when_nothing_is_padded(
    eps, ignore_class
):
    # Keras smooths one-hot labels as y * (1 - eps) + eps / K: the same q'.
    labels, logits = make_batch()
    if ignore_class is not None:
        labels = np.where(labels == ignore_class, 1, labels)
    else:
        labels[0, 0] = 0  # Class 0 is an ordinary class here.
    one_hot = np.eye(VOCAB, dtype="float32")[labels]
    for from_logits, y_pred in [
        (True, logits),
        (False, to_numpy(keras.ops.softmax(logits, axis=-1))),
    ]:
        expected = keras.losses.CategoricalCrossentropy(
            from_logits=from_logits, label_smoothing=eps
        )(one_hot, y_pred)
        loss = MaskedSparseCategoricalCrossentropy(
            label_smoothing=eps, ignore_class=ignore_class, from_logits=from_logits
        )
        np.testing.assert_allclose(
            to_numpy(loss(labels, y_pred)), to_numpy(expected), rtol=1e-5
        )


def test_from_probabilities_matches_reference_with_padding():
    labels, logits = make_batch()
    probs = to_numpy(keras.ops.softmax(logits, axis=-1))
    loss = MaskedSparseCategoricalCrossentropy(from_logits=False)
    np.testing.assert_allclose(
        to_numpy(loss(labels, probs)),
        reference_loss(labels, probs, 0.1, from_logits=False),
        rtol=1e-5,
    )


def test_no_smoothing_equals_keras_sparse_crossentropy_with_ignore_class():
    labels, logits = make_batch()
    # Keras's own loss needs per-token weights for (batch, seq) losses.
    sample_weight = np.linspace(0.1, 2.0, BATCH * SEQ, dtype="float32").reshape(
        BATCH, SEQ
    )
    ours = MaskedSparseCategoricalCrossentropy(label_smoothing=0.0)
    keras_loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=PAD
    )
    np.testing.assert_allclose(
        to_numpy(ours(labels, logits)), to_numpy(keras_loss(labels, logits)), rtol=1e-5
    )
    np.testing.assert_allclose(
        to_numpy(ours(labels, logits, sample_weight=sample_weight)),
        to_numpy(keras_loss(labels, logits, sample_weight=sample_weight)),
        rtol=1e-5,
    )


def test_per_sequence_sample_weight():
    labels, logits = make_batch()
    per_sequence = np.array([0.5, 2.0], "float32")
    per_token = np.broadcast_to(per_sequence[:, None], labels.shape)
    token_losses = reference_token_losses(labels, logits, 0.1)
    valid = labels != PAD
    expected = (token_losses * per_token)[valid].sum() / valid.sum()
    loss = MaskedSparseCategoricalCrossentropy()
    for weights in (per_sequence, per_token):
        np.testing.assert_allclose(
            to_numpy(loss(labels, logits, sample_weight=weights)), expected, rtol=1e-5
        )


def test_all_padding_gives_zero_and_finite_gradients():
    labels = np.zeros((BATCH, SEQ), "int32")
    _, logits = make_batch()
    loss = MaskedSparseCategoricalCrossentropy()
    value, grad = value_and_grad(lambda x: loss(labels, x), logits)
    assert value == 0.0
    assert np.all(grad == 0.0)


def test_gradient_is_exactly_zero_at_padding():
    labels, logits = make_batch()
    pad = labels == PAD
    # Whatever the model emits at padding, even NaN, must not leak through.
    logits[pad] = np.nan
    loss = MaskedSparseCategoricalCrossentropy()
    value, grad = value_and_grad(lambda x: loss(labels, x), logits)
    np.testing.assert_allclose(
        value, reference_loss(labels, np.nan_to_num(logits), 0.1), rtol=1e-5
    )
    assert np.all(grad[pad] == 0.0)
    assert np.all(np.isfinite(grad)) and np.all(np.abs(grad[~pad]).sum(-1) > 0)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_matches_the_numpy_formula(eps):
    """The written-out gradient against d loss / d logits in float64.

    For the mean over valid tokens, d/d logits of one valid token is
    `(softmax(logits) - q') * weight / sum(weights)`, with
    `q' = (1 - eps) * one_hot + eps / K`; ignored tokens get 0.
    """
    labels, logits = make_batch(seed=3)
    weights = np.random.default_rng(4).uniform(0.5, 2.0, size=labels.shape)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=eps)
    _, grad = value_and_grad(
        lambda x: loss(labels, x, sample_weight=weights.astype("float32")), logits
    )
    x = logits.astype("float64")
    softmax = np.exp(x - x.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    target = (1.0 - eps) * np.eye(VOCAB)[labels] + eps / VOCAB
    valid = labels != PAD
    # Keras divides the weighted sum by the token count; the loss rescales
    # by total / valid tokens, so the mean is over the valid tokens.
    scale = np.where(valid, weights, 0.0) / valid.sum()
    expected = (softmax - target) * scale[..., None]
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_both_formulations_agree_on_this_backend(eps, monkeypatch):
    """The written-out gradient (JAX, TensorFlow) and autograd through
    `log_softmax` (torch) give the same losses and gradients on any backend,
    exactly 0 at ignored tokens whose logits are NaN."""
    from keras_attn.training import softmax_cross_entropy

    labels, logits = make_batch(seed=5)
    valid = labels != PAD
    logits[~valid] = np.nan
    results = {}
    for written_out in (True, False):
        monkeypatch.setattr(
            softmax_cross_entropy, "writes_out_gradient", lambda w=written_out: w
        )
        results[written_out] = value_and_grad(
            lambda x: keras.ops.sum(
                softmax_cross_entropy.smoothed_softmax_cross_entropy(
                    x, labels.astype("int32"), eps, keras.ops.convert_to_tensor(valid)
                )
            ),
            logits,
        )
    (value, grad), (other_value, other_grad) = results[True], results[False]
    np.testing.assert_allclose(other_value, value, rtol=1e-5)
    np.testing.assert_allclose(other_grad, grad, rtol=1e-5, atol=1e-7)
    assert np.all(other_grad[~valid] == 0.0) and np.all(grad[~valid] == 0.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_logits(dtype):
    labels, logits = make_batch()
    logits = keras.ops.cast(logits * 30.0, dtype)  # exp() overflows in 16 bits.
    rounded = to_numpy(keras.ops.cast(logits, "float32"))
    loss = MaskedSparseCategoricalCrossentropy()
    expected = reference_loss(labels, rounded, 0.1)
    for value in (loss(labels, logits), keras.ops.mean(loss.call(labels, logits))):
        value = to_numpy(value)
        assert np.isfinite(value)
    np.testing.assert_allclose(to_numpy(loss(labels, logits)), expected, rtol=1e-5)


def test_config_round_trip():
    loss = MaskedSparseCategoricalCrossentropy(
        label_smoothing=0.2, ignore_class=None, from_logits=False, reduction="sum"
    )
    config = loss.get_config()
    assert config == {
        "name": "masked_sparse_categorical_crossentropy",
        "reduction": "sum",
        "label_smoothing": 0.2,
        "ignore_class": None,
        "from_logits": False,
    }
    assert (
        MaskedSparseCategoricalCrossentropy.from_config(config).get_config() == config
    )
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, MaskedSparseCategoricalCrossentropy)
    assert restored.get_config() == config


@pytest.mark.parametrize(
    "kwargs, error_type, message",
    [
        (
            {"label_smoothing": 1.0},
            ValueError,
            "`label_smoothing` must be a float in [0, 1). Received: label_smoothing=1.0",
        ),
        ({"label_smoothing": -0.1}, ValueError, "Received: label_smoothing=-0.1"),
        (
            {"label_smoothing": float("nan")},
            ValueError,
            "Received: label_smoothing=nan",
        ),
        ({"label_smoothing": "0.1"}, TypeError, "Received: label_smoothing='0.1'"),
        (
            {"ignore_class": 1.5},
            TypeError,
            "`ignore_class` must be an integer or None. Received: ignore_class=1.5",
        ),
        (
            {"from_logits": "yes"},
            TypeError,
            "`from_logits` must be True or False. Received: from_logits='yes'",
        ),
        ({"reduction": "avg"}, ValueError, "reduction=avg"),
    ],
)
def test_invalid_arguments(kwargs, error_type, message):
    with pytest.raises(error_type) as error:
        MaskedSparseCategoricalCrossentropy(**kwargs)
    assert message in str(error.value)


def tiny_model(mask_zero):
    tokens = keras.Input((SEQ,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 4, mask_zero=mask_zero)(tokens)
    logits = keras.layers.Dense(VOCAB)(x)  # (batch, seq, vocab)
    model = keras.Model(tokens, logits)
    model.compile(
        optimizer=paper_adam(d_model=4, warmup_steps=10),
        loss=MaskedSparseCategoricalCrossentropy(),
        metrics=[MaskedAccuracy()],
    )
    return model


@pytest.mark.parametrize("mask_zero", [False, True])
def test_compile_fit_and_evaluate(mask_zero):
    # With mask_zero=True the logits carry a Keras mask; it must not rescale
    # the mean a second time.
    labels, _ = make_batch()
    inputs = np.where(labels == PAD, PAD, (labels + 1) % VOCAB).astype("int32")
    model = tiny_model(mask_zero)
    history = model.fit(inputs, labels, batch_size=BATCH, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])

    logits = model.predict(inputs, batch_size=BATCH, verbose=0)
    results = model.evaluate(
        inputs, labels, batch_size=BATCH, verbose=0, return_dict=True
    )
    np.testing.assert_allclose(
        results["loss"], reference_loss(labels, logits, 0.1), rtol=1e-5
    )
    valid = labels != PAD
    accuracy = (logits.argmax(-1) == labels)[valid].mean()
    np.testing.assert_allclose(results["masked_accuracy"], accuracy, rtol=1e-6)


def test_keras_file_round_trip(tmp_path):
    labels, _ = make_batch()
    inputs = np.where(labels == PAD, PAD, (labels + 1) % VOCAB).astype("int32")
    model = tiny_model(mask_zero=False)
    model.fit(inputs, labels, batch_size=BATCH, epochs=1, verbose=0)
    path = str(tmp_path / "tiny.keras")
    model.save(path)

    restored = keras.saving.load_model(path)  # No custom_objects needed.
    assert isinstance(restored.loss, MaskedSparseCategoricalCrossentropy)
    assert restored.loss.get_config() == model.loss.get_config()
    assert restored.optimizer.get_config()["learning_rate"]["config"] == {
        "d_model": 4,
        "warmup_steps": 10,
        "scale": 1.0,
    }
    assert int(restored.optimizer.iterations) == 1
    expected = model.evaluate(
        inputs, labels, batch_size=BATCH, verbose=0, return_dict=True
    )
    got = restored.evaluate(
        inputs, labels, batch_size=BATCH, verbose=0, return_dict=True
    )
    assert set(got) == {"loss", "masked_accuracy"}
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6)
