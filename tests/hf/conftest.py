"""Tiny Hugging Face checkpoints built here, never downloaded.

Each fixture builds a random model from a `transformers` config class,
saves it with `save_pretrained(safe_serialization=True)` into a session
temporary folder, and returns that folder with the `transformers` model
(float32, eval mode) for reference outputs.
"""

import pytest

# The Llama family: hidden 32, 2 layers, 4 query heads sharing 2 key/value
# heads (grouped-query attention), vocabulary 96.
TINY = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    # Weights large enough for logits of order one: a wrong mapping shows.
    initializer_range=0.2,
)
# Each family with what sets it apart: Llama untied with a larger
# rope_theta and linear rope scaling, Mistral with a sliding window shorter
# than the test's sequences, Qwen2 with q/k/v biases and tied embeddings.
FAMILIES = {
    "llama": dict(
        rope_parameters={"rope_type": "linear", "rope_theta": 50000.0, "factor": 2.0},
        tie_word_embeddings=False,
    ),
    "mistral": dict(sliding_window=6, tie_word_embeddings=False),
    "qwen2": dict(tie_word_embeddings=True, rope_parameters={"rope_theta": 1e6}),
}


def build_checkpoint(model_type, directory, **changes):
    """Saves a random `*ForCausalLM` of `model_type`; returns the torch model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }[model_type]
    config = config_class(
        **{**TINY, **FAMILIES[model_type], **changes},
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        # Random biases (Qwen2's are zeros at initialization) and norm
        # scales away from one, so the mapping of each is exercised.
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(0.5 * torch.randn_like(parameter))
    model.save_pretrained(directory, safe_serialization=True)
    return model


CORPUS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the sun is warm today",
    "we read a good book",
] * 10


def build_tokenizer(directory, add_start):
    """A tiny BPE `tokenizer.json` (Llama's Metaspace pieces) with the special
    ids of `build_checkpoint`: <unk> 0, <s> 1, </s> 2; `add_start` gives the
    post-processor that adds <s> (Llama, Mistral; Qwen2 adds none)."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=80, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    if add_start:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)]
        )
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>" if add_start else None,
        eos_token="</s>",
    ).save_pretrained(directory)


@pytest.fixture(scope="session")
def hf_causal_lms(tmp_path_factory):
    """`checkpoint(model_type, **changes) -> (directory, transformers
    model)`, each family (with `changes` to its config) built once per
    session, on first use."""
    built = {}

    def checkpoint(model_type, **changes):
        key = (model_type, *sorted(changes.items()))
        if key not in built:
            directory = tmp_path_factory.mktemp(f"hf_{model_type}")
            model = build_checkpoint(model_type, directory, **changes)
            build_tokenizer(directory, add_start=model_type != "qwen2")
            built[key] = directory, model
        return built[key]

    return checkpoint


# BERT: a WordPiece vocabulary of 60 pieces ([PAD] 0, as BERT's), hidden 32,
# 2 layers, 4 heads, two segments, three labels.
BERT_VOCABULARY = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "in", "park",
    "sun", "is", "warm", "today", "we", "read", "good", "book", "caf",
    "run", "play", "not", "bad", "very", "film", "it", "was", "great",
    "##e", "##s", "##ing", "##ed", "##ly", "##er", "##n", "##k",
    "!", ",", ".", "?", "'", "-", "中", "文",
    "b", "c", "d", "e", "k", "n", "o", "r", "s", "t", "w",
]  # fmt: skip
BERT_LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def build_bert_classifier(directory):
    """Saves a random `BertForSequenceClassification` with its tokenizer
    (`vocab.txt`, `tokenizer.json`, `tokenizer_config.json`, lower-cased);
    returns the torch model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=len(BERT_VOCABULARY),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
        type_vocab_size=2,
        id2label=BERT_LABELS,
        label2id={name: index for index, name in BERT_LABELS.items()},
        # Weights large enough for logits of order one: a wrong mapping shows.
        initializer_range=0.2,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        # Biases and norm scales away from their initial zeros and ones, so
        # the mapping of each is exercised.
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                parameter.add_(0.5 * torch.randn_like(parameter))
    model.save_pretrained(directory, safe_serialization=True)
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("\n".join(BERT_VOCABULARY) + "\n", encoding="utf-8")
    transformers.BertTokenizer(str(vocabulary), do_lower_case=True).save_pretrained(
        directory
    )
    return model


@pytest.fixture(scope="session")
def hf_bert_classifier(tmp_path_factory):
    """`(directory, transformers model)` of a tiny BERT classifier."""
    directory = tmp_path_factory.mktemp("hf_bert")
    return directory, build_bert_classifier(directory)
