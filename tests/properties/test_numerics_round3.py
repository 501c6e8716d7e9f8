"""Round 3 of the robustness pass (issue #35): silent wrong numerics and
training crashes.

- Half-precision attention with large activations: no NaN or inf, and the
  output of `keras.layers.MultiHeadAttention` with the same weights, on
  every path (explicit, fused, cached, `attention_axes`); fully masked rows
  stay zero; the float32 path casts nothing.
- `MaskedSparseCategoricalCrossentropy`, `RDropLoss`, `MaskedAccuracy`:
  float labels are refused, labels outside the vocabulary give NaN (not
  another class) on every backend, and `TerminateOnNaN` stops `fit`.
- `RDropLoss` on an odd batch: a `ValueError` naming the batch size.
- `keras.config.set_floatx("float64")`: every model runs and trains a step;
  an integer `dtype` is a `ValueError` at the constructor.
"""

import os
import sys

import keras
import numpy as np
import pytest
from keras import ops

import keras_attn
from keras_attn.layers import MultiHeadAttention, scaled_dot_product_attention
from keras_attn.training import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    RDropLoss,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from zoo_cases import ZOO_MODELS, make_inputs, make_model  # noqa: E402

BACKEND = keras.backend.backend()
FLOAT16_MAX = 65504.0
BATCH, LENGTH, DIM, HEADS, KEY_DIM = 2, 6, 16, 2, 8
# With inputs ~100, Q K^T reaches ~1e5: past float16's 65504.
WEIGHT_SCALE = 0.3


def to_numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


# --- Half-precision attention with large inputs ------------------------------


def copy_weights(source, target):
    """Copies weights between layers whose sub-layers share names."""
    by_name = {"/".join(w.path.split("/")[-2:]): w for w in source.weights}
    assert len(by_name) == len(target.weights)
    for weight in target.weights:
        weight.assign(by_name["/".join(weight.path.split("/")[-2:])])


def large_inputs(rank):
    """Query and value, `N(0, 1) * 100`: activations in the hundreds."""
    rng = np.random.default_rng(0)
    shape = (BATCH, LENGTH, DIM) if rank == 3 else (BATCH, 2, 3, DIM)
    return tuple((100.0 * rng.normal(size=shape)).astype("float32") for _ in "qv")


def unscaled_product_max(layer, query, value):
    """`max |Q K^T|` over heads, in float64 from the layer's weights."""
    weights = {"/".join(w.path.split("/")[-2:]): to_numpy(w) for w in layer.weights}

    def project(x, name):
        x = x.reshape(x.shape[0], -1, DIM).astype("float64")
        return (
            np.einsum("btd,dhk->bthk", x, weights[f"{name}/kernel"])
            + weights[f"{name}/bias"]
        )

    products = np.einsum(
        "bqhd,bkhd->bhqk", project(query, "query"), project(value, "key")
    )
    return np.abs(products).max()


def keras_and_ours(policy, attention_axes=None, **kwargs):
    """Keras's layer under `policy`, Keras's in float32 (the reference) and
    ours under `policy`, all with the same weights."""
    query, value = large_inputs(3 if attention_axes is None else 4)
    layers = {}
    for name, cls, dtype in (
        ("reference", keras.layers.MultiHeadAttention, "float32"),
        ("keras", keras.layers.MultiHeadAttention, policy),
        ("ours", MultiHeadAttention, policy),
    ):
        layers[name] = cls(
            num_heads=HEADS,
            key_dim=KEY_DIM,
            attention_axes=attention_axes,
            dtype=dtype,
            **(kwargs if name == "ours" else {}),
        )
        # Built, not called: an eager call compiles every op again on JAX.
        layers[name].build(query.shape, value.shape)
    # Weights from NumPy, the same on every backend.
    rng = np.random.default_rng(1)
    for weight in layers["reference"].weights:
        weight.assign(WEIGHT_SCALE * rng.normal(size=weight.shape).astype("float32"))
    for name in ("keras", "ours"):
        copy_weights(layers["reference"], layers[name])
    return layers, query, value


PATHS = ["explicit", "fused", "causal", "scores", "cached", "attention_axes"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_half_precision_attention_with_large_inputs_matches_keras(policy, path):
    layers, query, value = keras_and_ours(
        policy,
        attention_axes=(1, 2) if path == "attention_axes" else None,
        flash_attention=False if path == "explicit" else None,
    )
    # The case is one where a float16 Q K^T overflows (what it caught).
    assert unscaled_product_max(layers["reference"], query, value) > FLOAT16_MAX
    ours = layers["ours"]
    if path == "scores":
        output, scores = ours(query, value, return_attention_scores=True)
        assert np.isfinite(to_numpy(scores)).all()
    elif path == "cached":
        keys, values = ours.compute_key_value(value)
        output = ours.call_with_key_value(query, keys, values)
    else:
        output = ours(query, value, use_causal_mask=path == "causal")
    output = to_numpy(output)
    assert np.isfinite(output).all(), f"{(~np.isfinite(output)).sum()} not finite"
    causal = {"use_causal_mask": path == "causal"}
    reference = to_numpy(layers["reference"](query, value, **causal))
    # Half precision's rounding of activations in the hundreds.
    tolerance = 0.01 * np.abs(reference).max()
    theirs = to_numpy(layers["keras"](query, value, **causal))
    finite = np.isfinite(theirs)
    if np.any(np.abs(theirs - reference)[finite] > tolerance):
        # Seen with TensorFlow's bfloat16 einsum over two attention axes on
        # a CPU without AVX-512 (2026-11-28): Keras's own layer then misses
        # the float32 reference too, by far more than rounding; the
        # backend's kernel, not the layer, sets the error there.
        pytest.xfail(
            "keras.layers.MultiHeadAttention misses the float32 reference "
            f"beyond the tolerance on this backend and CPU ({policy}, {path})"
        )
    np.testing.assert_allclose(output, reference, atol=tolerance)
    # Keras's own layer overflows on TensorFlow in float16; where it does
    # not, it agrees with ours.
    np.testing.assert_allclose(output[finite], theirs[finite], atol=tolerance)


@pytest.mark.parametrize("use_fused", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_fully_masked_rows_are_zero_with_large_inputs(dtype, use_fused):
    rng = np.random.default_rng(0)
    # (batch, length, heads, head_dim): a float16 Q K^T of ~1e6 per entry.
    query, key, value = (
        ops.cast(300.0 * rng.normal(size=(2, 4, 2, 8)), dtype) for _ in range(3)
    )
    mask = np.tril(np.ones((4, 4), bool))[None].repeat(2, axis=0)
    mask[1, 2:] = False  # Two padded queries: fully masked rows.
    attended = to_numpy(
        scaled_dot_product_attention(
            query, key, value, mask=mask, flash_attention=None if use_fused else False
        )
    )
    assert np.isfinite(attended).all()
    np.testing.assert_array_equal(attended[1, 2:], 0.0)
    # The first query attends only the first key: the output is its value.
    np.testing.assert_allclose(attended[:, 0], to_numpy(value)[:, 0], rtol=1e-2)


def test_float32_attention_casts_nothing(monkeypatch):
    casts = []
    cast = ops.cast

    def counting(x, dtype):
        casts.append(dtype)
        return cast(x, dtype)

    monkeypatch.setattr(keras.ops, "cast", counting)
    rng = np.random.default_rng(0)
    query, key, value = (
        rng.normal(size=(2, 4, 2, 8)).astype("float32") for _ in range(3)
    )
    mask = np.tril(np.ones((4, 4), bool))[None].repeat(2, axis=0)
    for use_fused in (True, False):
        scaled_dot_product_attention(
            query, key, value, mask=mask, flash_attention=None if use_fused else False
        )
    scaled_dot_product_attention(query, key, value, return_attention_scores=True)
    assert casts == []
    # The same calls in float16 cast (the counter sees the module's casts).
    scaled_dot_product_attention(
        *(q.astype("float16") for q in (query, key, value)),
        return_attention_scores=True,
    )
    assert "float32" in casts


# --- Labels outside the vocabulary -------------------------------------------

VOCAB = 5
PAD = 0


def logits_and_labels():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, VOCAB)).astype("float32")
    labels = np.array([[1, 2, 3, PAD], [4, 1, PAD, PAD]], "int32")
    return logits, labels


def loss_cases():
    return {
        "logits": MaskedSparseCategoricalCrossentropy(),
        "probabilities": MaskedSparseCategoricalCrossentropy(from_logits=False),
        "r_drop": RDropLoss(alpha=1.0),
    }


def loss_inputs(kind, logits):
    if kind == "probabilities":
        return to_numpy(ops.softmax(logits, axis=-1))
    return logits


@pytest.mark.parametrize("kind", ["logits", "probabilities", "r_drop"])
def test_bool_labels_are_refused(kind):
    logits, labels = logits_and_labels()
    loss = loss_cases()[kind]
    with pytest.raises(TypeError, match=r"y_true.dtype=bool"):
        loss(labels.astype("bool"), loss_inputs(kind, logits))


@pytest.mark.parametrize("kind", ["logits", "probabilities", "r_drop"])
@pytest.mark.parametrize("label_dtype", ["float32", "float64"])
def test_float_labels_are_ids_when_whole_and_nan_when_fractional(kind, label_dtype):
    # Keras hands labels to losses as floats itself (under tf.distribute
    # too): whole numbers are the same ids; a fraction is never truncated.
    logits, labels = logits_and_labels()
    loss = loss_cases()[kind]
    inputs = loss_inputs(kind, logits)
    expected = float(to_numpy(loss(labels, inputs)))
    whole = float(to_numpy(loss(labels.astype(label_dtype), inputs)))
    np.testing.assert_allclose(whole, expected, rtol=1e-6)
    fractional = labels.astype(label_dtype)
    fractional[1, 1] += 0.5
    assert np.isnan(float(to_numpy(loss(fractional, inputs))))


@pytest.mark.parametrize("bad_label", [VOCAB, VOCAB + 7, -1, -9])
@pytest.mark.parametrize("kind", ["logits", "probabilities", "r_drop"])
def test_label_outside_the_vocabulary_gives_nan(kind, bad_label):
    logits, labels = logits_and_labels()
    loss = loss_cases()[kind]
    inputs = loss_inputs(kind, logits)
    good = float(to_numpy(loss(labels, inputs)))
    assert np.isfinite(good)
    bad = labels.copy()
    bad[1, 1] = bad_label
    assert np.isnan(float(to_numpy(loss(bad, inputs))))

    # Per token: NaN at the bad token only; the others are unchanged.
    per_token = loss_cases()[kind]
    per_token.reduction = None
    expected = to_numpy(per_token(labels, inputs))
    result = to_numpy(per_token(bad, inputs))
    is_bad = np.zeros(labels.shape, bool)
    is_bad[1, 1] = True
    if kind == "r_drop":
        # Both halves' KL terms read the same logits; only the CE differs.
        expected[1, 1] = np.nan
    assert np.isnan(result[is_bad]).all()
    np.testing.assert_allclose(result[~is_bad], expected[~is_bad], rtol=1e-5)


def loss_gradient(loss, labels, logits):
    """d loss / d logits with the backend's own differentiation."""
    if BACKEND == "jax":
        import jax

        return jax.grad(lambda x: loss(labels, x))(logits)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        x = tf.Variable(logits)
        with tf.GradientTape() as tape:
            value = loss(labels, x)
        return tape.gradient(value, x)
    import torch

    x = torch.tensor(logits, requires_grad=True)
    loss(labels, x).backward()
    return x.grad


def tiny_token_model():
    """Token ids `(batch, 4)` -> logits `(batch, 4, VOCAB)`."""
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 8),
            keras.layers.Dense(VOCAB),
        ]
    )


def test_out_of_range_label_keeps_the_gradient_finite():
    logits, labels = logits_and_labels()
    labels[0, 0] = VOCAB + 1
    loss = MaskedSparseCategoricalCrossentropy()
    gradient = to_numpy(loss_gradient(loss, labels, logits))
    assert np.isfinite(gradient).all()
    np.testing.assert_array_equal(gradient[0, 0], 0.0)


@pytest.mark.parametrize("ignore_class", [0, -1, VOCAB + 3])
def test_padding_id_still_gives_zero_loss(ignore_class):
    logits, labels = logits_and_labels()
    labels = np.where(labels == PAD, ignore_class, labels).astype("int32")
    loss = MaskedSparseCategoricalCrossentropy(ignore_class=ignore_class)
    loss.reduction = None
    per_token = to_numpy(loss(labels, logits))
    assert np.isfinite(per_token).all()
    np.testing.assert_array_equal(per_token[labels == ignore_class], 0.0)
    every_token_padding = np.full_like(labels, ignore_class)
    assert (
        float(
            to_numpy(
                MaskedSparseCategoricalCrossentropy(ignore_class=ignore_class)(
                    every_token_padding, logits
                )
            )
        )
        == 0.0
    )


@pytest.mark.parametrize("bad_label", [VOCAB, -1])
def test_masked_accuracy_refuses_bool_labels_and_is_nan_out_of_range(bad_label):
    logits, labels = logits_and_labels()
    metric = MaskedAccuracy()
    with pytest.raises(TypeError, match=r"y_true.dtype=bool"):
        metric.update_state(labels.astype("bool"), logits)
    metric.update_state(labels.astype("float32"), logits)
    whole_floats = float(to_numpy(metric.result()))
    metric.reset_state()
    metric.update_state(labels, logits)
    assert float(to_numpy(metric.result())) == whole_floats
    assert np.isfinite(float(to_numpy(metric.result())))
    bad = labels.copy()
    bad[0, 1] = bad_label
    metric.update_state(bad, logits)
    assert np.isnan(float(to_numpy(metric.result())))
    metric.reset_state()
    # An ignored id outside the vocabulary is not counted, and not NaN.
    ignoring = MaskedAccuracy(ignore_class=-1)
    ignoring.update_state(np.where(labels == PAD, -1, labels), logits)
    assert np.isfinite(float(to_numpy(ignoring.result())))


def test_fit_on_a_label_outside_the_vocabulary_stops_with_terminate_on_nan():
    model = tiny_token_model()
    model.compile(
        optimizer="sgd",
        loss=MaskedSparseCategoricalCrossentropy(),
        metrics=[MaskedAccuracy()],
    )
    inputs = np.ones((4, 4), "int32")
    labels = np.ones((4, 4), "int32")
    labels[3, 2] = VOCAB  # Past the vocabulary.
    history = model.fit(
        inputs,
        labels,
        batch_size=2,
        epochs=3,
        verbose=0,
        callbacks=[keras.callbacks.TerminateOnNaN()],
    )
    assert np.isnan(history.history["loss"][-1])
    assert len(history.history["loss"]) == 1  # Stopped in the first epoch.
    # The good batch's update was applied; no weight became NaN.
    assert all(np.isfinite(to_numpy(w)).all() for w in model.weights)


# --- R-Drop on an odd batch --------------------------------------------------


def test_r_drop_refuses_an_odd_batch():
    logits, labels = logits_and_labels()
    odd_logits = np.concatenate([logits, logits[:1]])
    odd_labels = np.concatenate([labels, labels[:1]])
    with pytest.raises(ValueError, match=r"batch size 3") as info:
        RDropLoss(alpha=1.0)(odd_labels, odd_logits)
    assert "repeat_batches" in str(info.value)
    # Without the KL term nothing is split: an odd batch is a plain loss.
    assert np.isfinite(float(to_numpy(RDropLoss(alpha=0.0)(odd_labels, odd_logits))))


def test_r_drop_refuses_an_odd_batch_in_fit():
    model = tiny_token_model()
    model.compile(optimizer="sgd", loss=RDropLoss(alpha=1.0))
    data = np.ones((3, 4), "int32")
    with pytest.raises(ValueError, match=r"batch size 3"):
        model.fit(data, data, batch_size=3, epochs=1, verbose=0)


# --- float64 and integer dtypes ----------------------------------------------


@pytest.fixture
def float64_floatx():
    floatx = keras.config.floatx()
    keras.config.set_floatx("float64")
    yield
    keras.config.set_floatx(floatx)


# JAX without `jax_enable_x64` computes float64 in float32, and says so.
@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_float64_models_run(kind, float64_floatx):
    keras.utils.set_random_seed(0)
    model = make_model(kind, num_layers=1)  # Each layer compiles anew in float64.
    outputs = model(make_inputs(kind, batch_size=2, length=3))
    assert np.isfinite(to_numpy(outputs)).all()


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
@pytest.mark.parametrize("kind", ["logits", "r_drop"])
def test_float64_loss_gradient(kind, float64_floatx):
    # The written-out gradient once mixed float64 constants with float32
    # logits: TensorFlow's `Sub` refused them.
    logits, labels = logits_and_labels()
    loss = loss_cases()[kind]
    gradient = to_numpy(loss_gradient(loss, labels, logits))
    assert np.isfinite(gradient).all()
    assert np.abs(gradient).max() > 0


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
def test_float64_fit_with_the_masked_loss(float64_floatx):
    model = tiny_token_model()
    model.compile(optimizer="adam", loss=MaskedSparseCategoricalCrossentropy())
    data = np.ones((2, 4), "int32")
    history = model.fit(data, data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("kind", ZOO_MODELS)
def test_integer_dtype_is_refused_at_the_constructor(kind, dtype):
    with pytest.raises(
        ValueError,
        match=rf"`dtype` must be a floating dtype.*"
        rf"Received: dtype='{dtype}'",
    ):
        make_model(kind, dtype=dtype)


def test_integer_dtype_is_refused_by_multi_head_attention():
    with pytest.raises(ValueError, match=r"Received: dtype='int32'"):
        MultiHeadAttention(num_heads=2, key_dim=4, dtype="int32")
    # Floating and mixed policies (and quantized ones over floats) pass.
    for dtype in ("float64", "mixed_float16", "int8_from_float32"):
        MultiHeadAttention(num_heads=2, key_dim=4, dtype=dtype)


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
def test_float64_decoding_equals_float32_decoding(float64_floatx):
    # The decoding loop's constants once took floatx (float64, int64),
    # which TensorFlow would not add to its float32 log-probabilities.
    source = np.random.default_rng(0).integers(4, 20, size=(2, 5)).astype("int32")
    models = {}
    for floatx in ("float64", "float32"):
        keras.config.set_floatx(floatx)
        keras.utils.set_random_seed(0)
        # One layer a stack: the loop's constants are what is checked, and
        # each search compiles every layer once per dtype.
        models[floatx] = keras_attn.models.Transformer.from_preset(
            "transformer_tiny", vocabulary_size=20, num_layers=1
        )
        models[floatx](make_inputs("transformer", batch_size=1, length=2))
    # The same weights in both (float64 draws other random numbers).
    models["float32"].set_weights(
        [w.astype("float32") for w in models["float64"].get_weights()]
    )
    for search in (
        keras_attn.generation.greedy_search,
        keras_attn.generation.beam_search,
    ):
        tokens = {}
        for floatx, model in models.items():
            keras.config.set_floatx(floatx)
            result = search(model, source, start_id=2, end_id=3, max_length=8)
            tokens[floatx] = to_numpy(result["tokens"])
        np.testing.assert_array_equal(tokens["float64"], tokens["float32"])
