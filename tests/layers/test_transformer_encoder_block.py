"""`TransformerEncoderBlock`: layer contract, keras-hub's `TransformerEncoder`
with copied weights, padding invariance, errors."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import AttentionSettings, TransformerEncoderBlock

BATCH, LENGTH, DIM, HEADS, FF = 2, 5, 8, 2, 16
PADDING_MASK = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize("normalize_first", [False, True])
def test_layer_contract(normalize_first):
    run_layer_test(
        TransformerEncoderBlock,
        dict(
            num_heads=HEADS,
            intermediate_dim=FF,
            dropout=0.1,
            normalize_first=normalize_first,
        ),
        {"inputs": normal(BATCH, LENGTH, DIM), "padding_mask": PADDING_MASK},
        expected_output_shape=(BATCH, LENGTH, DIM),
        expected_num_trainable_weights=16,
        run_mixed_precision=not normalize_first,
        run_fit=not normalize_first,
    )


def test_layer_contract_causal_explicit_attention():
    run_layer_test(
        TransformerEncoderBlock,
        dict(
            num_heads=HEADS,
            intermediate_dim=FF,
            attention=dict(dropout=0.1, flash_attention=False),
        ),
        normal(BATCH, LENGTH, DIM),
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(BATCH, LENGTH, DIM),
        expected_num_trainable_weights=16,
        run_mixed_precision=False,
    )


# keras-hub's sub-layer names for ours (kernels/biases/gammas/betas follow).
KERAS_HUB_NAMES = {
    "self_attention": "self_attention_layer",
    "self_attention_norm": "self_attention_layer_norm",
    "feed_forward/intermediate_dense": "feedforward_intermediate_dense",
    "feed_forward/output_dense": "feedforward_output_dense",
    "feed_forward_norm": "feedforward_layer_norm",
}


def keras_hub_name(path):
    """`<block>/feed_forward/output_dense/kernel` -> keras-hub's path tail."""
    inner = path.split("/", 1)[1]
    for ours in sorted(KERAS_HUB_NAMES, key=len, reverse=True):
        if inner.startswith(ours + "/"):
            return KERAS_HUB_NAMES[ours] + inner[len(ours) :]
    raise KeyError(path)


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("flash_attention", [None, False])
def test_matches_keras_hub_transformer_encoder(normalize_first, flash_attention):
    keras_hub = pytest.importorskip("keras_hub")
    theirs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=FF,
        num_heads=HEADS,
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        normalize_first=normalize_first,
    )
    ours = TransformerEncoderBlock(
        num_heads=HEADS,
        intermediate_dim=FF,
        layer_norm_epsilon=1e-6,
        normalize_first=normalize_first,
        attention=AttentionSettings(flash_attention=flash_attention),
    )
    x = normal(BATCH, LENGTH, DIM)
    theirs(x)
    ours(x)
    rng = np.random.default_rng(1)
    for weight in theirs.weights:  # Random biases and norms too.
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
    by_name = {w.path.split("/", 1)[1]: w for w in theirs.weights}
    assert len(by_name) == len(ours.weights)
    for weight in ours.weights:
        weight.assign(by_name[keras_hub_name(weight.path)])

    expected = np.asarray(theirs(x, padding_mask=PADDING_MASK))
    output = ops.convert_to_numpy(ours(x, padding_mask=PADDING_MASK))
    np.testing.assert_allclose(output, expected, atol=1e-5)
    # And without a mask, where every row differs from the masked run.
    expected = np.asarray(theirs(x))
    np.testing.assert_allclose(ops.convert_to_numpy(ours(x)), expected, atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_padding_content_does_not_leak(normalize_first):
    block = TransformerEncoderBlock(
        num_heads=HEADS, intermediate_dim=FF, normalize_first=normalize_first
    )
    x = normal(BATCH, LENGTH, DIM)
    changed = x.copy()
    changed[~PADDING_MASK] = normal(int((~PADDING_MASK).sum()), DIM, seed=9)
    out = ops.convert_to_numpy(block(x, padding_mask=PADDING_MASK))
    out_changed = ops.convert_to_numpy(block(changed, padding_mask=PADDING_MASK))
    np.testing.assert_allclose(out[PADDING_MASK], out_changed[PADDING_MASK], atol=1e-6)
    # Without the mask the padding does leak: the check above can fail.
    leaky = ops.convert_to_numpy(block(changed))
    assert np.abs(leaky[PADDING_MASK] - out[PADDING_MASK]).max() > 1e-3


def test_keras_mask_is_the_padding_mask():
    ids = np.where(PADDING_MASK, 3, 0).astype("int32")
    embedded = keras.layers.Embedding(5, DIM, mask_zero=True)(ids)
    block = TransformerEncoderBlock(num_heads=HEADS, intermediate_dim=FF)
    from_keras_mask = ops.convert_to_numpy(block(embedded))
    plain = ops.convert_to_tensor(ops.convert_to_numpy(embedded))
    explicit = ops.convert_to_numpy(block(plain, padding_mask=PADDING_MASK))
    np.testing.assert_allclose(from_keras_mask, explicit, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_heads=0), ValueError, "num_heads=0"),
        (dict(intermediate_dim=-1), ValueError, "intermediate_dim=-1"),
        (dict(dropout=1.0), ValueError, "dropout=1.0"),
        (dict(dropout=-0.1), ValueError, "dropout=-0.1"),
        (dict(attention=dict(dropout=1.5)), ValueError, "attention_dropout=1.5"),
        (dict(dropout="0.1"), TypeError, "dropout='0.1'"),
        (dict(layer_norm_epsilon=0.0), ValueError, "layer_norm_epsilon=0.0"),
    ],
)
def test_invalid_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        TransformerEncoderBlock(**(dict(num_heads=HEADS, intermediate_dim=FF) | kwargs))


def test_hidden_dim_not_divisible_by_num_heads():
    block = TransformerEncoderBlock(num_heads=3, intermediate_dim=FF)
    with pytest.raises(ValueError, match=r"hidden_dim=8, num_heads=3"):
        block(normal(BATCH, LENGTH, DIM))
