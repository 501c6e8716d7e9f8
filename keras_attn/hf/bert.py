"""BERT checkpoints (`BertModel`, `BertForSequenceClassification`) as
`keras_attn.models.TransformerEncoderClassifier`.

BERT is the post-norm Transformer encoder with learned absolute
positions, segment (token type) embeddings, a layer norm after the
embedding sum, and a pooler (`Dense` + tanh on the first position) under
the classification head. It maps onto options of our
`TransformerEncoderClassifier`:

| config.json | `TransformerEncoderClassifier` |
|---|---|
| `vocab_size`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size` | `vocabulary_size`, `hidden_dim`, `num_layers`, `num_heads`, `intermediate_dim` |
| `hidden_act` (`gelu`, exact; `relu`; `silu`) | `activation` (Keras's `"gelu"` is the exact, erf one) |
| `max_position_embeddings`, `position_embedding_type: "absolute"` | `max_sequence_length`, `position="learned"` |
| `type_vocab_size` | `num_segments` (a second input, `segment_ids`) |
| post-norm layers, `LayerNorm` on the embeddings, `layer_norm_eps` | `normalize_first=False` (its `embedding_norm`), `layer_norm_epsilon` |
| unscaled token embeddings | `scale_embeddings=False` |
| the pooler, `[CLS]` features through `Dense` + tanh | `pooling="cls"`, `pooled_dense=True` |
| `classifier` (`num_labels` rows, from `id2label`) | the `logits` head, `num_classes` |
| `pad_token_id` | `pad_id` (padding is masked by id: BERT's `attention_mask` is `token_ids != pad_id`) |
| `hidden_dropout_prob`, `attention_probs_dropout_prob` | `dropout`, `attention={"dropout": ...}` |

`classifier_dropout` is not mapped (dropout is inactive at inference;
our pooled vector's dropout is `dropout`). A field that maps to nothing
we have (`position_embedding_type` other than `"absolute"`, another
`hidden_act`, a decoder with cross-attention, ...) is refused naming the
field and its value: a checkpoint is loaded exactly or not at all.

A checkpoint without a classification head (`BertModel`, or the
pretraining checkpoints `BertForPreTraining` / `BertForMaskedLM`) loads
only with `num_classes` given (`from_preset(source, num_classes=...)`):
the encoder holds the checkpoint's weights, and the head (and the pooler
where the checkpoint has none) starts freshly initialized, to be
fine-tuned, as `transformers`' `BertForSequenceClassification` does from
such a checkpoint; the pretraining heads (`cls.*`) are not part of a
classifier and are left out. Without `num_classes` such a checkpoint is
refused: a random head would classify at random.

The tokenizer (`load_tokenizer`) is the checkpoint's WordPiece vocabulary
(`vocab.txt`, or the vocabulary of its `tokenizer.json`) with the
settings of `tokenizer_config.json` (`do_lower_case`, `strip_accents`,
`tokenize_chinese_chars`, the special tokens), run by the `tokenizers`
library exactly as `transformers.BertTokenizer` builds it.
"""

import json
from pathlib import Path

import numpy as np

from keras_attn.hf.files import (
    OVERRIDES,
    check_export_class,
    check_overrides,
    load_weights,
    refuse_config_field,
    refuse_export,
    with_flash_attention,
    write_exported_checkpoint,
)
from keras_attn.hf.tokenizer import HFTokenizer, _token_text
from keras_attn.models.transformer_encoder_classifier import (
    TransformerEncoderClassifier,
)
from keras_attn.shared_docstrings import shared_docstrings

MODEL_CLASS = TransformerEncoderClassifier
MODEL_TYPES = ("bert",)
VOCABULARY_FILE = "vocab.txt"
TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# `transformers.BertConfig`'s defaults, for fields a config.json leaves out.
_DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
}
# transformers' activation names (ACT2FN) -> Keras's. Keras's "gelu" is the
# exact (erf) GELU, as transformers' "gelu"; the tanh approximations
# ("gelu_new", "gelu_pytorch_tanh") have no name of ours and are refused.
_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu"}
# `from_preset` arguments that do not change what the checkpoint computes.
_OVERRIDES = (*OVERRIDES, "num_classes", "dropout")
# The heads of the pretraining checkpoints: not part of a classifier.
_PRETRAINING_HEADS = "cls."
# Our weights that a checkpoint without a classifier leaves to their
# initializers (the pooler only where the checkpoint has none).
_HEAD = "logits/"
_POOLER = "pooled_dense/"


def _refuse(field, value, why):
    refuse_config_field("BERT", field, value, why)


def _field(config, name):
    return config.get(name, _DEFAULTS[name])


def num_labels(config):
    """The classes of a `BertForSequenceClassification` config: its
    `id2label` entries (`num_labels` where it has none)."""
    labels = config.get("id2label")
    if isinstance(labels, dict) and labels:
        return len(labels)
    return int(config.get("num_labels", 2))


def class_names(config):
    """`id2label` as a list in label order, or `None` where it has none."""
    labels = config.get("id2label")
    if not isinstance(labels, dict) or not labels:
        return None
    names = {int(index): str(name) for index, name in labels.items()}
    if sorted(names) != list(range(len(names))):
        _refuse("id2label", labels, "does not number its labels 0 ... n - 1")
    return [names[index] for index in range(len(names))]


def model_arguments(config, num_classes):
    """The `TransformerEncoderClassifier` arguments of a BERT config.

    Args:
        config: the checkpoint's `config.json`.
        num_classes: int, the classes of the head.

    Raises:
        ValueError: a field that maps to nothing keras-attn has (named with
            its value).
    """
    fields = {name: _field(config, name) for name in _DEFAULTS}
    if fields["position_embedding_type"] != "absolute":
        _refuse(
            "position_embedding_type",
            fields["position_embedding_type"],
            "is not 'absolute' (keras-attn has no relative_key position scores)",
        )
    activation = fields["hidden_act"]
    if activation not in _ACTIVATIONS:
        _refuse(
            "hidden_act",
            activation,
            f"is none of the activations we map ({', '.join(_ACTIVATIONS)})",
        )
    for name in ("is_decoder", "add_cross_attention"):
        if fields[name]:
            _refuse(
                name, fields[name], "makes a decoder; our encoder attends both ways"
            )
    vocabulary = fields["vocab_size"]
    pad = fields["pad_token_id"]
    if not isinstance(pad, int) or isinstance(pad, bool) or not 0 <= pad < vocabulary:
        _refuse(
            "pad_token_id",
            pad,
            f"is not a token id of the vocabulary of {vocabulary} (our model "
            "masks padding by its id)",
        )
    segments = fields["type_vocab_size"]
    if not isinstance(segments, int) or segments < 1:
        _refuse("type_vocab_size", segments, "is not a positive number of segments")
    return dict(
        vocabulary_size=vocabulary,
        num_classes=num_classes,
        num_layers=fields["num_hidden_layers"],
        hidden_dim=fields["hidden_size"],
        num_heads=fields["num_attention_heads"],
        intermediate_dim=fields["intermediate_size"],
        dropout=float(fields["hidden_dropout_prob"]),
        attention={"dropout": float(fields["attention_probs_dropout_prob"])},
        max_sequence_length=fields["max_position_embeddings"],
        position="learned",
        pooling="cls",
        normalize_first=False,
        pad_id=pad,
        activation=_ACTIVATIONS[activation],
        layer_norm_epsilon=float(fields["layer_norm_eps"]),
        normalization="layer",
        use_bias=True,
        scale_embeddings=False,
        num_segments=segments,
        pooled_dense=True,
    )


# === Tensor names: ours <- BERT's ===


def _prefix(weights):
    """`"bert."` for the task checkpoints (`BertFor*`), `""` for `BertModel`."""
    return "bert." if any(name.startswith("bert.") for name in weights) else ""


def _has_classifier(config, weights):
    """Whether the checkpoint holds a sequence classification head."""
    if weights is not None:
        return "classifier.weight" in weights
    architectures = config.get("architectures") or []
    return any(name.endswith("ForSequenceClassification") for name in architectures)


def _to_ours(get, arguments, prefix, with_head, with_pooler):
    """Our weights (path -> array) from BERT's tensors (`get(name, shape)`)."""
    d = arguments["hidden_dim"]
    heads = arguments["num_heads"]
    head_dim = d // heads
    ffn = arguments["intermediate_dim"]
    p = prefix
    ours = {
        "token_embedding/token_embedding/embeddings": get(
            f"{p}embeddings.word_embeddings.weight", (arguments["vocabulary_size"], d)
        ),
        "token_embedding/position_embedding/embeddings": get(
            f"{p}embeddings.position_embeddings.weight",
            (arguments["max_sequence_length"], d),
        ),
        "segment_embedding/embeddings": get(
            f"{p}embeddings.token_type_embeddings.weight",
            (arguments["num_segments"], d),
        ),
        "embedding_norm/gamma": get(f"{p}embeddings.LayerNorm.weight", (d,)),
        "embedding_norm/beta": get(f"{p}embeddings.LayerNorm.bias", (d,)),
    }
    for i in range(arguments["num_layers"]):
        hf = f"{p}encoder.layer.{i}."
        block = f"encoder_block_{i}/"
        for projection in ("query", "key", "value"):
            name = f"{hf}attention.self.{projection}"
            # (out, in) -> (in, out) -> (hidden_dim, heads, head_dim)
            ours[f"{block}self_attention/{projection}/kernel"] = get(
                f"{name}.weight", (d, d)
            ).T.reshape(d, heads, head_dim)
            ours[f"{block}self_attention/{projection}/bias"] = get(
                f"{name}.bias", (d,)
            ).reshape(heads, head_dim)
        name = f"{hf}attention.output.dense"
        # (hidden_dim, heads * head_dim) -> (heads, head_dim, hidden_dim)
        ours[f"{block}self_attention/attention_output/kernel"] = get(
            f"{name}.weight", (d, d)
        ).T.reshape(heads, head_dim, d)
        ours[f"{block}self_attention/attention_output/bias"] = get(f"{name}.bias", (d,))
        for norm, hf_norm in (
            ("self_attention_norm", "attention.output.LayerNorm"),
            ("feed_forward_norm", "output.LayerNorm"),
        ):
            ours[f"{block}{norm}/gamma"] = get(f"{hf}{hf_norm}.weight", (d,))
            ours[f"{block}{norm}/beta"] = get(f"{hf}{hf_norm}.bias", (d,))
        for dense, hf_dense, shape in (
            ("intermediate_dense", "intermediate.dense", (ffn, d)),
            ("output_dense", "output.dense", (d, ffn)),
        ):
            ours[f"{block}feed_forward/{dense}/kernel"] = get(
                f"{hf}{hf_dense}.weight", shape
            ).T
            ours[f"{block}feed_forward/{dense}/bias"] = get(
                f"{hf}{hf_dense}.bias", (shape[0],)
            )
    if with_pooler:
        ours["pooled_dense/kernel"] = get(f"{p}pooler.dense.weight", (d, d)).T
        ours["pooled_dense/bias"] = get(f"{p}pooler.dense.bias", (d,))
    if with_head:
        classes = arguments["num_classes"]
        ours["logits/kernel"] = get("classifier.weight", (classes, d)).T
        ours["logits/bias"] = get("classifier.bias", (classes,))
    return ours


def _check_position_ids(weights, prefix, source):
    """Older checkpoints store the position ids buffer: it must be `0, 1, ...`.

    Returns the names of such tensors (none in newer ones).
    """
    name = f"{prefix}embeddings.position_ids"
    if name not in weights:
        return set()
    ids = np.asarray(weights[name]).reshape(-1)
    if not np.array_equal(ids, np.arange(ids.size)):
        raise ValueError(
            f"The tensor {name!r} of {source} is not the positions 0, 1, ...: "
            "keras-attn numbers positions from 0 and cannot load others."
        )
    return {name}


def _num_classes(config, weights, overrides, source):
    """`(num_classes, with_head)`: the head's classes, and whether the
    checkpoint's classifier fills it."""
    given = overrides.get("num_classes")
    if _has_classifier(config, weights):
        classes = num_labels(config)
        if given is not None and given != classes:
            raise ValueError(
                f"{source} classifies into {classes} labels (its id2label); a "
                f"head of another size would not be the checkpoint's. "
                f"Received: num_classes={given!r}"
            )
        return classes, True
    if given is None:
        raise ValueError(
            f"{source} has no sequence classification head (a BertModel or "
            "pretraining checkpoint): pass `num_classes` to load its encoder "
            "under a freshly initialized head, to fine-tune "
            "(`TransformerEncoderClassifier.from_preset(source, num_classes=...)`). "
            "Received: num_classes=None"
        )
    return given, False


@shared_docstrings
def load_model(directory, config, weights, **overrides):
    """A `TransformerEncoderClassifier` holding a BERT checkpoint's weights.

    Args:
        {{load_model_args}}
        **overrides: `dtype`, `name`, `flash_attention`, `dropout`, and
            `num_classes` (required for a checkpoint without a
            classification head, which then starts freshly initialized;
            see the module docstring); arguments that would change what
            the checkpoint computes are refused.

    Returns:
        A `keras_attn.models.TransformerEncoderClassifier` taking
        `{"token_ids": ..., "segment_ids": ...}`.
    """
    source = f"the checkpoint {str(directory)!r}"
    check_overrides("BERT", overrides, _OVERRIDES)
    num_classes, with_head = _num_classes(config, weights, overrides, source)
    overrides = {k: v for k, v in overrides.items() if k != "num_classes"}
    arguments = model_arguments(config, num_classes)
    model = TransformerEncoderClassifier(**with_flash_attention(arguments, overrides))
    if weights is None:
        return model
    prefix = _prefix(weights)
    with_pooler = with_head or f"{prefix}pooler.dense.weight" in weights
    accounted = _check_position_ids(weights, prefix, source)
    if not with_head:
        accounted |= {name for name in weights if name.startswith(_PRETRAINING_HEADS)}
    fresh = () if with_head else (_HEAD,) if with_pooler else (_HEAD, _POOLER)
    return load_weights(
        model,
        weights,
        lambda get: _to_ours(get, arguments, prefix, with_head, with_pooler),
        "BERT",
        source,
        accounted,
        left_fresh=fresh,
    )


# === Export: ours -> BERT's ===


def _bert_config(model):
    """The `BertForSequenceClassification` config of a classifier's options."""
    activations = {ours: theirs for theirs, ours in _ACTIVATIONS.items()}
    if model.activation not in activations:
        refuse_export(
            "BERT", "activation", model.activation, "BERT has no such activation"
        )
    config = {
        "model_type": "bert",
        "architectures": ["BertForSequenceClassification"],
        "vocab_size": model.vocabulary_size,
        "hidden_size": model.hidden_dim,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "intermediate_size": model.intermediate_dim,
        "hidden_act": activations[model.activation],
        "hidden_dropout_prob": model.dropout,
        "attention_probs_dropout_prob": model.attention.dropout,
        "max_position_embeddings": model.max_sequence_length,
        "type_vocab_size": model.num_segments,
        "layer_norm_eps": model.layer_norm_epsilon,
        "pad_token_id": model.pad_id,
        "position_embedding_type": "absolute",
        "id2label": {str(i): f"LABEL_{i}" for i in range(model.num_classes)},
        "label2id": {f"LABEL_{i}": i for i in range(model.num_classes)},
    }
    return config


def export(model, directory):
    """Writes a `TransformerEncoderClassifier` as a
    `BertForSequenceClassification` checkpoint.

    The model must have BERT's options (what `from_preset` of a BERT
    checkpoint builds: learned positions, token types, post-norm layer
    norms, `[CLS]` pooling through a tanh dense layer, unscaled embeddings);
    another option is refused, named. Writes `config.json` (labels
    `LABEL_0 ...`) and `model.safetensors`, the inverse of the load
    mapping; `transformers`' `from_pretrained` loads them.

    Args:
        model: a `keras_attn.models.TransformerEncoderClassifier`.
        directory: the folder to write (created if missing).

    Returns:
        The directory as a `pathlib.Path`.
    """
    check_export_class(model, TransformerEncoderClassifier, "BERT")
    if model.num_segments is None:
        refuse_export("BERT", "num_segments", None, "BERT has token type embeddings")
    config = _bert_config(model)
    arguments = model_arguments(config, model.num_classes)
    return write_exported_checkpoint(
        model,
        directory,
        "BERT",
        config,
        arguments,
        lambda get: _to_ours(get, arguments, "bert.", True, True),
    )


def export_tokenizer(tokenizer, directory):
    """Writes a BERT checkpoint's WordPiece tokenizer back: `vocab.txt`,
    `tokenizer.json` and a `tokenizer_config.json` naming its special tokens.

    Args:
        tokenizer: the tokenizer loaded with the checkpoint (a
            `keras_attn.text.checkpoint_tokenizer.CheckpointTokenizer` or
            `keras_attn.hf.tokenizer.HFTokenizer`).
        directory: the checkpoint folder being written.

    Raises:
        TypeError: another tokenizer (a SentencePiece one has no WordPiece
            vocabulary).
    """
    inner = getattr(tokenizer, "tokenizer", tokenizer)
    if not isinstance(inner, HFTokenizer) or inner.is_sentencepiece:
        raise TypeError(
            "A BERT export writes the WordPiece tokenizer loaded with a BERT "
            f"checkpoint. Received: tokenizer={tokenizer!r:.100}"
        )
    directory = Path(directory)
    vocabulary = inner.encoder.get_vocab(with_added_tokens=True)
    pieces = sorted(vocabulary, key=vocabulary.get)
    (directory / VOCABULARY_FILE).write_text("\n".join(pieces) + "\n", "utf-8")
    inner.encoder.save(str(directory / TOKENIZER_JSON))
    serialized = json.loads(inner.encoder.to_str())
    normalizer = serialized["normalizer"]
    settings = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": normalizer["lowercase"],
        "strip_accents": normalizer["strip_accents"],
        "tokenize_chinese_chars": normalizer["handle_chinese_chars"],
        "unk_token": serialized["model"]["unk_token"],
        "cls_token": inner.piece(inner.start_id),
        "sep_token": inner.piece(inner.end_id),
    }
    if getattr(tokenizer, "pad_id", None) is not None:
        settings["pad_token"] = inner.piece(tokenizer.pad_id)
    (directory / TOKENIZER_CONFIG).write_text(json.dumps(settings, indent=2) + "\n")


# === The tokenizer ===


def _vocabulary(directory):
    """`{piece: id}` of `vocab.txt` (one piece a line), else of the WordPiece
    model of `tokenizer.json`."""
    path = directory / VOCABULARY_FILE
    if path.is_file():
        pieces = path.read_text("utf-8").split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()  # The newline that ends the last line.
        return {piece.rstrip("\r"): index for index, piece in enumerate(pieces)}
    path = directory / TOKENIZER_JSON
    if not path.is_file():
        raise FileNotFoundError(
            f"The checkpoint {str(directory)!r} has no {VOCABULARY_FILE!r} and no "
            f"{TOKENIZER_JSON!r}."
        )
    model = json.loads(path.read_text("utf-8")).get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ValueError(
            f"{str(path)!r} is not a WordPiece tokenizer: expected a 'model' of "
            f"type 'WordPiece' with a 'vocab'. Received: type={model.get('type')!r}"
        )
    return {str(piece): int(index) for piece, index in model["vocab"].items()}


def load_tokenizer(directory, config):
    """The checkpoint's WordPiece tokenizer, as `transformers.BertTokenizer`.

    The vocabulary is `vocab.txt` (or the one of `tokenizer.json`); the
    settings are those of `tokenizer_config.json`: `do_lower_case`
    (default `True`), `strip_accents` (default: as `do_lower_case`),
    `tokenize_chinese_chars` (default `True`) and the special tokens
    (`[UNK]`, `[CLS]`, `[SEP]`, `[PAD]`, `[MASK]` by default), which are
    matched in the text as `transformers` matches them.

    Returns:
        A `keras_attn.hf.tokenizer.HFTokenizer` whose start id is `[CLS]`
        and end id `[SEP]`; `encode` adds both (and `[SEP]` after the
        second text of a pair).

    Raises:
        FileNotFoundError: neither `vocab.txt` nor `tokenizer.json`.
        ValueError: a special token that is not in the vocabulary, or a
            `[PAD]` other than `config.json`'s `pad_token_id`.
    """
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    directory = Path(directory)
    settings = {}
    if (directory / TOKENIZER_CONFIG).is_file():
        settings = json.loads((directory / TOKENIZER_CONFIG).read_text("utf-8"))
    vocabulary = _vocabulary(directory)
    special = {}
    for key, default in (
        ("unk_token", "[UNK]"),
        ("cls_token", "[CLS]"),
        ("sep_token", "[SEP]"),
        ("pad_token", "[PAD]"),
        ("mask_token", "[MASK]"),
    ):
        token = str(_token_text(settings.get(key)) or default)
        if key == "mask_token" and token not in vocabulary:
            continue  # Only masked language modelling reads it.
        if token not in vocabulary:
            raise ValueError(
                f"The tokenizer of {str(directory)!r} has no {token!r} in its "
                f"vocabulary. Received: {key}={token!r}"
            )
        special[key] = token
    pad_id = vocabulary[special["pad_token"]]
    if pad_id != _field(config, "pad_token_id"):
        raise ValueError(
            f"The tokenizer files of {str(directory)!r} disagree with "
            f"config.json: {special['pad_token']!r} is id {pad_id}. Received: "
            f"pad_token_id={_field(config, 'pad_token_id')!r}"
        )
    lowercase = bool(settings.get("do_lower_case", True))
    encoder = Tokenizer(WordPiece(vocabulary, unk_token=special["unk_token"]))
    encoder.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)),
        strip_accents=settings.get("strip_accents"),
        lowercase=lowercase,
    )
    encoder.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    encoder.decoder = decoders.WordPiece(prefix="##")
    # As `transformers` registers them: found in the text before the
    # normalizer runs, never split.
    encoder.add_special_tokens(list(special.values()))
    cls, sep = special["cls_token"], special["sep_token"]
    encoder.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocabulary[cls]), (sep, vocabulary[sep])],
    )
    return HFTokenizer(
        encoder,
        start_id=vocabulary[cls],
        end_id=vocabulary[sep],
        add_start=True,
        add_end=True,
    )


# === A TextClassifier of a checkpoint ===


def load_text_classifier(classifier_class, source, dtype=None, **options):
    """A `TextClassifier` of a `BertForSequenceClassification` checkpoint.

    What `keras_attn.text.TextClassifier.from_preset("hf://...")` (or a
    local checkpoint directory) runs: each text becomes `[CLS] pieces
    [SEP]`, segment 0, right-padded with `[PAD]`; the class names are the
    config's `id2label`.

    Args:
        classifier_class: `keras_attn.text.TextClassifier` (or a subclass).
        source: `"hf://owner/name[@revision]"` or a checkpoint directory.
        dtype: the model's dtype policy. Defaults to `None`, meaning the
            global policy.
        **options: `TextClassifier` arguments (`sequence_length`,
            `batch_size`, `class_names`).

    Returns:
        A `classifier_class`.

    Raises:
        ValueError: a checkpoint of another family, one without a
            classification head, or one whose `problem_type` is not
            single-label classification (named).
    """
    from keras_attn.hf.files import read_config, read_weights, resolve_checkpoint
    from keras_attn.text.checkpoint_tokenizer import CheckpointTokenizer

    directory = resolve_checkpoint(source)
    config = read_config(directory)
    if config["model_type"] not in MODEL_TYPES:
        raise ValueError(
            "A TextClassifier loads a BERT checkpoint (model_type='bert'). "
            f"Received: {str(source)!r} with model_type={config['model_type']!r}"
        )
    problem_type = config.get("problem_type")
    if problem_type not in (None, "single_label_classification"):
        _refuse(
            "problem_type",
            problem_type,
            "is not single-label classification (TextClassifier gives one "
            "softmax over the labels); load the model with "
            "TransformerEncoderClassifier.from_preset",
        )
    weights = read_weights(directory)
    if not _has_classifier(config, weights):
        raise ValueError(
            f"{str(source)!r} has no sequence classification head: a "
            "TextClassifier needs a trained one. Load its encoder with "
            "TransformerEncoderClassifier.from_preset(source, num_classes=...) "
            "and fine-tune it."
        )
    overrides = {} if dtype is None else {"dtype": dtype}
    model = load_model(directory, config, weights, **overrides)
    tokenizer = load_tokenizer(directory, config)
    options.setdefault("class_names", class_names(config))
    options.setdefault("add_end", True)  # [CLS] text [SEP]
    return classifier_class(
        model,
        CheckpointTokenizer(tokenizer, model.vocabulary_size, model.pad_id),
        **options,
    )
