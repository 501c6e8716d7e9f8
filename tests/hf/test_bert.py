"""BERT checkpoints on `TransformerEncoderClassifier`, against `transformers`.

The tiny `BertForSequenceClassification` of `conftest.py` (hidden 32, 2
layers, two segments, three labels) is built once: its class logits, its
encoder under a fresh head (the `BertModel` inside it, saved alone), its
WordPiece tokenizer and the `TextClassifier` of the checkpoint are each
compared with `transformers`' on the same inputs.
"""

import json
import shutil

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from keras_attn.hf import bert  # noqa: E402
from keras_attn.models import TransformerEncoderClassifier  # noqa: E402
from keras_attn.text import TextClassifier  # noqa: E402

# [CLS] ... [SEP] (second segment) ... [SEP], then [PAD] (id 0); row 1 is
# row 0 cut before its padding.
TOKENS = np.array(
    [
        [2, 5, 6, 7, 3, 11, 12, 3, 0, 0, 0],
        [2, 10, 11, 12, 13, 14, 3, 15, 16, 17, 3],
    ],
    "int32",
)
SEGMENTS = np.array(
    [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]], "int32"
)
UNPADDED = 8  # Row 0's length.
TEXTS = [
    "The cat sat on the mat!",
    "A Café, a DOG; running in the park?",
    "it was not very good [MASK] 中文 xyz",
    "",
]


def hf_outputs(hf_model, tokens, segments):
    with torch.no_grad():
        return hf_model(
            input_ids=torch.tensor(tokens, dtype=torch.long),
            token_type_ids=torch.tensor(segments, dtype=torch.long),
            attention_mask=torch.tensor(tokens != 0, dtype=torch.long),
        )


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(scope="module")
def loaded(hf_bert_classifier):
    directory, _ = hf_bert_classifier
    return TransformerEncoderClassifier.from_preset(str(directory))


def test_logits_equal_transformers_with_padding_and_two_segments(
    hf_bert_classifier, loaded
):
    _, hf_model = hf_bert_classifier
    assert (loaded.num_classes, loaded.num_segments) == (3, 2)
    expected = hf_outputs(hf_model, TOKENS, SEGMENTS).logits.numpy()
    logits = to_numpy(loaded({"token_ids": TOKENS, "segment_ids": SEGMENTS}))
    # The check can fail: the logits are of order one, not of the tolerance.
    assert np.abs(expected).max() > 0.5
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)

    # The padded row gives the logits of the row alone.
    alone = loaded(
        {"token_ids": TOKENS[:1, :UNPADDED], "segment_ids": SEGMENTS[:1, :UNPADDED]}
    )
    np.testing.assert_allclose(logits[:1], to_numpy(alone), atol=1e-5, rtol=0)
    # The segments are read: other segment ids give other logits.
    swapped = loaded({"token_ids": TOKENS, "segment_ids": 1 - SEGMENTS})
    assert np.abs(to_numpy(swapped) - logits).max() > 1e-2


def test_a_bert_model_loads_its_encoder_under_a_fresh_head(
    hf_bert_classifier, tmp_path
):
    _, hf_model = hf_bert_classifier
    hf_model.bert.save_pretrained(tmp_path, safe_serialization=True)
    with pytest.raises(ValueError, match="num_classes=None"):
        TransformerEncoderClassifier.from_preset(str(tmp_path))
    model = TransformerEncoderClassifier.from_preset(str(tmp_path), num_classes=5)
    assert model.num_classes == 5
    expected = hf_outputs(hf_model.bert, TOKENS, SEGMENTS)
    features, mask = model.encode(TOKENS, segment_ids=SEGMENTS)
    mask = to_numpy(mask)
    # Padding positions' features are not compared: each model fills them
    # its own way.
    np.testing.assert_allclose(
        to_numpy(features)[mask],
        expected.last_hidden_state.numpy()[mask],
        atol=1e-4,
        rtol=0,
    )
    np.testing.assert_allclose(
        to_numpy(model.pooler(features[:, 0])),
        expected.pooler_output.numpy(),
        atol=1e-4,
        rtol=0,
    )
    # A classifier's head of another size is not the checkpoint's.
    directory, _ = hf_bert_classifier
    with pytest.raises(ValueError, match="num_classes=5"):
        TransformerEncoderClassifier.from_preset(str(directory), num_classes=5)
    # A TextClassifier needs a trained head.
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(directory / name, tmp_path / name)
    with pytest.raises(ValueError, match="no sequence classification head"):
        TextClassifier.from_preset(str(tmp_path))


@pytest.mark.parametrize(
    "field, value",
    [
        ("position_embedding_type", "relative_key"),
        ("hidden_act", "gelu_new"),
        ("is_decoder", True),
        ("pad_token_id", None),
    ],
)
def test_unmappable_fields_are_refused_by_name_and_value(
    hf_bert_classifier, tmp_path, field, value
):
    directory, _ = hf_bert_classifier
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, field: value}))
    with pytest.raises(ValueError, match="cannot be loaded exactly") as error:
        TransformerEncoderClassifier.from_preset(str(tmp_path), load_weights=False)
    assert f"{field}={value!r}" in str(error.value)


def test_tokenizer_ids_equal_transformers(hf_bert_classifier, tmp_path):
    directory, _ = hf_bert_classifier
    config = json.loads((directory / "config.json").read_text())
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    ids = {}
    for lowercase in (True, False):
        for name in ("vocab.txt", "tokenizer.json"):
            # Each file alone: vocab.txt (Hub repositories), tokenizer.json
            # (what transformers 5 saves).
            folder = tmp_path / f"{name}_{lowercase}"
            folder.mkdir()
            shutil.copy(directory / name, folder / name)
            (folder / "tokenizer_config.json").write_text(
                json.dumps({**settings, "do_lower_case": lowercase})
            )
            ours = bert.load_tokenizer(folder, config).encode(TEXTS)
            theirs = transformers.AutoTokenizer.from_pretrained(folder)(TEXTS)
            assert ours == theirs["input_ids"], (name, lowercase)
            ids[lowercase] = ours
    # `do_lower_case` is read: "The", "Café" and "DOG" are pieces only
    # lower-cased (and "Café" without its accent).
    assert ids[True] != ids[False]


def test_text_classifier_from_checkpoint_equals_transformers(hf_bert_classifier):
    directory, hf_model = hf_bert_classifier
    classifier = TextClassifier.from_preset(str(directory), sequence_length=12)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    batch = hf_tokenizer(
        TEXTS, padding="max_length", truncation=True, max_length=12, return_tensors="np"
    )
    np.testing.assert_array_equal(classifier.encode(TEXTS), batch["input_ids"])
    logits = hf_outputs(
        hf_model, batch["input_ids"], batch["token_type_ids"]
    ).logits.numpy()
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(
        classifier.predict_proba(TEXTS), expected, atol=1e-4, rtol=0
    )
    assert classifier.predict(TEXTS) == [
        hf_model.config.id2label[int(i)] for i in expected.argmax(-1)
    ]


def test_text_pairs_equal_transformers(hf_bert_classifier):
    """`[CLS] A [SEP] B [SEP]` with token types 0 then 1, cut as the fast
    tokenizer cuts pairs (`truncation="longest_first"`), padded."""
    directory, hf_model = hf_bert_classifier
    classifier = TextClassifier.from_preset(str(directory), sequence_length=12)
    pairs = ["A dog.", "The cat sat on the mat!", "", "it was good"]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    batch = hf_tokenizer(
        TEXTS,
        pairs,
        padding="max_length",
        truncation="longest_first",
        max_length=12,
        return_tensors="np",
    )
    ids, segments = classifier._encode(TEXTS, pairs)
    np.testing.assert_array_equal(ids, batch["input_ids"])
    np.testing.assert_array_equal(segments, batch["token_type_ids"])
    assert (batch["token_type_ids"] == 1).any()  # the second texts count
    logits = hf_outputs(
        hf_model, batch["input_ids"], batch["token_type_ids"]
    ).logits.numpy()
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(
        classifier.predict_proba(TEXTS, pairs), expected, atol=1e-4, rtol=0
    )
    assert classifier.predict(TEXTS, pairs=pairs) == [
        hf_model.config.id2label[int(i)] for i in expected.argmax(-1)
    ]
    with pytest.raises(ValueError, match="one text per text, 4. Received: 1 pairs"):
        classifier.predict(TEXTS, pairs=["A dog."])
    with pytest.raises(TypeError, match="pairs"):
        classifier.predict(TEXTS, pairs="A dog.")


def test_export_to_transformers_round_trips(hf_bert_classifier, tmp_path):
    """Loaded, exported, loaded by `transformers`: the same logits and ids."""
    import keras_attn.hf

    directory, hf_model = hf_bert_classifier
    classifier = TextClassifier.from_preset(str(directory), sequence_length=12)
    exported = keras_attn.hf.export_to_transformers(
        classifier.model, classifier.tokenizer, tmp_path / "export"
    )
    reloaded = transformers.BertForSequenceClassification.from_pretrained(
        exported, attn_implementation="eager"
    ).eval()
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    again = transformers.AutoTokenizer.from_pretrained(exported)
    assert again(TEXTS)["input_ids"] == theirs(TEXTS)["input_ids"]
    batch = theirs(
        TEXTS, padding="max_length", truncation=True, max_length=12, return_tensors="np"
    )
    segments = np.zeros_like(batch["input_ids"])
    segments[:, 6:] = 1  # both token types' embeddings
    expected = hf_outputs(hf_model, batch["input_ids"], segments).logits.numpy()
    got = hf_outputs(reloaded, batch["input_ids"], segments).logits.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # A model with an option BERT lacks is refused, the option named.
    pre_norm = TransformerEncoderClassifier(
        **{
            **bert.model_arguments(json.loads((directory / "config.json").read_text()), 3),
            "normalize_first": True,
        }
    )
    with pytest.raises(ValueError, match=r"Received: normalize_first=True"):
        keras_attn.hf.export_to_transformers(pre_norm, None, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
