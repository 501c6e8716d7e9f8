"""`keras_attn.hf.export_to_transformers`: our models as Marian checkpoints.

A model loaded from a Marian checkpoint goes back out with the same
tensors, loads in `transformers` with the same logits and converts with
CTranslate2's `TransformersConverter` into a translator whose greedy
output is ours token for token. A model of ours (the `transformer_tiny`
architecture preset with Marian's layer-norm epsilon) and its
`SubwordTokenizer` export to a checkpoint that `transformers` loads with
the same logits and the same token ids.
"""

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from marian_checkpoint import (  # noqa: E402
    ENGLISH,
    GERMAN,
    assert_logits_equal_transformers,
    hf_logits,
    source_batch,
    tiny_marian_checkpoint,
)

from keras_attn.hf import export_to_transformers, files  # noqa: E402
from keras_attn.models import Transformer  # noqa: E402
from keras_attn.text import SubwordTokenizer, Translator  # noqa: E402

NEW_TOKENS = 20
SOURCES = ["A dog runs in the park.", "Two men play football.", "Kinder schwimmen."]


def until_end(row, end_id):
    return row[: row.index(end_id)] if end_id in row else row


def test_marian_export_round_trip_and_ctranslate2(tmp_path, tmp_path_factory):
    original, _ = tiny_marian_checkpoint(tmp_path_factory)
    translator = Translator.from_preset(
        str(original), strategy="greedy", max_length=NEW_TOKENS
    )
    model, tokenizer = translator.model, translator.tokenizer
    exported = export_to_transformers(model, tokenizer, tmp_path / "exported")

    # The same tensors (the permutation and the id shift undone exactly).
    before, after = files.read_weights(original), files.read_weights(exported)
    assert sorted(before) == sorted(after)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)

    hf_model = transformers.MarianMTModel.from_pretrained(exported).eval()
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(exported)
    ids, mask = source_batch(hf_tokenizer, SOURCES)
    start = hf_model.config.decoder_start_token_id
    decoder_ids = np.array([[start, 5, 7, 9], [start, 4, 4, 8], [start, 3, 2, 1]])
    assert_logits_equal_transformers(model, hf_model, ids, mask, decoder_ids)

    ctranslate2 = pytest.importorskip("ctranslate2")
    ctranslate2.converters.TransformersConverter(str(exported)).convert(
        str(tmp_path / "ctranslate2")
    )
    engine = ctranslate2.Translator(str(tmp_path / "ctranslate2"), device="cpu")
    source_tokens = [
        hf_tokenizer.convert_ids_to_tokens(hf_tokenizer(s).input_ids) for s in SOURCES
    ]
    results = engine.translate_batch(
        source_tokens,
        beam_size=1,
        max_decoding_length=NEW_TOKENS,
        min_decoding_length=0,  # as ours (its default, 1, bans </s> first)
    )
    theirs = [
        [i + 1 for i in hf_tokenizer.convert_tokens_to_ids(r.hypotheses[0])]
        for r in results
    ]
    ours = [
        until_end(row, tokenizer.end_id) for row in translator.translate_ids(SOURCES)[0]
    ]
    # A check that can fail: more than one distinct token was generated.
    assert len({i for row in ours for i in row}) > 2
    assert theirs == ours


def test_preset_export_loads_in_transformers(tmp_path):
    tokenizer = SubwordTokenizer.train(ENGLISH + GERMAN, vocabulary_size=60)
    # `transformer_tiny` is the paper's post-norm model with sinusoids and
    # tied embeddings; Marian's layer norms have epsilon 1e-5.
    model = Transformer.from_preset(
        "transformer_tiny",
        vocabulary_size=tokenizer.vocabulary_size,
        layer_norm_epsilon=1e-5,
    )
    exported = export_to_transformers(model, tokenizer, tmp_path / "exported")
    hf_model = transformers.MarianMTModel.from_pretrained(exported).eval()
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(exported)

    ids, mask = source_batch(hf_tokenizer, SOURCES)
    ours = [row + [tokenizer.end_id] for row in tokenizer.tokenize(SOURCES).to_list()]
    assert [list(row[m == 1]) for row, m in zip(ids, mask)] == ours
    decoder_ids = np.array([[tokenizer.start_id, 5, 7, 9]] * len(SOURCES))
    expected = hf_logits(hf_model, ids, mask, decoder_ids)
    logits = keras.ops.convert_to_numpy(
        model.predict_on_batch({"encoder_tokens": ids, "decoder_tokens": decoder_ids})
    )
    assert np.abs(expected).max() > 0.5
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)

    # What Marian cannot express is refused, named.
    for option, value in (
        ("layer_norm_epsilon", 1e-6),
        ("normalize_first", True),
        ("scale_embeddings", False),
        ("logits_scale", 0.5),
    ):
        other = Transformer(
            vocabulary_size=20,
            num_layers=1,
            hidden_dim=8,
            num_heads=2,
            intermediate_dim=16,
            **{"layer_norm_epsilon": 1e-5, option: value},
        )
        with pytest.raises(ValueError, match=f"{option}={value!r}"):
            export_to_transformers(other, None, tmp_path / option)
