"""Tiny instances of every zoo model with inputs, shared by feature tests."""

import numpy as np
from keras import ops

from keras_attn.models import (
    Transformer,
    TransformerEncoderClassifier,
    TransformerLM,
    VisionTransformer,
)

VOCABULARY_SIZE = 20
ZOO_MODELS = ("transformer", "lm", "classifier", "vit")
# `ZOO_MODELS` in the order for a `split_cases` test, which deals the i-th
# case to the i-th of jax, tensorflow, torch in turn when they run side by
# side: the transformer, the costliest to build and compile, to torch.
SPLIT_ZOO_MODELS = ("lm", "vit", "transformer", "classifier")


def make_model(kind, **overrides):
    """A tiny `kind` model (a key of `ZOO_MODELS`)."""
    if kind == "transformer":
        return Transformer.from_preset(
            "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, **overrides
        )
    if kind == "lm":
        return TransformerLM.from_preset(
            "lm_tiny", vocabulary_size=VOCABULARY_SIZE, **overrides
        )
    if kind == "classifier":
        return TransformerEncoderClassifier.from_preset(
            "encoder_classifier_tiny",
            vocabulary_size=VOCABULARY_SIZE,
            num_classes=3,
            **overrides,
        )
    return VisionTransformer.from_preset("vit_tiny", num_classes=3, **overrides)


def make_inputs(kind, batch_size=4, length=6, seed=0):
    """Inputs for `kind`: token ids (no padding) or images."""
    rng = np.random.default_rng(seed)

    def tokens(size):
        return rng.integers(1, VOCABULARY_SIZE, size=(batch_size, size)).astype("int32")

    if kind == "transformer":
        return {"encoder_tokens": tokens(length + 1), "decoder_tokens": tokens(length)}
    if kind == "vit":
        return rng.normal(size=(batch_size, 8, 8, 1)).astype("float32")
    return tokens(length)


def copy_task(kind, batch_size=32, seed=0):
    """`(inputs, targets)` of a task a tiny model learns in a few dozen steps.

    Sequence models copy their input (the LM predicts the token itself,
    shifted by one position: `targets[t] = inputs[t + 1]` of a sequence of
    repeated pairs); classifiers and ViT predict the first token / the sign
    of the image's mean, three classes.
    """
    rng = np.random.default_rng(seed)
    inputs = make_inputs(kind, batch_size=batch_size, seed=seed)
    if kind == "transformer":
        source = inputs["encoder_tokens"][:, :6]
        decoder = np.concatenate([np.ones((batch_size, 1), "int32"), source[:, :-1]], 1)
        return {"encoder_tokens": source, "decoder_tokens": decoder}, source
    if kind == "lm":
        half = rng.integers(1, VOCABULARY_SIZE, size=(batch_size, 4)).astype("int32")
        tokens = np.concatenate([half, half], axis=1)
        return tokens[:, :-1], tokens[:, 1:]
    if kind == "classifier":
        return inputs, (inputs[:, 0] % 3).astype("int32")
    labels = (np.mean(inputs, axis=(1, 2, 3)) > 0).astype("int32")
    return inputs, labels


def to_numpy(x):
    """`x` as a float32 NumPy array (bfloat16 and float16 included)."""
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def decode_in_steps(model, tokens, cache, prefill=3):
    """Logits of a prefill of `prefill` tokens, then one token per step."""
    logits, cache = model.decode_step(tokens[:, :prefill], cache, 0)
    steps = [to_numpy(logits)]
    for index in range(prefill, tokens.shape[1]):
        logits, cache = model.decode_step(tokens[:, index : index + 1], cache, index)
        steps.append(to_numpy(logits))
    return np.concatenate(steps, axis=1)
