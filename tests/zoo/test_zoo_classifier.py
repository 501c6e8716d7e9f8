"""TransformerEncoderClassifier: serialization, padding invariance, pooling."""

import json

import keras
import numpy as np
import pytest

from keras_attn.models import TransformerEncoderClassifier

VOCABULARY_SIZE, NUM_CLASSES, PAD = 40, 3, 0
# Row 0 is 4 tokens long, row 1 is 6; position 0 holds the [CLS] id 2.
TOKENS = np.array([[2, 5, 6, 7, 0, 0], [2, 8, 9, 10, 11, 12]], "int32")


def make_model(**overrides):
    keras.utils.set_random_seed(0)
    return TransformerEncoderClassifier.from_preset(
        "encoder_classifier_tiny",
        vocabulary_size=VOCABULARY_SIZE,
        num_classes=NUM_CLASSES,
        **overrides,
    )


VARIANTS = {
    "cls_post_norm_learned": {},
    "mean_pre_norm_sinusoidal": {
        "pooling": "mean",
        "normalize_first": True,
        "position": "sinusoidal",
    },
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request):
    return make_model(**VARIANTS[request.param])


def test_output_shape_and_config_round_trip(model):
    logits = np.asarray(model(TOKENS))
    assert logits.shape == (2, NUM_CLASSES)
    config = model.get_config()
    json.dumps(config)
    revived = TransformerEncoderClassifier.from_config(config)
    assert revived.get_config() == config
    assert revived.count_params() == model.count_params()


def test_keras_file_round_trip(model, tmp_path):
    path = tmp_path / "classifier.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, TransformerEncoderClassifier)
    np.testing.assert_allclose(loaded(TOKENS), model(TOKENS), atol=1e-6)
    np.testing.assert_allclose(loaded.encoder(TOKENS), model.encoder(TOKENS), atol=1e-6)


def test_appended_padding_changes_nothing(model):
    longer = np.concatenate([TOKENS, np.zeros((2, 5), "int32")], axis=1)
    np.testing.assert_allclose(model(longer), model(TOKENS), atol=1e-5)


def test_a_row_alone_equals_the_row_in_a_padded_batch(model):
    alone = np.asarray(model(TOKENS[:1, :4]))
    in_batch = np.asarray(model(TOKENS))[:1]
    np.testing.assert_allclose(in_batch, alone, atol=1e-5)


def test_features_of_real_positions_ignore_padding(model):
    features, mask = (np.asarray(t) for t in model.encode(TOKENS))
    alone, _ = model.encode(TOKENS[:1, :4])
    np.testing.assert_allclose(features[0, :4], alone[0], atol=1e-5)
    np.testing.assert_array_equal(mask, TOKENS != PAD)
    assert np.all(np.isfinite(features))  # fully masked rows give no NaN


def test_logits_are_the_head_applied_to_the_pooled_features(model):
    features, mask = (np.asarray(t) for t in model.encode(TOKENS))
    if model.pooling == "cls":
        pooled = features[:, 0]
    else:
        pooled = (features * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    kernel, bias = model.get_layer("logits").get_weights()
    np.testing.assert_allclose(model(TOKENS), pooled @ kernel + bias, atol=1e-5)


def test_encoder_model_shares_the_weights(model):
    encoder = model.encoder
    assert encoder.count_params() == model.count_params() - (
        model.hidden_dim * NUM_CLASSES + NUM_CLASSES
    )
    np.testing.assert_allclose(encoder(TOKENS), model.encode(TOKENS)[0], atol=1e-6)
    assert tuple(encoder(TOKENS).shape) == (2, 6, model.hidden_dim)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_classes": 0}, "num_classes=0"),
        ({"vocabulary_size": -3}, "vocabulary_size=-3"),
        ({"pooling": "max"}, "pooling='max'"),
        ({"hidden_dim": 30, "num_heads": 4}, "hidden_dim=30, num_heads=4"),
        ({"pad_id": 40}, "pad_id=40"),
        ({"dropout": 1.5}, "dropout=1.5"),
    ],
)
def test_bad_arguments_name_argument_and_value(overrides, message):
    arguments = dict(vocabulary_size=VOCABULARY_SIZE, num_classes=NUM_CLASSES)
    arguments.update(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    arguments.update(overrides)
    with pytest.raises(ValueError, match=message):
        TransformerEncoderClassifier(**arguments)


def test_from_preset_needs_a_vocabulary_and_names_presets():
    with pytest.raises(ValueError, match="vocabulary_size=None"):
        TransformerEncoderClassifier.from_preset(
            "encoder_classifier_tiny", num_classes=2
        )
    with pytest.raises(ValueError, match="bert_base"):
        TransformerEncoderClassifier.from_preset("bert_large", num_classes=2)


# BERT's options: segment embeddings (a second input), the pooler, unscaled
# token embeddings.
BERT_OPTIONS = dict(num_segments=2, pooled_dense=True, scale_embeddings=False)
SEGMENTS = np.array([[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]], "int32")


def test_bert_options_round_trip_config_and_keras_file(tmp_path):
    model = make_model(**BERT_OPTIONS)
    inputs = {"token_ids": TOKENS, "segment_ids": SEGMENTS}
    logits = np.asarray(model(inputs))
    config = model.get_config()
    json.dumps(config)
    assert {name: config[name] for name in BERT_OPTIONS} == BERT_OPTIONS
    revived = TransformerEncoderClassifier.from_config(config)
    assert revived.get_config() == config
    assert revived.count_params() == model.count_params()
    path = tmp_path / "bert_like.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded(inputs), logits, atol=1e-6)
    # The pooler and the segments are read.
    features, _ = model.encode(TOKENS, segment_ids=SEGMENTS)
    kernel, bias = model.get_layer("logits").get_weights()
    pooled = np.asarray(model.pooler(features[:, 0]))
    np.testing.assert_allclose(logits, pooled @ kernel + bias, atol=1e-5)
    other = np.asarray(model({"token_ids": TOKENS, "segment_ids": 1 - SEGMENTS}))
    assert np.abs(other - logits).max() > 1e-3
    # Row 0 alone (4 tokens) equals row 0 of the padded batch.
    alone = model({"token_ids": TOKENS[:1, :4], "segment_ids": SEGMENTS[:1, :4]})
    np.testing.assert_allclose(logits[:1], alone, atol=1e-5)


def test_segment_ids_are_checked_by_name():
    model = make_model(num_segments=2)
    with pytest.raises(ValueError, match=r"outside \[0, num_segments=2\)"):
        model({"token_ids": TOKENS, "segment_ids": SEGMENTS + 1})
    with pytest.raises(ValueError, match=r"segment_ids.shape=\(2, 5\)"):
        model({"token_ids": TOKENS, "segment_ids": SEGMENTS[:, :5]})
    with pytest.raises(TypeError, match="segment_ids"):
        model(TOKENS)
    with pytest.raises(ValueError, match="num_segments=0"):
        make_model(num_segments=0)
