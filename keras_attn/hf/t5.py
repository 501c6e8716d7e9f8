"""T5 checkpoints (`T5ForConditionalGeneration`) as `keras_attn.models.Transformer`.

T5 is a pre-norm encoder-decoder with RMS norms and no biases, T5's
relative position bias in place of position embeddings, unscaled
attention scores and one token embedding shared by the encoder and the
decoder. T5 v1.0 (`t5-small`, ...) has a ReLU feed-forward network and
ties the output projection to that embedding, reading the decoder's
output times `d_model ** -0.5`; T5 v1.1 (`google/t5-v1_1-*`, FLAN-T5) has
a gated-GELU network and an output projection of its own. Both map onto
options of our `Transformer`:

| config.json | `Transformer` |
|---|---|
| `d_model`, `num_layers`, `num_decoder_layers`, `num_heads`, `d_ff` | `hidden_dim`, `num_encoder_layers`, `num_decoder_layers`, `num_heads`, `intermediate_dim` |
| `d_kv` | the heads' size: `attention={"head_dim": d_kv}` where it is not `d_model / num_heads` (T5 v1.1 small and base, FLAN-T5 small), else left out |
| `vocab_size` | `vocabulary_size=vocab_size + 1` (our padding id 0, below) |
| `feed_forward_proj` (`relu`, `gelu`, `gated-gelu`, `gated-relu`, `gated-silu`) | `activation` (`relu`, `gelu`, `geglu_approximate`, `reglu`, `swiglu`) |
| pre-norm blocks, `T5LayerNorm` (`layer_norm_epsilon`), final norms | `normalize_first=True`, `normalization="rms"`, `layer_norm_epsilon` |
| no biases, no embedding scaling | `use_bias=False`, `scale_embeddings=False` |
| unscaled scores `Q K^T` | `attention={"scale": 1.0}` |
| `relative_attention_num_buckets`, `relative_attention_max_distance` | `position={"name": "relative", "num_buckets": ..., "max_distance": ...}`: one bias per stack, computed once and added in every block's self-attention (the encoder's bidirectional, the decoder's causal), none in the cross-attention |
| `shared` for both stacks; `lm_head` tied (v1.0) or not (v1.1) | `share_embeddings=True`, `tie_embeddings` |
| the tied projection of `d_model ** -0.5` times the output (`scale_decoder_outputs`) | `logits_scale=d_model ** -0.5` |
| `dropout_rate` | `dropout`, `attention={"dropout": ...}` |
| `n_positions` | `max_sequence_length` (decoding's limit; the bias has none) |

A checkpoint's config says which v1.0 or v1.1 it is the way
`transformers` reads it: the decoder's output is scaled unless
`scale_decoder_outputs` (or, in configs written before it,
`tie_word_embeddings`) is false, and `lm_head` is the shared embedding
unless the file holds an `lm_head.weight` that differs from it.

**Ids.** T5's `<pad>` (id 0) is both padding and the decoder's start
token; ours are two ids, as for Marian (`keras_attn.hf.marian`): our id of
T5 id `t` is `t + 1`, and our id 0 is padding, with a zero embedding and a
logit of `PADDING_LOGIT` (never predicted). `logits[..., 1:]` are T5's;
the decoder starts with our id 1 and ends at our id 2 (T5's `</s>` 1).

**Training.** The loaded model computes what T5 computes; fine-tuning
differs in two dropouts T5 has and our blocks do not: on the
feed-forward network's inner activations and after the final norms.

A config field that maps to nothing we have (another `feed_forward_proj`,
a list of end ids, ...) is refused naming the field and value: a
checkpoint is loaded exactly or not at all. `export` writes such a
`Transformer` back as a T5 checkpoint.
"""

import numpy as np

from keras_attn.hf.files import (
    OVERRIDES,
    check_export_class,
    check_overrides,
    check_token_ids,
    load_weights,
    refuse_config_field,
    refuse_export,
    with_flash_attention,
    write_exported_checkpoint,
)
from keras_attn.hf.marian import PADDING_LOGIT
from keras_attn.layers.attention.attention_settings import AttentionSettings
from keras_attn.layers.blocks.feed_forward import is_gated
from keras_attn.layers.positions.relative_position_bias import check_bucket_arguments
from keras_attn.models.transformer import Transformer
from keras_attn.shared_docstrings import shared_docstrings

MODEL_CLASS = Transformer
MODEL_TYPES = ("t5",)
# Our ids are T5's plus this; 0 is padding.
ID_OFFSET = 1
# `transformers.T5Config`'s defaults, for fields a config.json leaves out.
_DEFAULTS = {
    "vocab_size": 32128,
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_decoder_layers": None,
    "num_heads": 8,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-6,
    "feed_forward_proj": "relu",
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "n_positions": 512,
}
# `feed_forward_proj` -> our `activation`. transformers runs "gated-gelu"
# with "gelu_new", GELU's tanh approximation.
_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gated-gelu": "geglu_approximate",
    "gated-gelu_new": "geglu_approximate",
    "gated-relu": "reglu",
    "gated-silu": "swiglu",
}
# Tensors that may repeat the shared embedding.
_EMBEDDING_COPIES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def _refuse(field, value, why):
    refuse_config_field("T5", field, value, why)


def _field(config, name):
    value = config.get(name)
    return _DEFAULTS[name] if value is None else value


def _head_dim(d_kv):
    """`d_kv` as our `head_dim`, or refused naming it."""
    try:
        return AttentionSettings(head_dim=d_kv).head_dim
    except (TypeError, ValueError):
        _refuse("d_kv", d_kv, "is not a positive integer (the heads' size)")


def _scales_decoder_output(config):
    """Whether the output projection reads `d_model ** -0.5` times the
    decoder's output, as `transformers.T5Config` decides it."""
    tied = config.get("tie_word_embeddings", True) is not False
    return bool(config.get("scale_decoder_outputs", tied))


def model_arguments(config, tie_embeddings=None):
    """`Transformer` arguments of a T5 `config.json`; refuses what we lack.

    Args:
        config: the checkpoint's `config.json`, a dict.
        tie_embeddings: bool, whether the output projection is the shared
            embedding. Defaults to `None`, meaning the config's
            `tie_word_embeddings` (`True` when absent).

    Returns:
        A dict of `keras_attn.models.Transformer` arguments.
    """
    fields = {name: _field(config, name) for name in _DEFAULTS}
    projection = fields["feed_forward_proj"]
    if projection not in _ACTIVATIONS:
        _refuse(
            "feed_forward_proj",
            projection,
            f"is none of the feed-forward networks we map ({', '.join(_ACTIVATIONS)})",
        )
    hidden_dim, num_heads = fields["d_model"], fields["num_heads"]
    dropout = float(fields["dropout_rate"])
    attention = {"dropout": dropout, "scale": 1.0}
    if fields["d_kv"] * num_heads != hidden_dim:
        # Heads of their own size (T5 v1.1 small: 6 heads of 64 in 512).
        attention["head_dim"] = _head_dim(fields["d_kv"])
    vocabulary = fields["vocab_size"]
    special_ids = ("pad_token_id", "eos_token_id", "decoder_start_token_id")
    check_token_ids("T5", fields, special_ids, vocabulary)
    if fields["decoder_start_token_id"] == fields["eos_token_id"]:
        _refuse(
            "decoder_start_token_id",
            fields["decoder_start_token_id"],
            "is the end id too (a sentence could never end)",
        )
    buckets = fields["relative_attention_num_buckets"]
    distance = fields["relative_attention_max_distance"]
    for bidirectional in (True, False):
        try:
            check_bucket_arguments(bidirectional, buckets, distance)
        except (TypeError, ValueError) as error:
            _refuse(
                "relative_attention_num_buckets",
                buckets,
                f"with relative_attention_max_distance={distance!r} gives no "
                f"relative position buckets ({error})",
            )
    if tie_embeddings is None:
        tie_embeddings = config.get("tie_word_embeddings", True) is not False
    num_layers = fields["num_layers"]
    return dict(
        vocabulary_size=vocabulary + ID_OFFSET,
        num_layers=num_layers,
        num_encoder_layers=num_layers,
        num_decoder_layers=fields["num_decoder_layers"] or num_layers,
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        intermediate_dim=fields["d_ff"],
        dropout=dropout,
        attention=attention,
        max_sequence_length=fields["n_positions"],
        position={"name": "relative", "num_buckets": buckets, "max_distance": distance},
        normalize_first=True,
        normalization="rms",
        layer_norm_epsilon=float(fields["layer_norm_epsilon"]),
        use_bias=False,
        activation=_ACTIVATIONS[projection],
        scale_embeddings=False,
        share_embeddings=True,
        tie_embeddings=bool(tie_embeddings),
        # Tied, the bias holds our padding id's logit; untied, the
        # projection's own bias does.
        logits_bias=bool(tie_embeddings),
        logits_scale=hidden_dim**-0.5 if _scales_decoder_output(config) else 1.0,
        pad_id=0,
    )


# === Tensor names: ours <-> T5's ===


def _blocks(num_encoder_layers, num_decoder_layers):
    """`(our block, T5 prefix, [(our attention, T5's attention, T5's norm
    of it), ...], T5's feed-forward sub-layer)` for every block: T5's
    sub-layer `n` is `layer.n.`, its norm `layer.n.layer_norm`."""
    blocks = []
    for i in range(num_encoder_layers):
        blocks.append(
            (
                f"encoder_block_{i}",
                f"encoder.block.{i}.",
                [("self_attention", "layer.0.SelfAttention", "layer.0.layer_norm")],
                "layer.1.",
            )
        )
    for i in range(num_decoder_layers):
        blocks.append(
            (
                f"decoder_block_{i}",
                f"decoder.block.{i}.",
                [
                    ("self_attention", "layer.0.SelfAttention", "layer.0.layer_norm"),
                    (
                        "cross_attention",
                        "layer.1.EncDecAttention",
                        "layer.1.layer_norm",
                    ),
                ],
                "layer.2.",
            )
        )
    return blocks


def _with_padding_row(table, axis):
    """`table` with a row (or column) of zeros first: our padding id 0."""
    pad_width = [(0, 0)] * table.ndim
    pad_width[axis] = (ID_OFFSET, 0)
    return np.pad(table, pad_width)


def _to_ours(get, arguments):
    """Our weights (path -> array) from T5's tensors (`get(name, shape)`)."""
    d = arguments["hidden_dim"]
    heads = arguments["num_heads"]
    head_dim = AttentionSettings.get(arguments["attention"]).key_dim(d, heads)
    inner = heads * head_dim
    ffn = arguments["intermediate_dim"]
    vocabulary = arguments["vocabulary_size"] - ID_OFFSET
    buckets = arguments["position"]["num_buckets"]
    gated = is_gated(arguments["activation"])
    shared = get("shared.weight", (vocabulary, d))
    padding_logit = np.zeros((vocabulary + ID_OFFSET,), np.float32)
    padding_logit[0] = PADDING_LOGIT
    ours = {
        "token_embedding/token_embedding/embeddings": _with_padding_row(shared, 0),
        "logits/bias": padding_logit,
        "encoder_output_norm/scale": get("encoder.final_layer_norm.weight", (d,)),
        "decoder_output_norm/scale": get("decoder.final_layer_norm.weight", (d,)),
    }
    for stack in ("encoder", "decoder"):
        ours[f"{stack}_position_bias/relative_position_bias/embeddings"] = get(
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            (buckets, heads),
        )
    if not arguments["tie_embeddings"]:
        # (vocabulary, hidden) -> (hidden, our vocabulary)
        ours["logits/kernel"] = _with_padding_row(
            get("lm_head.weight", (vocabulary, d)).T, 1
        )
    blocks = _blocks(arguments["num_encoder_layers"], arguments["num_decoder_layers"])
    for block, hf, attentions, hf_feed_forward in blocks:
        for attention, hf_attention, hf_norm in attentions:
            for projection, hf_projection in (
                ("query", "q"),
                ("key", "k"),
                ("value", "v"),
            ):
                weight = get(f"{hf}{hf_attention}.{hf_projection}.weight", (inner, d))
                # (out, in) -> (hidden_dim, heads, head_dim)
                ours[f"{block}/{attention}/{projection}/kernel"] = weight.T.reshape(
                    d, heads, head_dim
                )
            weight = get(f"{hf}{hf_attention}.o.weight", (d, inner))
            # (heads * head_dim, hidden_dim) -> (heads, head_dim, hidden_dim)
            ours[f"{block}/{attention}/attention_output/kernel"] = weight.T.reshape(
                heads, head_dim, d
            )
            ours[f"{block}/{attention}_norm/scale"] = get(f"{hf}{hf_norm}.weight", (d,))
        dense = f"{hf}{hf_feed_forward}DenseReluDense."
        prefix = f"{block}/feed_forward/"
        if gated:
            # T5's `act(wi_0 x) * wi_1 x`: wi_0 is the gate.
            ours[f"{prefix}gate_dense/kernel"] = get(f"{dense}wi_0.weight", (ffn, d)).T
            ours[f"{prefix}intermediate_dense/kernel"] = get(
                f"{dense}wi_1.weight", (ffn, d)
            ).T
        else:
            ours[f"{prefix}intermediate_dense/kernel"] = get(
                f"{dense}wi.weight", (ffn, d)
            ).T
        ours[f"{prefix}output_dense/kernel"] = get(f"{dense}wo.weight", (d, ffn)).T
        ours[f"{block}/feed_forward_norm/scale"] = get(
            f"{hf}{hf_feed_forward}layer_norm.weight", (d,)
        )
    return ours


def _ties_lm_head(config, weights):
    """Whether `lm_head` is the shared embedding, as `transformers` decides
    it: untied where the file holds an `lm_head.weight` that differs from
    `shared.weight`, tied where it holds none or the same; without weights,
    the config's `tie_word_embeddings`."""
    if weights is None or "lm_head.weight" not in weights:
        return config.get("tie_word_embeddings", True) is not False
    shared = weights.get("shared.weight")
    head = weights["lm_head.weight"]
    return (
        shared is not None
        and head.shape == shared.shape
        and bool(np.array_equal(head, shared))
    )


def _check_copies(weights, source):
    """The encoder's and decoder's `embed_tokens` (and a tied `lm_head`)
    must be the shared embedding; returns their names."""
    shared = weights.get("shared.weight")
    names = set()
    for name in _EMBEDDING_COPIES:
        if name in weights:
            names.add(name)
            if shared is not None and not np.array_equal(weights[name], shared):
                raise ValueError(
                    f"The tensor {name!r} of {source} differs from "
                    "'shared.weight': T5's encoder and decoder share one "
                    "embedding."
                )
    return names


@shared_docstrings
def load_model(directory, config, weights, **overrides):
    """A `Transformer` holding a T5 checkpoint's weights.

    Args:
        {{load_model_args}}
        {{overrides}}

    Returns:
        A `keras_attn.models.Transformer` whose `logits[..., 1:]` are
        T5's (see the module docstring).
    """
    source = f"the checkpoint {str(directory)!r}"
    check_overrides("T5", overrides, OVERRIDES)
    arguments = model_arguments(config, _ties_lm_head(config, weights))
    model = Transformer(**with_flash_attention(arguments, overrides))
    if weights is None:
        return model
    # A tied `lm_head` is the shared embedding (`_ties_lm_head`).
    accounted = _check_copies(weights, source) | {"lm_head.weight"}
    return load_weights(
        model, weights, lambda get: _to_ours(get, arguments), "T5", source, accounted
    )


# === Export: ours -> T5's ===


def _t5_config(model):
    """The `T5ForConditionalGeneration` config of a `Transformer`'s options."""
    projections = {}
    for theirs, ours in _ACTIVATIONS.items():
        projections.setdefault(ours, theirs)  # "gated-gelu", not its alias
    if model.activation not in projections:
        refuse_export("T5", "activation", model.activation, "T5 has no such network")
    position = model.position_scheme
    if position.name != "relative":
        refuse_export("T5", "position", model.position, "T5's positions are relative")
    config = {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "is_encoder_decoder": True,
        "vocab_size": model.vocabulary_size - ID_OFFSET,
        "d_model": model.hidden_dim,
        "d_kv": model.attention.key_dim(model.hidden_dim, model.num_heads),
        "d_ff": model.intermediate_dim,
        "num_layers": model.num_encoder_layers,
        "num_decoder_layers": model.num_decoder_layers,
        "num_heads": model.num_heads,
        "relative_attention_num_buckets": position.num_buckets,
        "relative_attention_max_distance": position.max_distance,
        "dropout_rate": model.dropout,
        "layer_norm_epsilon": model.layer_norm_epsilon,
        "feed_forward_proj": projections[model.activation],
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
        "n_positions": model.max_sequence_length,
        "tie_word_embeddings": model.tie_embeddings,
    }
    scaled = model.logits_scale != 1.0
    if scaled != _scales_decoder_output(config):
        config["scale_decoder_outputs"] = scaled
    return config


def export(model, directory):
    """Writes a `Transformer` with T5's options as a T5 checkpoint.

    The model must have what `from_preset` of a T5 checkpoint builds
    (pre-norm RMS blocks without biases, relative positions, unscaled
    attention scores, one shared embedding, our padding id 0 before T5's
    ids); another option is refused, named. Writes `config.json` and
    `model.safetensors` (the load mapping run backwards, our padding id
    taken back out); `transformers`' `from_pretrained` loads them.

    Args:
        model: a `keras_attn.models.Transformer`.
        directory: the folder to write (created if missing).

    Returns:
        The directory as a `pathlib.Path`.
    """
    check_export_class(model, Transformer, "T5")
    config = _t5_config(model)
    arguments = model_arguments(config, model.tie_embeddings)
    if model.attention.head_dim is not None:
        # Set, even to `d_model / num_heads`: the same checkpoint.
        arguments["attention"]["head_dim"] = model.attention.head_dim
    return write_exported_checkpoint(
        model, directory, "T5", config, arguments, lambda get: _to_ours(get, arguments)
    )


def export_tokenizer(tokenizer, directory):
    """Writes a T5 checkpoint's tokenizer back: `tokenizer.json` (or
    `spiece.model`) and a `tokenizer_config.json` naming its special tokens.

    Args:
        tokenizer: the tokenizer loaded with the checkpoint (a
            `keras_attn.text.checkpoint_tokenizer.CheckpointTokenizer`).
        directory: the checkpoint folder being written.

    Raises:
        TypeError: another tokenizer (ours, `SubwordTokenizer`, has other
            special ids than T5's).
    """
    import json
    from pathlib import Path

    from keras_attn.hf.tokenizer import HFTokenizer

    inner = getattr(tokenizer, "tokenizer", tokenizer)
    if not isinstance(inner, HFTokenizer) or inner.end_id is None:
        raise TypeError(
            "A T5 export writes the tokenizer loaded with a T5 checkpoint. "
            f"Received: tokenizer={tokenizer!r:.100}"
        )
    directory = Path(directory)
    settings = {
        "tokenizer_class": "T5Tokenizer",
        "eos_token": inner.piece(inner.end_id),
        "pad_token": inner.piece(0),
    }
    if inner.is_sentencepiece:
        (directory / "spiece.model").write_bytes(inner.encoder.serialized_model_proto())
    else:
        inner.encoder.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(settings, indent=2) + "\n"
    )


# === A Translator of a checkpoint ===


def load_tokenizer(directory, config, vocabulary_size=None):
    """The checkpoint's tokenizer (`tokenizer.json`) with our ids.

    A `keras_attn.text.checkpoint_tokenizer.CheckpointTokenizer` over
    `keras_attn.hf.tokenizer.HFTokenizer`: T5's ids plus `ID_OFFSET`, our
    padding id 0, the decoder's start id `decoder_start_token_id + 1` and
    the end id `</s> + 1`. Its end token must be the config's
    `eos_token_id`.

    Args:
        directory: the checkpoint directory.
        config: its `config.json`.
        vocabulary_size: the model's `vocabulary_size`. Defaults to
            `None`, meaning the config's `vocab_size + ID_OFFSET`.
    """
    from keras_attn.hf.tokenizer import HFTokenizer
    from keras_attn.text.checkpoint_tokenizer import CheckpointTokenizer

    tokenizer = HFTokenizer.from_directory(directory)
    end = _field(config, "eos_token_id")
    if tokenizer.end_id != end:
        raise ValueError(
            f"The tokenizer files of {str(directory)!r} disagree with "
            f"config.json: their end token is id {tokenizer.end_id}. "
            f"Received: eos_token_id={end}"
        )
    if vocabulary_size is None:
        vocabulary_size = _field(config, "vocab_size") + ID_OFFSET
    return CheckpointTokenizer(
        tokenizer,
        vocabulary_size,
        pad_id=0,
        id_offset=ID_OFFSET,
        start_id=_field(config, "decoder_start_token_id") + ID_OFFSET,
    )


def load_translator(translator_class, source, dtype=None, **options):
    """A `Translator` of a T5 checkpoint: its model and tokenizer
    (`keras_attn.hf.tasks.load_translator`, which has the arguments).

    The sentences are T5's inputs, task prefix included (`"translate
    English to German: ..."`).
    """
    # Not at the top: `tasks` imports keras_attn.text, and with it TensorFlow.
    from keras_attn.hf import tasks

    return tasks.load_translator(
        translator_class, source, dtype, MODEL_TYPES, **options
    )
