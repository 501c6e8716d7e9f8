"""Marian (OPUS-MT) checkpoints on `Transformer`, against `transformers`.

One tiny checkpoint (`marian_checkpoint.py`) is built per module; one test
checks, on one loaded model: the logits equal `transformers`' (float32,
1e-4), 20 greedy tokens equal `generate(do_sample=False, num_beams=1)`,
the tokenizer's ids equal `transformers.MarianTokenizer`'s on 200 strings,
and `Translator.from_preset(directory)` translates as `transformers` does.
Our ids are Marian's plus one (`keras_attn.hf.marian`).
"""

import time

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from marian_checkpoint import (  # noqa: E402
    ENGLISH,
    GERMAN,
    OPUS_MT_EN_DE,
    assert_logits_equal_transformers,
    build_marian_checkpoint,
    hf_logits,
    ours_from_marian,
    source_batch,
    tiny_marian_checkpoint,
)

from keras_attn.hf import files, marian  # noqa: E402
from keras_attn.models import Transformer  # noqa: E402
from keras_attn.text import Translator  # noqa: E402

NEW_TOKENS = 20
SOURCES = ["A dog runs in the park.", "Kinder schwimmen."]


def tokenizer_strings():
    """200 strings: words of both languages, accents, emoji, CJK, empty,
    whitespace runs, language codes, special tokens written out."""
    rng = np.random.default_rng(0)
    words = " ".join(ENGLISH + GERMAN).split() + [
        "Café",
        "naïve",
        "😀",
        "日本語",
        "한국어",
        "ßüöä",
        "</s>",
        "<unk>",
        "<pad>",
        "\t",
        "   ",
        "Ω≈ç√",
    ]
    strings = ["", " ", "   ", ">>de<< Ein Hund.", "A</s>b", "<unk><pad>"]
    while len(strings) < 200:
        count = int(rng.integers(1, 8))
        strings.append(" ".join(rng.choice(words, size=count)))
    return strings


def hf_greedy(hf_model, ids, mask):
    """`generate`'s greedy ids in our layout: plus one, padding 0."""
    pad = hf_model.config.pad_token_id
    with torch.no_grad():
        tokens = hf_model.generate(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            do_sample=False,
            num_beams=1,
            max_new_tokens=NEW_TOKENS,
            # What our generator does: never <pad> (OPUS-MT's configs ban
            # it too), no forced </s> at the last step.
            bad_words_ids=[[pad]],
            forced_eos_token_id=None,
        ).numpy()[:, 1:]  # the start token left out
    ours = np.where(tokens == pad, 0, tokens + 1)
    return np.pad(ours, ((0, 0), (0, NEW_TOKENS - ours.shape[1])))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`(directory, transformers model, transformers tokenizer)`."""
    directory, hf_model = tiny_marian_checkpoint(tmp_path_factory)
    return directory, hf_model, transformers.MarianTokenizer.from_pretrained(directory)


def test_logits_greedy_tokenizer_and_translator_equal_transformers(checkpoint):
    directory, hf_model, hf_tokenizer = checkpoint
    # The checkpoint's directory, as `from_preset` reads it: model and
    # tokenizer (`Transformer.from_preset(directory)` loads the same model).
    translator = Translator.from_preset(
        str(directory), strategy="greedy", max_length=NEW_TOKENS
    )
    model, tokenizer = translator.model, translator.tokenizer
    assert model.vocabulary_size == hf_model.config.vocab_size + 1

    ids, mask = source_batch(hf_tokenizer, SOURCES)
    start = hf_model.config.decoder_start_token_id
    decoder_ids = np.array([[start, 5, 7, 9, 11, 3], [start, 4, 4, 8, 2, 6]])
    logits = assert_logits_equal_transformers(model, hf_model, ids, mask, decoder_ids)
    assert logits[..., 0].max() <= marian.PADDING_LOGIT / 2  # never padding

    # Greedy decoding (the Translator's compiled `SequenceGenerator`).
    expected_tokens = hf_greedy(hf_model, ids, mask)
    # A check that can fail: the random model does not repeat one token.
    assert len(np.unique(expected_tokens)) > 2
    tokens, _ = translator.translate_ids(SOURCES)
    np.testing.assert_array_equal(np.array(tokens), expected_tokens)

    strings = tokenizer_strings()
    ours = [row + [tokenizer.end_id] for row in tokenizer.tokenize(strings).to_list()]
    theirs = [[i + 1 for i in hf_tokenizer(s).input_ids] for s in strings]
    assert ours == theirs
    decoded = hf_tokenizer.batch_decode(
        np.where(expected_tokens == 0, 0, expected_tokens - 1),
        skip_special_tokens=True,
    )
    assert translator.translate(SOURCES) == decoded


def test_unsupported_config_and_tensors_are_refused(checkpoint):
    directory, _, _ = checkpoint
    config = files.read_config(directory)
    for field, value in (
        ("scale_embedding", False),
        ("share_encoder_decoder_embeddings", False),
        ("decoder_vocab_size", config["vocab_size"] + 1),
        ("activation_function", "gelu_new"),
        ("decoder_ffn_dim", 64),
        ("encoder_layerdrop", 0.1),
    ):
        with pytest.raises(ValueError, match=f"{field}={value!r}"):
            marian.model_arguments({**config, field: value})

    weights = files.read_weights(directory)
    name = "model.decoder.layers.1.fc2.weight"
    missing = {k: v for k, v in weights.items() if k != name}
    with pytest.raises(KeyError, match=name):
        marian.load_model(directory, config, missing)
    misshapen = {**weights, name: weights[name][:, :-1]}
    with pytest.raises(ValueError, match=name):
        marian.load_model(directory, config, misshapen)
    extra = {**weights, "model.encoder.layernorm_embedding.weight": weights[name]}
    with pytest.raises(ValueError, match="layernorm_embedding"):
        marian.load_model(directory, config, extra)


@pytest.mark.slow
# What it adds to the test above is the size (the loader's reading and
# mapping of 75 million parameters, NumPy work); the numerics on each
# backend are the test above's. Side by side it runs on torch only.
@pytest.mark.split_backend("torch")
def test_opus_mt_en_de_size_equals_transformers(tmp_path):
    """opus-mt-en-de's shapes (d 512, 6 + 6 layers, 8 heads, 58,101 ids),
    random weights: one forward pass compared, load time printed."""
    hf_model = build_marian_checkpoint(
        tmp_path, shape=OPUS_MT_EN_DE, vocabulary_size=58101, weight_std=0.05
    )
    began = time.perf_counter()
    model = Transformer.from_preset(str(tmp_path))
    print(f"\nopus-mt-en-de size: loaded in {time.perf_counter() - began:.1f} s")
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path)
    ids, mask = source_batch(hf_tokenizer, SOURCES)
    start = hf_model.config.decoder_start_token_id
    decoder_ids = np.array([[start, 5, 58000, 9], [start, 4, 4, 30000]])
    expected = hf_logits(hf_model, ids, mask, decoder_ids)
    logits = keras.ops.convert_to_numpy(
        model.predict_on_batch(
            {
                "encoder_tokens": ours_from_marian(ids, mask),
                "decoder_tokens": ours_from_marian(decoder_ids),
            }
        )
    )
    assert np.abs(expected).max() > 0.5
    print(f"max |logits difference|: {np.abs(logits[..., 1:] - expected).max():.2e}")
    np.testing.assert_allclose(logits[..., 1:], expected, atol=1e-4, rtol=0)


def test_a_marian_translator_saves_to_a_preset_and_loads_back(checkpoint, tmp_path):
    directory, _, _ = checkpoint
    translator = Translator.from_preset(
        str(directory), strategy="greedy", max_length=NEW_TOKENS
    )
    preset = tmp_path / "preset"
    translator.model.save_to_preset(preset, tokenizer=translator.tokenizer)
    assert (preset / "assets" / "tokenizer" / "source.spm").is_file()
    loaded = Translator.from_preset(preset, strategy="greedy", max_length=NEW_TOKENS)
    assert type(loaded.tokenizer) is type(translator.tokenizer)
    strings = tokenizer_strings()
    assert loaded.tokenizer.tokenize(strings).to_list() == (
        translator.tokenizer.tokenize(strings).to_list()
    )
    assert loaded.translate(SOURCES) == translator.translate(SOURCES)
    # A tokenizer file that leads out of the preset is refused.
    (preset / "assets" / "tokenizer" / "vocab.json").unlink()
    (preset / "assets" / "tokenizer" / "vocab.json").symlink_to(
        directory / "vocab.json"
    )
    with pytest.raises(ValueError, match="vocab.json"):
        Translator.from_preset(preset)
