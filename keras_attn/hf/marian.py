"""Marian checkpoints (`MarianMTModel`, OPUS-MT) as `keras_attn.models.Transformer`.

Marian is the paper's post-norm encoder-decoder with sinusoidal positions,
token embeddings scaled by `sqrt(d_model)` and shared between encoder,
decoder and the pre-softmax projection. It maps onto options of our
`Transformer`:

| config.json | `Transformer` |
|---|---|
| `d_model`, `encoder_layers`, `decoder_layers`, `*_attention_heads`, `*_ffn_dim` | `hidden_dim`, `num_encoder_layers`, `num_decoder_layers`, `num_heads`, `intermediate_dim` |
| `vocab_size` | `vocabulary_size=vocab_size + 1` (our padding id 0, below) |
| `activation_function` (`swish`, `gelu`, `relu`) | `activation` (`silu`, `gelu`, `relu`) |
| post-norm blocks, `nn.LayerNorm` (epsilon 1e-5) | `normalize_first=False`, `layer_norm_epsilon=1e-5` |
| `scale_embedding: true`, shared embeddings, tied `lm_head` | `TokenAndPositionEmbedding`'s `sqrt(d)` scaling, `tie_embeddings=True` |
| `final_logits_bias` | `logits_bias=True` |
| sinusoidal positions, sines in the first half of the features, cosines in the second | `position="sinusoidal"` (sines and cosines interleaved), the features permuted (below) |
| `max_position_embeddings` | `max_sequence_length` |
| `dropout`, `attention_dropout` | `dropout`, `attention={"dropout": ...}` |

Two layouts differ, and both are exact re-arrangements:

- **Features.** Marian's sinusoids put `sin(p w_i)` at feature `i` and
  `cos(p w_i)` at feature `d/2 + i`; ours interleave them (`2i`, `2i + 1`).
  Every operation on the residual stream (layer norm, the projections
  in and out of it, the tied logits) is unchanged by one fixed permutation
  of its features applied to every weight that reads or writes it, so the
  loaded model holds Marian's weights with the model dimension permuted
  into our layout (`marian_feature_order`); its logits are Marian's.
- **Ids.** Marian's `<pad>` is both padding and the decoder's start token;
  ours are two ids (`keras_attn.text.marian_tokenizer`): our id of Marian
  id `m` is `m + 1`, and our id 0 is padding, with a zero embedding and a
  logits bias of `PADDING_LOGIT` (never predicted). `logits[..., 1:]` are
  Marian's logits.

A config field that maps to nothing we have (`scale_embedding: false`,
separate encoder/decoder vocabularies, another activation, layer drop,
...) is refused naming the field and value: a checkpoint is loaded exactly
or not at all. `export` writes a `Transformer` of these options back as a
`MarianMTModel` checkpoint.
"""

import dataclasses
import json

import numpy as np

from keras_attn.hf.files import (
    OVERRIDES,
    check_export_class,
    check_overrides,
    check_token_ids,
    invert_mapping,
    load_weights,
    refuse_config_field,
    with_flash_attention,
    write_checkpoint,
)
from keras_attn.models.transformer import Transformer
from keras_attn.shared_docstrings import shared_docstrings

MODEL_CLASS = Transformer
MODEL_TYPES = ("marian",)
# `export` writes the tokenizer itself: the exported ids depend on it.
EXPORT_WITH_TOKENIZER = True
# Marian's `nn.LayerNorm`s use torch's default epsilon.
LAYER_NORM_EPSILON = 1e-5
# The logits bias of our padding id: never predicted, no probability mass.
PADDING_LOGIT = -1.0e4
MAX_WAVELENGTH = 10000.0
# `transformers.MarianConfig`'s defaults, for fields a config.json leaves out.
_DEFAULTS = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
# transformers' activation names (ACT2FN) -> Keras's.
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
_ACTIVATION_NAMES = {"relu": "relu", "gelu": "gelu", "silu": "swish", "swish": "swish"}


def _refuse(field, value, why):
    refuse_config_field("Marian", field, value, why)


def _field(config, name):
    return config.get(name, _DEFAULTS[name])


def marian_feature_order(hidden_dim):
    """`order` with `ours[..., j] == marian[..., order[j]]` for the model dimension.

    Our sinusoid pair `i` is at features `2i` (sine) and `2i + 1`
    (cosine); Marian's at `i` and `hidden_dim / 2 + i`.
    """
    half = hidden_dim // 2
    # (half, 2) -> (hidden_dim,): i, half + i, interleaved.
    return np.stack([np.arange(half), half + np.arange(half)], axis=1).reshape(-1)


def marian_positions(length, hidden_dim):
    """Marian's sinusoid table `(length, hidden_dim)`, as transformers builds it."""
    positions = np.arange(length, dtype=np.float64)[:, None]
    frequencies = MAX_WAVELENGTH ** (-2.0 * np.arange(hidden_dim // 2) / hidden_dim)
    angles = positions * frequencies[None, :]  # (length, hidden_dim / 2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def model_arguments(config):
    """`Transformer` arguments of a Marian `config.json`; refuses what we lack.

    Returns:
        A dict of `keras_attn.models.Transformer` arguments.
    """
    fields = {name: _field(config, name) for name in _DEFAULTS}
    if not fields["scale_embedding"]:
        _refuse(
            "scale_embedding",
            fields["scale_embedding"],
            "turns off the sqrt(d_model) scaling our token embeddings always have",
        )
    for name in ("share_encoder_decoder_embeddings", "tie_word_embeddings"):
        if not fields[name]:
            _refuse(name, fields[name], "unties embeddings our Transformer shares")
    vocabulary = fields["vocab_size"]
    if fields["decoder_vocab_size"] not in (None, vocabulary):
        _refuse(
            "decoder_vocab_size",
            fields["decoder_vocab_size"],
            f"differs from vocab_size={vocabulary} (our Transformer has one "
            "shared vocabulary)",
        )
    for encoder_field, decoder_field in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if fields[encoder_field] != fields[decoder_field]:
            _refuse(
                decoder_field,
                fields[decoder_field],
                f"differs from {encoder_field}={fields[encoder_field]} (our "
                "encoder and decoder blocks have one size)",
            )
    activation = fields["activation_function"]
    if activation not in _ACTIVATIONS:
        _refuse(
            "activation_function",
            activation,
            f"is none of the activations we map ({', '.join(_ACTIVATIONS)})",
        )
    for name in ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop"):
        if fields[name]:
            _refuse(name, fields[name], "has no counterpart in our blocks")
    special_ids = ("pad_token_id", "eos_token_id", "decoder_start_token_id")
    check_token_ids("Marian", fields, special_ids, vocabulary)
    if fields["d_model"] % 2:
        _refuse("d_model", fields["d_model"], "is odd (sines and cosines pair up)")
    return dict(
        vocabulary_size=vocabulary + 1,
        num_layers=fields["encoder_layers"],
        num_encoder_layers=fields["encoder_layers"],
        num_decoder_layers=fields["decoder_layers"],
        hidden_dim=fields["d_model"],
        num_heads=fields["encoder_attention_heads"],
        intermediate_dim=fields["encoder_ffn_dim"],
        dropout=float(fields["dropout"]),
        attention={"dropout": float(fields["attention_dropout"])},
        max_sequence_length=fields["max_position_embeddings"],
        position="sinusoidal",
        normalize_first=False,
        tie_embeddings=True,
        pad_id=0,
        activation=_ACTIVATIONS[activation],
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        normalization="layer",
        use_bias=True,
        logits_bias=True,
    )


# === Tensor names: ours <-> Marian's ===


def _blocks(num_encoder_layers, num_decoder_layers):
    """`(our block, Marian prefix, [(our attention, Marian attention), ...],
    [(our norm, Marian norm), ...])` for every block."""
    blocks = []
    for i in range(num_encoder_layers):
        blocks.append(
            (
                f"encoder_block_{i}",
                f"model.encoder.layers.{i}.",
                [("self_attention", "self_attn")],
                [
                    ("self_attention_norm", "self_attn_layer_norm"),
                    ("feed_forward_norm", "final_layer_norm"),
                ],
            )
        )
    for i in range(num_decoder_layers):
        blocks.append(
            (
                f"decoder_block_{i}",
                f"model.decoder.layers.{i}.",
                [("self_attention", "self_attn"), ("cross_attention", "encoder_attn")],
                [
                    ("self_attention_norm", "self_attn_layer_norm"),
                    ("cross_attention_norm", "encoder_attn_layer_norm"),
                    ("feed_forward_norm", "final_layer_norm"),
                ],
            )
        )
    return blocks


def _with_padding_id(table, padding_rows, value):
    """`table` with `padding_rows` entries of `value` first: our padding id 0."""
    pad_width = [(padding_rows, 0)] + [(0, 0)] * (table.ndim - 1)
    return np.pad(table, pad_width, constant_values=value)


def _to_ours(get, arguments, padding_rows=1):
    """Our weights (path -> array) from Marian's tensors (`get(name, shape)`).

    `arguments["vocabulary_size"] - 1` is Marian's vocabulary; our
    embeddings and logits bias have `padding_rows` entries before it: 1 for
    our padding id 0, 0 where the checkpoint keeps our ids (`export` with
    our own tokenizer, or none). Without `arguments["logits_bias"]` (a model of ours
    being exported) `final_logits_bias` is zeros.
    """
    d = arguments["hidden_dim"]
    heads = arguments["num_heads"]
    head_dim = d // heads
    ffn = arguments["intermediate_dim"]
    vocabulary = arguments["vocabulary_size"] - 1
    order = marian_feature_order(d)
    embeddings = get("model.shared.weight", (vocabulary, d))[:, order]
    bias = get("final_logits_bias", (1, vocabulary))[0]
    ours = {
        "token_embedding/token_embedding/embeddings": _with_padding_id(
            embeddings, padding_rows, 0
        )
    }
    if arguments["logits_bias"]:
        ours["logits/bias"] = _with_padding_id(bias, padding_rows, PADDING_LOGIT)
    blocks = _blocks(arguments["num_encoder_layers"], arguments["num_decoder_layers"])
    for block, hf, attentions, norms in blocks:
        for attention, hf_attention in attentions:
            for projection, hf_projection in (
                ("query", "q_proj"),
                ("key", "k_proj"),
                ("value", "v_proj"),
            ):
                name = f"{hf}{hf_attention}.{hf_projection}"
                weight = get(f"{name}.weight", (d, d))  # (out, in)
                # (in, out) -> (hidden_dim, heads, head_dim)
                ours[f"{block}/{attention}/{projection}/kernel"] = weight.T[
                    order
                ].reshape(d, heads, head_dim)
                ours[f"{block}/{attention}/{projection}/bias"] = get(
                    f"{name}.bias", (d,)
                ).reshape(heads, head_dim)
            name = f"{hf}{hf_attention}.out_proj"
            weight = get(f"{name}.weight", (d, d))
            # (heads * head_dim, hidden_dim) -> (heads, head_dim, hidden_dim)
            ours[f"{block}/{attention}/attention_output/kernel"] = weight.T[
                :, order
            ].reshape(heads, head_dim, d)
            ours[f"{block}/{attention}/attention_output/bias"] = get(
                f"{name}.bias", (d,)
            )[order]
        for norm, hf_norm in norms:
            ours[f"{block}/{norm}/gamma"] = get(f"{hf}{hf_norm}.weight", (d,))[order]
            ours[f"{block}/{norm}/beta"] = get(f"{hf}{hf_norm}.bias", (d,))[order]
        ours[f"{block}/feed_forward/intermediate_dense/kernel"] = get(
            f"{hf}fc1.weight", (ffn, d)
        ).T[order]
        ours[f"{block}/feed_forward/intermediate_dense/bias"] = get(
            f"{hf}fc1.bias", (ffn,)
        )
        ours[f"{block}/feed_forward/output_dense/kernel"] = get(
            f"{hf}fc2.weight", (d, ffn)
        ).T[:, order]
        ours[f"{block}/feed_forward/output_dense/bias"] = get(f"{hf}fc2.bias", (d,))[
            order
        ]
    return ours


def _check_copies(weights, arguments, source):
    """Tensors a checkpoint may hold besides the weights: tied copies of
    the shared embedding and the fixed sinusoids. Each must be what it
    claims; returns their names."""
    d = arguments["hidden_dim"]
    shared = weights.get("model.shared.weight")
    names = set()
    for name in (
        "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight",
        "lm_head.weight",
    ):
        if name in weights:
            names.add(name)
            if shared is not None and not np.array_equal(weights[name], shared):
                raise ValueError(
                    f"The tensor {name!r} of {source} differs from "
                    "'model.shared.weight': the config ties them "
                    "(share_encoder_decoder_embeddings, tie_word_embeddings)."
                )
    for name in (
        "model.encoder.embed_positions.weight",
        "model.decoder.embed_positions.weight",
    ):
        if name in weights:
            names.add(name)
            table = weights[name]
            expected = marian_positions(table.shape[0], d)
            if table.shape != expected.shape or not np.allclose(
                table, expected, atol=1e-4
            ):
                raise ValueError(
                    f"The tensor {name!r} of {source} is not Marian's sinusoid "
                    "table: keras-attn computes the positions and cannot "
                    "load learned ones."
                )
    return names


@shared_docstrings
def load_model(directory, config, weights, **overrides):
    """A `Transformer` holding a Marian checkpoint's weights.

    Args:
        {{load_model_args}}
        {{overrides}}

    Returns:
        A `keras_attn.models.Transformer` whose `logits[..., 1:]` are
        Marian's (see the module docstring).
    """
    source = f"the checkpoint {str(directory)!r}"
    arguments = model_arguments(config)
    check_overrides("Marian", overrides, OVERRIDES)
    model = Transformer(**with_flash_attention(arguments, overrides))
    if weights is None:
        return model
    return load_weights(
        model,
        weights,
        lambda get: _to_ours(get, arguments),
        "Marian",
        source,
        accounted=_check_copies(weights, arguments, source),
    )


def load_tokenizer(directory, config):
    """The checkpoint's `keras_attn.text.marian_tokenizer.MarianTokenizer`.

    Its special tokens must be the ids `config.json` declares.
    """
    from keras_attn.text.marian_tokenizer import ID_OFFSET, MarianTokenizer

    tokenizer = MarianTokenizer.load(directory)
    declared = {
        "pad_token_id": (tokenizer.start_id, _field(config, "decoder_start_token_id")),
        "eos_token_id": (tokenizer.end_id, _field(config, "eos_token_id")),
    }
    for name, (ours, marian) in declared.items():
        if ours - ID_OFFSET != marian:
            raise ValueError(
                f"The tokenizer files of {str(directory)!r} disagree with "
                f"config.json: the token is id {ours - ID_OFFSET} in vocab.json. "
                f"Received: {name}={marian}"
            )
    if _field(config, "pad_token_id") != _field(config, "decoder_start_token_id"):
        _refuse(
            "decoder_start_token_id",
            _field(config, "decoder_start_token_id"),
            "differs from pad_token_id (Marian's tokenizer starts the decoder "
            "with <pad>)",
        )
    if tokenizer.vocabulary_size != _field(config, "vocab_size") + ID_OFFSET:
        _refuse(
            "vocab_size",
            _field(config, "vocab_size"),
            f"differs from vocab.json's {len(tokenizer.vocabulary)} entries",
        )
    return tokenizer


# === Export back ===


def _check_exportable(model):
    """Refuses a model whose options Marian cannot express, naming them."""
    check_export_class(model, Transformer, "Marian")
    scheme = model.position_scheme
    required = {
        "position": (model.position, "sinusoidal"),
        "max_wavelength": (getattr(scheme, "max_wavelength", None), MAX_WAVELENGTH),
        "normalize_first": (model.normalize_first, False),
        "normalization": (model.normalization, "layer"),
        "use_bias": (model.use_bias, True),
        "tie_embeddings": (model.tie_embeddings, True),
        "layer_norm_epsilon": (model.layer_norm_epsilon, LAYER_NORM_EPSILON),
        "scale_embeddings": (model.scale_embeddings, True),
        "logits_scale": (model.logits_scale, 1.0),
    }
    for name, (value, expected) in required.items():
        if value != expected:
            raise ValueError(
                f"A Marian checkpoint cannot express this model: it needs "
                f"{name}={expected!r}. Received: {name}={value!r}"
            )
    # Marian's attention is plain multi-head attention: of the settings,
    # only dropout and the choice of kernel may differ from the defaults.
    settings = _attention_settings(model)
    defaults = type(settings)()
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.name in ("dropout", "flash_attention"):
            continue
        if field.name == "num_key_value_heads" and value == model.num_heads:
            continue
        if value != getattr(defaults, field.name):
            raise ValueError(
                "A Marian checkpoint cannot express this model's attention "
                f"setting. Received: {field.name}={value!r}"
            )
    if model.activation not in _ACTIVATION_NAMES:
        raise ValueError(
            "A Marian checkpoint's activation is one of "
            f"{sorted(_ACTIVATION_NAMES)}. Received: activation={model.activation!r}"
        )


def _attention_settings(model):
    """The model's `AttentionSettings` (`model.attention`)."""
    settings = getattr(model, "attention", None)
    if dataclasses.is_dataclass(settings):
        return settings
    return model.attention_settings  # before models took `attention=...`


def export(model, directory, tokenizer=None):
    """Writes a `Transformer` as a `MarianMTModel` checkpoint.

    `config.json`, `model.safetensors`, `generation_config.json` and, with
    a tokenizer, its files. With a
    `keras_attn.text.marian_tokenizer.MarianTokenizer` (a model loaded
    from a Marian checkpoint) our padding id 0 is taken out, giving back
    Marian's ids; with a `keras_attn.text.SubwordTokenizer` (or none) the
    ids stay ours: `pad_token_id=0` and the tokenizer's start and end ids.

    Args:
        model: a `keras_attn.models.Transformer` with Marian's options:
            `position="sinusoidal"`, `normalize_first=False`,
            `tie_embeddings=True`, `layer_norm_epsilon=1e-5`, layer norms,
            biases, relu / gelu / silu (others are refused, named).
        directory: where to write; created if missing.
        tokenizer: the model's tokenizer, or `None`. Defaults to `None`.
    """
    from keras_attn.text.marian_tokenizer import MarianTokenizer
    from keras_attn.text.tokenizer import SubwordTokenizer

    _check_exportable(model)
    marian_ids = isinstance(tokenizer, MarianTokenizer)
    if marian_ids:
        if tokenizer.vocabulary_size != model.vocabulary_size:
            raise ValueError(
                "The tokenizer and the model disagree on the vocabulary size. "
                f"Received: tokenizer.vocabulary_size={tokenizer.vocabulary_size}, "
                f"model.vocabulary_size={model.vocabulary_size}"
            )
        pad = start = tokenizer.start_id - 1
        end = tokenizer.end_id - 1
    elif tokenizer is None or isinstance(tokenizer, SubwordTokenizer):
        # Our fixed special ids (`keras_attn.text.tokenizer`).
        pad, start, end = model.pad_id, 2, 3
        if tokenizer is not None:
            start, end = tokenizer.start_id, tokenizer.end_id
    else:
        raise TypeError(
            "`tokenizer` must be a keras_attn.text.SubwordTokenizer, a "
            f"MarianTokenizer or None. Received: tokenizer={tokenizer!r:.100}"
        )
    # Marian's ids are ours less the padding id 0, or ours unchanged.
    padding_rows = 1 if marian_ids else 0
    vocabulary = model.vocabulary_size - padding_rows
    config = {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": vocabulary,
        "decoder_vocab_size": vocabulary,
        "d_model": model.hidden_dim,
        "encoder_layers": model.num_encoder_layers,
        "decoder_layers": model.num_decoder_layers,
        "encoder_attention_heads": model.num_heads,
        "decoder_attention_heads": model.num_heads,
        "encoder_ffn_dim": model.intermediate_dim,
        "decoder_ffn_dim": model.intermediate_dim,
        "activation_function": _ACTIVATION_NAMES[model.activation],
        "max_position_embeddings": model.max_sequence_length,
        "dropout": model.dropout,
        "attention_dropout": _attention_settings(model).dropout,
        "activation_dropout": 0.0,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "pad_token_id": pad,
        "eos_token_id": end,
        "decoder_start_token_id": start,
        "forced_eos_token_id": end,
        "dtype": "float32",
    }
    generation = {
        "pad_token_id": pad,
        "eos_token_id": end,
        "decoder_start_token_id": start,
        "forced_eos_token_id": end,
        # What our generator never produces: padding and the start id.
        "bad_words_ids": [[i] for i in sorted({pad, start})],
        "max_length": model.max_sequence_length,
    }
    # The load mapping run backwards, for this model's options.
    arguments = {**model_arguments(config), "logits_bias": model.logits_bias}
    tensors = invert_mapping(
        model, lambda get: _to_ours(get, arguments, padding_rows), "Marian"
    )
    directory = write_checkpoint(directory, tensors, config)
    (directory / "generation_config.json").write_text(
        json.dumps(generation, indent=2) + "\n", encoding="utf-8"
    )
    if marian_ids:
        tokenizer.save(directory)
    elif tokenizer is not None:
        _save_subword_tokenizer(tokenizer, directory)


def _save_subword_tokenizer(tokenizer, directory):
    """Our `SubwordTokenizer` in Marian's files: its SentencePiece model as
    both `source.spm` and `target.spm`, and `vocab.json` mapping each piece
    to its own id, so that `transformers.MarianTokenizer` gives our ids."""
    from keras_attn.text.marian_tokenizer import MarianTokenizer

    vocabulary = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocabulary_size)}
    if len(vocabulary) != tokenizer.vocabulary_size:
        raise ValueError(
            "The tokenizer has repeated pieces; vocab.json needs one id each. "
            f"Received: {tokenizer!r}"
        )
    MarianTokenizer(
        tokenizer.model_proto,
        tokenizer.model_proto,
        vocabulary,
        unk_token=tokenizer.id_to_piece(tokenizer.unk_id),
        eos_token=tokenizer.id_to_piece(tokenizer.end_id),
        pad_token=tokenizer.id_to_piece(tokenizer.pad_id),
    ).save(directory)


# === A Translator of a checkpoint ===


def load_translator(translator_class, source, dtype=None, **options):
    """A `Translator` of a Marian checkpoint: its model and tokenizer
    (`keras_attn.hf.tasks.load_translator`, which has the arguments)."""
    # Not at the top: `tasks` imports keras_attn.text, and with it TensorFlow.
    from keras_attn.hf import tasks

    return tasks.load_translator(
        translator_class, source, dtype, MODEL_TYPES, **options
    )
