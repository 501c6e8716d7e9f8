"""T5 checkpoints (`T5ForConditionalGeneration`) on `Transformer`, against
`transformers`.

Two tiny random checkpoints are built per module: v1.0 (ReLU, the output
projection tied to the shared embedding, reading `d_model ** -0.5` times
the decoder's output; its config.json as transformers writes it) and
v1.1 (gated-GELU, an `lm_head` of its own; its config.json as the Hub's
t5-v1_1 checkpoints hold it, `tie_word_embeddings: false`), and v1.1
with heads of their own size (`d_kv` 8 for 6 heads in `d_model` 32, as
FLAN-T5 small's 64 for 6 in 512: `attention={"head_dim": 8}`). The reference
is the model `transformers` reads back from each directory. On one loaded
model per version: the logits equal `transformers`' (float32, 1e-4) on a
padded source batch, and 20 greedy tokens of our generation API
(`greedy_search`, with the key/value cache) equal
`generate(do_sample=False, num_beams=1)`. Our ids are T5's plus one
(`keras_attn.hf.t5`).
"""

import json
import re
import shutil

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import marian_checkpoint  # noqa: E402 (tests/hf, beside this file)

from keras_attn.generation import greedy_search  # noqa: E402
from keras_attn.hf import files, t5  # noqa: E402
from keras_attn.models import Transformer  # noqa: E402
from keras_attn.text import Translator  # noqa: E402

NEW_TOKENS = 20
TINY = dict(
    vocab_size=100,
    d_model=32,
    d_kv=8,
    num_heads=4,
    num_layers=2,
    d_ff=48,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    decoder_start_token_id=0,
    # Weights large enough for logits of order one, and for a greedy
    # output that does not repeat one token: a wrong mapping shows.
    initializer_factor=2.0,
)
VERSIONS = {
    "v1.0": dict(feed_forward_proj="relu"),
    "v1.1": dict(feed_forward_proj="gated-gelu"),
    # `d_kv * num_heads` = 48, not `d_model` = 32 (FLAN-T5 small's layout).
    "v1.1-d_kv": dict(feed_forward_proj="gated-gelu", num_heads=6, d_kv=8),
}
# T5 ids (pad 0, </s> 1): a right-padded source batch of lengths 5 and 9,
# and teacher-forced decoder inputs starting with T5's start id, 0.
SOURCE = np.array([[5, 17, 33, 8, 1, 0, 0, 0, 0], [9, 4, 88, 23, 64, 2, 41, 57, 1]])
SOURCE_MASK = (np.arange(9)[None] < np.array([[5], [9]])).astype("int64")
DECODER = np.array([[0, 5, 7, 9, 11, 3], [0, 4, 4, 8, 2, 6]])
# The Marian tests' sentences (the first five).
ENGLISH = marian_checkpoint.ENGLISH[:5]
PREFIX = "translate English to German: "
# T5's sentinel tokens, added to the SentencePiece model's pieces.
EXTRA_IDS = 8


def build_t5_tokenizer(directory):
    """A tiny SentencePiece model with T5's special ids (<pad> 0, </s> 1,
    <unk> 2) and sentinels, saved by `transformers` as T5's tokenizer."""
    import sentencepiece

    spm_dir = directory / "spm"
    spm_dir.mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([PREFIX + text for text in ENGLISH] * 4),
        model_prefix=str(spm_dir / "spiece"),
        vocab_size=56,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    (spm_dir / "spiece.vocab").unlink()
    (spm_dir / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": EXTRA_IDS})
    )
    transformers.AutoTokenizer.from_pretrained(spm_dir).save_pretrained(directory)


def build_t5_checkpoint(directory, version):
    """Saves a random `T5ForConditionalGeneration`; returns the model
    `transformers` reads back from `directory` (float32, eval mode)."""
    config = transformers.T5Config(**{**TINY, **VERSIONS[version]})
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        # Norm scales away from one: the mapping of each is exercised.
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(directory, safe_serialization=True)
    build_t5_tokenizer(directory)
    if version != "v1.0":
        # transformers 5 ties `lm_head` to `shared` when it builds a T5; a
        # v1.1 checkpoint holds its own, and says so as the Hub's do.
        from safetensors.numpy import load_file, save_file

        path = directory / "model.safetensors"
        tensors = load_file(path)
        rng = np.random.default_rng(1)
        tensors["lm_head.weight"] = rng.normal(
            0.0, TINY["d_model"] ** -0.5, tensors["shared.weight"].shape
        ).astype("float32")
        save_file(tensors, path, metadata={"format": "pt"})
        saved = json.loads((directory / "config.json").read_text())
        saved.pop("scale_decoder_outputs", None)
        saved["tie_word_embeddings"] = False
        (directory / "config.json").write_text(json.dumps(saved))
    return transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`checkpoint(version) -> (directory, transformers model)`, each built
    once per module, on first use."""
    built = {}

    def get(version):
        if version not in built:
            directory = tmp_path_factory.mktemp(f"t5_{version}")
            built[version] = directory, build_t5_checkpoint(directory, version)
        return built[version]

    return get


def ours(t5_ids, mask=None):
    """T5 ids -> our ids (plus one; padding 0 where `mask` is 0)."""
    ids = np.asarray(t5_ids, "int32") + t5.ID_OFFSET
    return ids if mask is None else np.where(mask == 1, ids, 0).astype("int32")


def hf_greedy(hf_model, ids=SOURCE, mask=SOURCE_MASK):
    """`generate`'s greedy ids in our layout: plus one, padding 0."""
    pad = hf_model.config.pad_token_id
    with torch.no_grad():
        tokens = hf_model.generate(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            do_sample=False,
            num_beams=1,
            max_new_tokens=NEW_TOKENS,
            # What our generator does: never T5's <pad>, its start token.
            bad_words_ids=[[pad]],
        ).numpy()[:, 1:]  # the start token left out
    tokens = np.where(tokens == pad, 0, tokens + t5.ID_OFFSET)
    return np.pad(tokens, ((0, 0), (0, NEW_TOKENS - tokens.shape[1])))


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_logits_and_greedy_tokens_equal_transformers(checkpoint, version):
    directory, hf_model = checkpoint(version)
    model = Transformer.from_preset(str(directory))
    v1_0 = version == "v1.0"
    assert model.vocabulary_size == TINY["vocab_size"] + 1
    assert model.tie_embeddings == v1_0 and model.share_embeddings
    assert model.logits_scale == (TINY["d_model"] ** -0.5 if v1_0 else 1.0)
    assert model.activation == ("relu" if v1_0 else "geglu_approximate")
    assert model.attention.scale == 1.0
    # Heads of their own size only where `d_kv` is not d_model / num_heads.
    head_dim = VERSIONS[version].get("d_kv")
    assert model.attention.head_dim == head_dim
    assert ("head_dim" in model.get_config()["attention"]) == (head_dim is not None)
    block = model.get_layer("decoder_block_0")
    expected = head_dim or TINY["d_model"] // TINY["num_heads"]
    assert block.head_dim == block.cross_attention.key_dim == expected

    with torch.no_grad():
        expected = hf_model(
            input_ids=torch.tensor(SOURCE),
            attention_mask=torch.tensor(SOURCE_MASK),
            decoder_input_ids=torch.tensor(DECODER),
        ).logits.numpy()
    logits = keras.ops.convert_to_numpy(
        model(
            {
                "encoder_tokens": ours(SOURCE, SOURCE_MASK),
                "decoder_tokens": ours(DECODER),
            }
        )
    )
    # The check can fail: the logits are of order one, not of the tolerance.
    assert np.abs(expected).max() > 1.0
    # Six heads of 8 sum more products than four: a wider float32 rounding
    # (the versions differ from transformers by 6e-5 to 9e-5 even in
    # float64, where T5's norms take their variance in float32).
    atol = 3e-4 if "d_kv" in VERSIONS[version] else 1e-4
    np.testing.assert_allclose(logits[..., 1:], expected, atol=atol, rtol=0)
    assert logits[..., 0].max() <= t5.PADDING_LOGIT / 2  # never padding

    expected_tokens = hf_greedy(hf_model)
    # A check that can fail: the random model does not repeat one token.
    assert all(len(np.unique(row)) > 2 for row in expected_tokens)
    # The decoder starts with T5's start id and stops at its </s>, ours.
    start = int(ours(hf_model.config.decoder_start_token_id))
    end = int(ours(hf_model.config.eos_token_id))
    tokens = greedy_search(
        model, ours(SOURCE, SOURCE_MASK), start, end, max_length=NEW_TOKENS
    )["tokens"]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(tokens), expected_tokens)


def tokenizer_strings():
    """Strings for the tokenizers: the sentences, accents, emoji, CJK,
    empty, whitespace runs, special tokens and sentinels written out."""
    rng = np.random.default_rng(0)
    words = " ".join(ENGLISH).split() + [
        "Café",
        "naïve",
        "😀",
        "日本語",
        "</s>",
        "<unk>",
        "<pad>",
        "<extra_id_0>",
        "<extra_id_7>",
        "\t",
        "   ",
    ]
    strings = ["", " ", "   ", PREFIX + ENGLISH[0], "A</s>b", "<pad><extra_id_3>x"]
    while len(strings) < 60:
        strings.append(" ".join(rng.choice(words, size=int(rng.integers(1, 8)))))
    return strings


def test_translator_and_tokenizer_equal_transformers(checkpoint):
    directory, hf_model = checkpoint("v1.1")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    translator = Translator.from_preset(
        str(directory), strategy="greedy", max_length=NEW_TOKENS
    )
    tokenizer = translator.tokenizer
    assert (tokenizer.pad_id, tokenizer.start_id, tokenizer.end_id) == (0, 1, 2)

    strings = tokenizer_strings()
    ids = [row + [tokenizer.end_id] for row in tokenizer.tokenize(strings).to_list()]
    assert ids == [
        [i + t5.ID_OFFSET for i in hf_tokenizer(s).input_ids] for s in strings
    ]

    sentences = [PREFIX + text for text in ENGLISH[:3]]
    batch = hf_tokenizer(sentences, padding=True, return_tensors="np")
    expected = hf_greedy(hf_model, batch["input_ids"], batch["attention_mask"])
    assert len(np.unique(expected)) > 4
    tokens, _ = translator.translate_ids(sentences)
    np.testing.assert_array_equal(np.array(tokens), expected)
    decoded = hf_tokenizer.batch_decode(
        np.where(expected == 0, 0, expected - t5.ID_OFFSET), skip_special_tokens=True
    )
    assert translator.translate(sentences) == decoded


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"tie_word_embeddings": False},
        {"tie_word_embeddings": True, "scale_decoder_outputs": False},
        {"scale_decoder_outputs": True},
    ],
)
def test_the_output_scaling_is_transformers(config):
    """Whether the decoder's output is scaled, from each config convention
    (before and after transformers 5), as `T5Config` reads it."""
    scaled = transformers.T5Config.from_dict(config).scale_decoder_outputs
    arguments = t5.model_arguments(config)
    assert arguments["logits_scale"] == (512**-0.5 if scaled else 1.0)


def test_unmappable_config_fields_are_refused(checkpoint):
    directory, _ = checkpoint("v1.1")
    config = files.read_config(directory)
    for field, value in (
        ("feed_forward_proj", "gated-gelu_fast"),
        ("feed_forward_proj", "swish"),
        ("d_kv", 0),
        ("d_kv", 2.5),
        ("eos_token_id", [1, 2]),
        ("decoder_start_token_id", 1),
        ("relative_attention_num_buckets", 2),
        ("pad_token_id", 100),
    ):
        with pytest.raises(ValueError, match=re.escape(f"{field}={value!r}")):
            t5.model_arguments({**config, field: value})
    with pytest.raises(ValueError, match="hidden_dim=64"):
        t5.load_model(directory, config, None, hidden_dim=64)
    # `d_kv` other than d_model / num_heads: the heads' size; equal to it,
    # nothing (the arguments of the checkpoints loaded before `head_dim`).
    arguments = t5.model_arguments({**config, "d_kv": 16})
    assert arguments["attention"] == {"dropout": 0.1, "scale": 1.0, "head_dim": 16}
    arguments = t5.model_arguments({**config, "d_kv": 8})
    assert arguments["attention"] == {"dropout": 0.1, "scale": 1.0}


def test_tensors_the_config_does_not_account_for_are_refused(checkpoint):
    directory, _ = checkpoint("v1.1")
    config = files.read_config(directory)
    weights = files.read_weights(directory)
    name = "decoder.block.1.layer.2.DenseReluDense.wi_1.weight"
    missing = {k: v for k, v in weights.items() if k != name}
    with pytest.raises(KeyError, match=name):
        t5.load_model(directory, config, missing)
    misshapen = {**weights, name: weights[name][:, :-1]}
    with pytest.raises(ValueError, match=name):
        t5.load_model(directory, config, misshapen)
    # A ReLU network's `wi` beside the gated one's: another architecture.
    extra = {**weights, "encoder.block.0.layer.1.DenseReluDense.wi.weight": 0}
    with pytest.raises(ValueError, match=r"DenseReluDense\.wi\.weight"):
        t5.load_model(directory, config, extra)
    copy = {**weights, "decoder.embed_tokens.weight": weights["lm_head.weight"]}
    with pytest.raises(ValueError, match="decoder.embed_tokens.weight"):
        t5.load_model(directory, config, copy)


def test_a_checkpoint_with_only_spiece_model_translates_the_same(checkpoint, tmp_path):
    """T5 repositories of the first generation ship `spiece.model` (run by
    `sentencepiece`) and no `tokenizer.json`."""
    directory, _ = checkpoint("v1.1")
    only_spiece = tmp_path / "t5_spiece"
    only_spiece.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(directory / name, only_spiece / name)
    for name in ("spiece.model", "tokenizer_config.json"):
        shutil.copy(directory / "spm" / name, only_spiece / name)
    options = dict(strategy="greedy", max_length=NEW_TOKENS)
    spiece = Translator.from_preset(str(only_spiece), **options)
    assert spiece.tokenizer.tokenizer.is_sentencepiece
    reference = Translator.from_preset(str(directory), **options)
    sentences = [PREFIX + text for text in ENGLISH[:3]]
    assert spiece.tokenizer.tokenize(sentences).to_list() == (
        reference.tokenizer.tokenize(sentences).to_list()
    )
    assert spiece.translate_ids(sentences) == reference.translate_ids(sentences)
    assert spiece.translate(sentences) == reference.translate(sentences)
    # `</s>` ends every sequence, as T5Tokenizer encodes; a sentinel id
    # (past the SentencePiece pieces) is a special token, skipped.
    hf_spiece = spiece.tokenizer.tokenizer
    assert hf_spiece.encode(["A dog."])[0][-1] == hf_spiece.end_id
    sentinel = hf_spiece.vocabulary_size
    assert hf_spiece.decode([[sentinel, *hf_spiece.encode(["A dog."])[0]]]) == [
        hf_spiece.decode(hf_spiece.encode(["A dog."]))[0]
    ]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_export_to_transformers_round_trips(checkpoint, version, tmp_path):
    """Loaded, exported, loaded by `transformers`: the same logits, and the
    tokenizer's ids."""
    import keras_attn.hf

    directory, hf_model = checkpoint(version)
    translator = Translator.from_preset(str(directory), strategy="greedy")
    exported = keras_attn.hf.export_to_transformers(
        translator.model, translator.tokenizer, tmp_path / "export", model_type="t5"
    )
    reloaded = transformers.T5ForConditionalGeneration.from_pretrained(exported)
    inputs = dict(
        input_ids=torch.tensor(SOURCE),
        attention_mask=torch.tensor(SOURCE_MASK),
        decoder_input_ids=torch.tensor(DECODER),
    )
    with torch.no_grad():
        expected = hf_model(**inputs).logits.numpy()
        got = reloaded.eval()(**inputs).logits.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    sentences = [PREFIX + text for text in ENGLISH[:3]]
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    again = transformers.AutoTokenizer.from_pretrained(exported)
    assert again(sentences)["input_ids"] == theirs(sentences)["input_ids"]
    # A Transformer without T5's options is refused, the option named.
    paper = Transformer.from_preset("transformer_tiny", vocabulary_size=20)
    with pytest.raises(ValueError, match=r"T5's positions are relative"):
        keras_attn.hf.export_to_transformers(paper, None, tmp_path / "x", "t5")
    assert not (tmp_path / "x").exists()
