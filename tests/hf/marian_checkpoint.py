"""A Marian (OPUS-MT layout) checkpoint built here, never downloaded.

`build_marian_checkpoint` trains two tiny SentencePiece models (English for
`source.spm`, German for `target.spm`), writes `vocab.json` as OPUS-MT does
(`</s>` 0, `<unk>` 1, the pieces of both models, `<pad>` last), builds a
random `MarianMTModel` and saves model and tokenizer with
`save_pretrained`. Imported by `test_marian.py` and `test_export.py`.
"""

import json

import keras
import numpy as np
import pytest

ENGLISH = [
    "A dog runs in the park.",
    "The cat sleeps on the warm sofa.",
    "Two men play football on the green field.",
    "A woman reads a book under a tree.",
    "Children are swimming in the lake.",
    "The old man walks his dog every morning.",
]
GERMAN = [
    "Ein Hund rennt im Park.",
    "Die Katze schläft auf dem warmen Sofa.",
    "Zwei Männer spielen Fußball auf dem grünen Feld.",
    "Eine Frau liest ein Buch unter einem Baum.",
    "Kinder schwimmen im See.",
    "Der alte Mann führt jeden Morgen seinen Hund aus.",
]
# d_model 16, 2 + 2 layers, 2 heads, swish, scaled embeddings: OPUS-MT's
# options at a test's size.
TINY = dict(
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
    activation_function="swish",
    scale_embedding=True,
    dropout=0.1,
)
# opus-mt-en-de's config.json.
OPUS_MT_EN_DE = dict(
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_position_embeddings=512,
    activation_function="swish",
    scale_embedding=True,
    dropout=0.1,
)


def _train_spm(sentences, path, vocabulary_size):
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 4),
        model_prefix=str(path),
        vocab_size=vocabulary_size,
        model_type="unigram",
        character_coverage=1.0,
        unk_id=0,
        eos_id=1,
        bos_id=-1,
        pad_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return path.with_suffix(".model")


def _vocabulary(spm_paths):
    """OPUS-MT's vocab.json: `</s>` 0, `<unk>` 1, the pieces, `<pad>` last."""
    import sentencepiece

    vocabulary = {"</s>": 0, "<unk>": 1}
    for path in spm_paths:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
        for i in range(processor.get_piece_size()):
            vocabulary.setdefault(processor.id_to_piece(i), len(vocabulary))
    vocabulary["<pad>"] = len(vocabulary)
    return vocabulary


def build_marian_checkpoint(
    directory, shape=None, vocabulary_size=None, weight_std=0.4
):
    """Saves a random `MarianMTModel` and its tokenizer into `directory`.

    Args:
        directory: a `pathlib.Path`, created.
        shape: config fields. Defaults to `TINY`.
        vocabulary_size: `None` for the tokenizer's vocabulary (under 100
            ids), or a larger size (opus-mt-en-de's 58,101), the extra ids
            unused by the tokenizer.

    Returns:
        The `transformers` model, float32, in eval mode.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    directory.mkdir(parents=True, exist_ok=True)
    spm_dir = directory / "spm"
    spm_dir.mkdir()
    source = _train_spm(ENGLISH, spm_dir / "source", 48)
    target = _train_spm(GERMAN, spm_dir / "target", 48)
    vocabulary = _vocabulary([source, target])
    if vocabulary_size is not None:
        vocabulary.pop("<pad>")
        for i in range(len(vocabulary), vocabulary_size - 1):
            vocabulary[f"<unused{i}>"] = i
        vocabulary["<pad>"] = vocabulary_size - 1
    (spm_dir / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    size = len(vocabulary)
    config = transformers.MarianConfig(
        **(shape or TINY),
        vocab_size=size,
        pad_token_id=size - 1,
        decoder_start_token_id=size - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        # Large weights (a random post-norm model's greedy output then
        # varies), random biases, norm scales and logits bias: a wrong
        # mapping of any of them shows in the logits.
        for name, parameter in model.named_parameters():
            if "embed_positions" in name:
                continue
            if name.endswith("bias") or "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
            elif parameter.ndim == 2:
                parameter.normal_(0.0, weight_std)
        model.final_logits_bias.normal_(0.0, 0.1)
        # OPUS-MT's `<pad>` row is zeros: the decoder starts from a zero
        # embedding (CTranslate2's Marian converter relies on it).
        model.model.shared.weight[size - 1] = 0.0
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer = transformers.MarianTokenizer(
        str(source), str(target), str(spm_dir / "vocab.json")
    )
    tokenizer.save_pretrained(directory)
    return model


def marian_ids(tokenizer, texts):
    """`transformers.MarianTokenizer`'s ids of `texts` (with `</s>`)."""
    return [tokenizer(text).input_ids for text in texts]


def source_batch(hf_tokenizer, texts):
    """Right-padded Marian ids and attention mask of `texts`, as NumPy."""
    batch = hf_tokenizer(texts, padding=True, return_tensors="np")
    return batch["input_ids"].astype("int32"), batch["attention_mask"].astype("int32")


def ours_from_marian(ids, mask=None):
    """Marian ids -> our ids (plus one; padding 0 where `mask` is 0)."""
    ours = np.asarray(ids, "int32") + 1
    return ours if mask is None else np.where(mask == 1, ours, 0).astype("int32")


def hf_logits(hf_model, ids, mask, decoder_ids):
    """`transformers`' logits of a Marian model, as NumPy."""
    import torch

    with torch.no_grad():
        return hf_model(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            decoder_input_ids=torch.tensor(decoder_ids, dtype=torch.long),
        ).logits.numpy()


def assert_logits_equal_transformers(model, hf_model, ids, mask, decoder_ids):
    """Our logits (compiled: one program, not a compilation per op) equal
    `transformers`' on Marian ids; returns ours (id 0 is our padding)."""
    expected = hf_logits(hf_model, ids, mask, decoder_ids)
    logits = keras.ops.convert_to_numpy(
        model.predict_on_batch(
            {
                "encoder_tokens": ours_from_marian(ids, mask),
                "decoder_tokens": ours_from_marian(decoder_ids),
            }
        )
    )
    # The check can fail: the logits are of order one, not of the tolerance.
    assert np.abs(expected).max() > 0.5
    np.testing.assert_allclose(logits[..., 1:], expected, atol=1e-4, rtol=0)
    return logits


_CHECKPOINTS = {}


def tiny_marian_checkpoint(tmp_path_factory):
    """`(directory, transformers model)` of the tiny checkpoint, built once
    per session and shared by the test modules that import this one."""
    if "tiny" not in _CHECKPOINTS:
        directory = tmp_path_factory.mktemp("marian")
        _CHECKPOINTS["tiny"] = (directory, build_marian_checkpoint(directory))
    return _CHECKPOINTS["tiny"]
