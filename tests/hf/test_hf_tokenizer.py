"""`HFTokenizer` gives the ids `transformers`' tokenizer gives, special tokens included.

Tiny tokenizers are trained here: a byte-level BPE (`tokenizers`, as Qwen2
and Llama 3 have) with and without a BOS-adding post-processor, and a
SentencePiece BPE with byte fallback (as Llama 2 and Mistral have).
"""

import io
import os

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
sentencepiece = pytest.importorskip("sentencepiece")

from keras_attn.hf.tokenizer import HFTokenizer  # noqa: E402

CORPUS = [
    "Hello world, this is a tiny corpus.",
    "Café naïve déjà vu, façade.",
    "日本語のテキストと中文。",
    "emoji 🙂 party 🎉 ok",
    "Numbers 123 and   spaces\tand\nnewlines",
] * 20
PIECES = [
    "",
    "Hello",
    " world",
    "  ",
    "Café",
    "déjà",
    "日本語",
    "中文",
    "🙂",
    "🎉",
    "\t",
    "\n\n",
    "x" * 7,
    "Ω≈ç√",
    "123",
    "   spaced   ",
    "ü",
    "a b",
]


def strings(count=200):
    """`count` strings built from `PIECES`: the empty one, whitespace runs,
    accents, emoji and CJK, alone and mixed."""
    rng = np.random.default_rng(0)
    texts = ["", " ", "   ", "\n", *PIECES]
    while len(texts) < count:
        texts.append("".join(rng.choice(PIECES, size=rng.integers(1, 5))))
    return texts


def byte_level_bpe(directory, start_token=None):
    """A byte-level BPE `tokenizer.json` (+ config) saved by `transformers`."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|begin_of_text|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    if start_token:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{start_token} $A",
            special_tokens=[(start_token, tokenizer.token_to_id(start_token))],
        )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token=start_token
    )
    fast.save_pretrained(directory)


def sentencepiece_bpe(directory):
    """A Llama 2 style `tokenizer.model`: unk 0, bos 1, eos 2, byte fallback,
    whitespace kept."""
    writer = io.BytesIO()
    with open(os.devnull, "w") as log:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(CORPUS),
            model_writer=writer,
            vocab_size=330,
            model_type="bpe",
            byte_fallback=True,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            character_coverage=1.0,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            logstream=log,
        )
    directory.mkdir()
    (directory / "tokenizer.model").write_bytes(writer.getvalue())


@pytest.mark.parametrize(
    "start_token", [None, "<|begin_of_text|>"], ids=["qwen2", "llama3"]
)
def test_byte_level_bpe_ids_equal_transformers(tmp_path, start_token):
    byte_level_bpe(tmp_path, start_token)
    ours = HFTokenizer.from_directory(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = strings()
    assert ours.encode(texts) == theirs(texts)["input_ids"]
    assert ours.start_id == theirs.bos_token_id
    assert ours.end_id == theirs.eos_token_id == 0
    assert ours.decode(ours.encode(texts)) == texts  # byte-level: lossless


def test_sentencepiece_ids_equal_transformers(tmp_path):
    sentencepiece_bpe(tmp_path / "spm")
    # `transformers` converts the SentencePiece model into a tokenizer.json.
    theirs = transformers.LlamaTokenizer.from_pretrained(
        tmp_path / "spm", add_bos_token=True
    )
    theirs.save_pretrained(tmp_path / "converted")
    texts = strings()
    expected = theirs(texts)["input_ids"]

    from_json = HFTokenizer.from_directory(tmp_path / "converted")
    assert from_json.encode(texts) == expected
    assert (from_json.start_id, from_json.end_id) == (1, 2)

    # tokenizer.model alone, run by sentencepiece: the same ids, except
    # where a text starts with a space (sentencepiece adds its dummy prefix
    # "▁" there too; transformers' converted tokenizer does not).
    from_model = HFTokenizer.from_directory(tmp_path / "spm")
    assert (from_model.start_id, from_model.end_id) == (1, 2)
    received = from_model.encode(texts)
    differ = [text for text, a, b in zip(texts, received, expected) if a != b]
    assert differ and all(text[:1].isspace() for text in differ), differ
