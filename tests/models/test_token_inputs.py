"""Token-id inputs are checked at the model boundary, with named errors."""

import numpy as np
import pytest

from keras_attn import models

VOCABULARY_SIZE = 16
TOKENS = np.array([[2, 5, 6, 0], [2, 7, 8, 9]], "int32")


@pytest.fixture(scope="module")
def transformer():
    return models.Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE
    )


@pytest.fixture(scope="module", params=["lm", "classifier"])
def single_input_model(request):
    if request.param == "lm":
        return models.TransformerLM.from_preset(
            "lm_tiny", vocabulary_size=VOCABULARY_SIZE
        )
    return models.TransformerEncoderClassifier.from_preset(
        "encoder_classifier_tiny", vocabulary_size=VOCABULARY_SIZE, num_classes=2
    )


def pair(encoder_tokens=TOKENS, decoder_tokens=TOKENS):
    return {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}


@pytest.mark.parametrize(
    "inputs, error, message",
    [
        (
            pair(encoder_tokens=TOKENS + 20),
            ValueError,
            r"`encoder_tokens` holds token ids outside \[0, vocabulary_size=16\)\. "
            r"Received: ids from 20 to 29",
        ),
        (
            pair(decoder_tokens=TOKENS - 3),
            ValueError,
            r"`decoder_tokens` holds token ids outside .* from -3 to 6",
        ),
        (
            pair(encoder_tokens=TOKENS + 0.5),
            TypeError,
            r"`encoder_tokens` must hold integer token ids\. "
            r"Received: encoder_tokens with dtype=float64 and non-integer values",
        ),
        (
            pair(decoder_tokens=TOKENS[0]),
            ValueError,
            r"`decoder_tokens` must be a 2-D batch .* decoder_tokens.shape=\(4,\)",
        ),
        (
            pair(decoder_tokens=TOKENS[None]),
            ValueError,
            r"decoder_tokens.shape=\(1, 2, 4\)",
        ),
        (
            pair(decoder_tokens=np.concatenate([TOKENS, TOKENS])),
            ValueError,
            r"must have the same batch size\. Received: .*"
            r"decoder_tokens.shape=\(4, 4\).*encoder_tokens.shape=\(2, 4\)",
        ),
    ],
)
def test_transformer_rejects_bad_token_inputs(transformer, inputs, error, message):
    with pytest.raises(error, match=message):
        transformer(inputs)


def test_whole_number_float_ids_are_cast_like_keras_does(transformer):
    as_floats = pair(TOKENS.astype("float64"), TOKENS.astype("float32"))
    np.testing.assert_allclose(transformer(as_floats), transformer(pair()), atol=1e-6)


def test_transformer_accepts_ids_at_both_ends_of_the_vocabulary(transformer):
    edges = np.array([[0, VOCABULARY_SIZE - 1], [1, 2]], "int32")
    logits = transformer(pair(edges, edges))
    assert tuple(logits.shape) == (2, 2, VOCABULARY_SIZE)
    assert np.isfinite(np.asarray(logits)).all()


@pytest.mark.parametrize(
    "tokens, error, message",
    [
        (TOKENS + VOCABULARY_SIZE, ValueError, r"`token_ids` holds token ids outside"),
        (TOKENS + 0.25, TypeError, r"`token_ids` must hold integer token ids"),
        (TOKENS[0], ValueError, r"token_ids.shape=\(4,\)"),
    ],
)
def test_zoo_models_reject_bad_token_inputs(single_input_model, tokens, error, message):
    with pytest.raises(error, match=message):
        single_input_model(tokens)
