"""Llama, Mistral and Qwen2 checkpoints as `keras_attn.models.TransformerLM`.

The three `*ForCausalLM` families are one architecture: pre-norm decoder
blocks with RMS norms, rotary positions (`rope_theta`), grouped-query
attention and a SwiGLU feed-forward network. Each maps onto options of our
`TransformerLM`:

| config.json | `TransformerLM` |
|---|---|
| `vocab_size`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size` | `vocabulary_size`, `hidden_dim`, `num_layers`, `num_heads`, `intermediate_dim` |
| `num_key_value_heads` | `attention={"num_key_value_heads": ...}` |
| `head_dim` (Mistral-Nemo, Qwen3-style configs) | `attention={"head_dim": ...}` where it is not `hidden_size / num_attention_heads`, else left out |
| `hidden_act: "silu"` | `activation="swiglu"` (`gate_proj` -> `gate_dense`, `up_proj` -> `intermediate_dense`) |
| `rms_norm_eps` | `normalization="rms"`, `layer_norm_epsilon` |
| `rope_theta`, `rope_scaling` of type `linear` | `position="rotary"` with that wavelength and scaling factor |
| `tie_word_embeddings` | `tie_embeddings` |
| `max_position_embeddings` | `max_sequence_length` |
| `sliding_window` (Mistral; Qwen2 with `use_sliding_window`) | `attention={"sliding_window": ...}` |
| Qwen2's q/k/v biases, Llama's `attention_bias` / `mlp_bias` | `use_bias=True`; the biases the checkpoint lacks are zeros |

Token embeddings are not scaled by `sqrt(hidden_dim)` (`scale_embeddings`
off). A field that maps to nothing we have (another `hidden_act`, a
`rope_scaling` type other than `linear`, ...) is refused naming the field
and its value: a checkpoint is loaded exactly or not at all.

`export(model, directory, model_type)` writes a `TransformerLM` of these
options back as a checkpoint of that family (`LlamaForCausalLM` by
default), and `export_tokenizer` the tokenizer loaded with it.
"""

import json
from pathlib import Path

import keras
import numpy as np

from keras_attn.hf.files import (
    invert_mapping,
    load_weights,
    refuse_config_field,
    with_flash_attention,
    write_checkpoint,
)
from keras_attn.layers.attention.attention_settings import AttentionSettings
from keras_attn.models.transformer_lm import TransformerLM
from keras_attn.shared_docstrings import shared_docstrings

MODEL_CLASS = TransformerLM
MODEL_TYPES = ("llama", "mistral", "qwen2")
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}
# The rotary scalings we have: none, and linear position interpolation.
_ROPE_TYPES = ("default", "linear")
# Tensors a checkpoint may hold that are not weights (old Llama exports).
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# The biases a Qwen2 checkpoint holds (the others are zeros, `_check_exportable`).
_QWEN2_BIASES = ("q_proj.bias", "k_proj.bias", "v_proj.bias")


def _rotation(config):
    """`(max_wavelength, scaling_factor)` of the rotary positions."""
    model_type = config["model_type"]
    parameters = config.get("rope_parameters")
    scaling = config.get("rope_scaling")
    if parameters is None:  # transformers < 5: rope_theta and rope_scaling
        parameters = {"rope_theta": config.get("rope_theta", 10000.0)}
        if scaling:
            parameters.update(scaling)
    elif scaling and scaling != parameters:
        parameters = {**parameters, **scaling}
    if not isinstance(parameters, dict):
        refuse_config_field(
            model_type, "rope_parameters", parameters, "is not an object"
        )
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    if rope_type not in _ROPE_TYPES:
        refuse_config_field(
            model_type,
            "rope_scaling.rope_type",
            rope_type,
            "is a rotary scaling keras-attn does not have (it has "
            "'default' and 'linear')",
        )
    factor = float(parameters.get("factor", 1.0)) if rope_type == "linear" else 1.0
    return float(parameters.get("rope_theta", 10000.0)), factor


def model_arguments(config):
    """The `TransformerLM` arguments of a Llama, Mistral or Qwen2 config.

    Raises:
        ValueError: a field that maps to nothing keras-attn has (named with
            its value).
    """
    model_type = config["model_type"]
    if model_type not in MODEL_TYPES:
        refuse_config_field(
            model_type, "model_type", model_type, f"is not one of {MODEL_TYPES}"
        )
    hidden_act = config.get("hidden_act", "silu")
    if hidden_act != "silu":
        refuse_config_field(
            model_type, "hidden_act", hidden_act, "is not 'silu' (SwiGLU)"
        )
    hidden_dim = int(config["hidden_size"])
    num_heads = int(config["num_attention_heads"])
    max_wavelength, scaling_factor = _rotation(config)
    attention = {
        "num_key_value_heads": int(config.get("num_key_value_heads") or num_heads),
        "dropout": float(config.get("attention_dropout", 0.0)),
    }
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim * num_heads != hidden_dim:
        # Heads of their own size (Mistral-Nemo: 32 heads of 128 in 5120).
        attention["head_dim"] = _head_dim(model_type, head_dim)
    window = _sliding_window(config)
    if window is not None:
        attention["sliding_window"] = window
    use_bias = bool(
        model_type == "qwen2"
        or config.get("attention_bias", False)
        or config.get("mlp_bias", False)
    )
    return {
        "vocabulary_size": int(config["vocab_size"]),
        "num_layers": int(config["num_hidden_layers"]),
        "hidden_dim": hidden_dim,
        "num_heads": num_heads,
        "intermediate_dim": int(config["intermediate_size"]),
        "dropout": 0.0,
        "max_sequence_length": int(config.get("max_position_embeddings", 2048)),
        "position": _position(max_wavelength, scaling_factor),
        "normalize_first": True,
        "tie_embeddings": bool(config.get("tie_word_embeddings", False)),
        "pad_id": _pad_id(config),
        "activation": "swiglu",
        "layer_norm_epsilon": float(config.get("rms_norm_eps", 1e-6)),
        "normalization": "rms",
        "use_bias": use_bias,
        "scale_embeddings": False,
        "attention": attention,
    }


def _head_dim(model_type, head_dim):
    """The config's `head_dim` as ours, or refused naming it."""
    try:
        return AttentionSettings(head_dim=head_dim).head_dim
    except (TypeError, ValueError):
        refuse_config_field(
            model_type, "head_dim", head_dim, "is not a positive integer"
        )


def _position(max_wavelength, scaling_factor):
    """The `position` argument: rotary positions of this wavelength."""
    return {
        "name": "rotary",
        "max_wavelength": max_wavelength,
        "scaling_factor": scaling_factor,
    }


def _sliding_window(config):
    """The sliding window of every layer, or `None`; per-layer windows refused."""
    model_type = config["model_type"]
    if model_type == "qwen2" and not config.get("use_sliding_window", False):
        return None
    layer_types = config.get("layer_types")
    if layer_types and len(set(layer_types)) > 1:
        refuse_config_field(
            model_type,
            "layer_types",
            layer_types,
            "mixes full and sliding attention across layers",
        )
    if model_type == "qwen2":
        layers = int(config["num_hidden_layers"])
        if int(config.get("max_window_layers", layers)) < layers:
            refuse_config_field(
                model_type,
                "max_window_layers",
                config.get("max_window_layers"),
                "gives some layers full attention and others a window",
            )
    window = config.get("sliding_window")
    return None if window is None else int(window)


def _pad_id(config):
    """The id our model masks as padding and never generates.

    Hugging Face's causal LMs take an attention mask instead of a padding
    id; ours masks `pad_id` as a key and suppresses it in generation, so
    it must be a token the model neither reads nor writes: the config's
    `pad_token_id` where it declares one apart from its end id, else the
    last id of the vocabulary (an unused padding row in Qwen2 and Llama 3,
    a rare piece in small vocabularies). `from_preset(..., pad_id=...)`
    chooses another.
    """
    pad = config.get("pad_token_id")
    end = config.get("eos_token_id")
    ends = end if isinstance(end, list) else [end]
    if isinstance(pad, int) and pad not in ends and pad != config.get("bos_token_id"):
        return pad
    return int(config["vocab_size"]) - 1


def _to_ours(get, arguments, has_tensor):
    """Our weights (path -> array) from the checkpoint's tensors
    (`get(name, shape)`); a bias for which `has_tensor(name)` is false is
    zeros."""
    hidden = arguments["hidden_dim"]
    heads = arguments["num_heads"]
    key_heads = arguments["attention"]["num_key_value_heads"]
    head_dim = AttentionSettings.get(arguments["attention"]).key_dim(hidden, heads)
    inner = arguments["intermediate_dim"]
    vocab = arguments["vocabulary_size"]
    with_bias = arguments["use_bias"]

    def optional_bias(name, shape):
        # A bias the checkpoint lacks is zero: the same function.
        return get(name, shape) if has_tensor(name) else np.zeros(shape, "float32")

    mapped = {
        "token_embedding/token_embedding/embeddings": get(
            "model.embed_tokens.weight", (vocab, hidden)
        )
    }
    for i in range(arguments["num_layers"]):
        hf = f"model.layers.{i}."
        ours = f"decoder_block_{i}/"
        for name, proj, count in (
            ("query", "q_proj", heads),
            ("key", "k_proj", key_heads),
            ("value", "v_proj", key_heads),
        ):
            kernel = get(f"{hf}self_attn.{proj}.weight", (count * head_dim, hidden))
            # (out, in) -> (hidden, heads, head_dim)
            mapped[f"{ours}self_attention/{name}/kernel"] = kernel.T.reshape(
                hidden, count, head_dim
            )
            if with_bias:
                bias = optional_bias(f"{hf}self_attn.{proj}.bias", (count * head_dim,))
                mapped[f"{ours}self_attention/{name}/bias"] = bias.reshape(
                    count, head_dim
                )
        output = get(f"{hf}self_attn.o_proj.weight", (hidden, heads * head_dim))
        # (hidden, heads * head_dim) -> (heads, head_dim, hidden)
        mapped[f"{ours}self_attention/attention_output/kernel"] = output.T.reshape(
            heads, head_dim, hidden
        )
        for name, proj, shape in (
            ("gate_dense", "gate_proj", (inner, hidden)),
            ("intermediate_dense", "up_proj", (inner, hidden)),
            ("output_dense", "down_proj", (hidden, inner)),
        ):
            mapped[f"{ours}feed_forward/{name}/kernel"] = get(
                f"{hf}mlp.{proj}.weight", shape
            ).T
            if with_bias:
                mapped[f"{ours}feed_forward/{name}/bias"] = optional_bias(
                    f"{hf}mlp.{proj}.bias", (shape[0],)
                )
        if with_bias:
            mapped[f"{ours}self_attention/attention_output/bias"] = optional_bias(
                f"{hf}self_attn.o_proj.bias", (hidden,)
            )
        mapped[f"{ours}self_attention_norm/scale"] = get(
            f"{hf}input_layernorm.weight", (hidden,)
        )
        mapped[f"{ours}feed_forward_norm/scale"] = get(
            f"{hf}post_attention_layernorm.weight", (hidden,)
        )
    mapped["output_norm/scale"] = get("model.norm.weight", (hidden,))
    if not arguments["tie_embeddings"]:
        mapped["logits/kernel"] = get("lm_head.weight", (vocab, hidden)).T
        mapped["logits/bias"] = np.zeros((vocab,), "float32")  # Llama has none.
    return mapped


@shared_docstrings
def load_model(directory, config, weights, **overrides):
    """A `TransformerLM` holding the checkpoint's weights.

    Args:
        {{load_model_args}}
        **overrides: `TransformerLM` arguments that replace the mapped ones
            (`dtype`, `pad_id`, `flash_attention`, ...).

    Returns:
        A `keras_attn.models.TransformerLM`.
    """
    source = f"the checkpoint {str(directory)!r}"
    arguments = model_arguments(config)
    model = TransformerLM(**with_flash_attention(arguments, overrides))
    if weights is None:
        return model
    # Tensors of the architecture the mapping leaves (a tied `lm_head`, a
    # bias the config has none of), and buffers.
    accounted = _hf_names(arguments) | {
        name for name in weights if name.endswith(_IGNORED_SUFFIXES)
    }
    return load_weights(
        model,
        weights,
        lambda get: _to_ours(get, arguments, weights.__contains__),
        config["model_type"],
        source,
        accounted,
    )


def _hf_names(arguments):
    """Every tensor name a checkpoint of these arguments may hold."""
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(arguments["num_layers"]):
        hf = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names += [f"{hf}self_attn.{proj}.weight", f"{hf}self_attn.{proj}.bias"]
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names += [f"{hf}mlp.{proj}.weight", f"{hf}mlp.{proj}.bias"]
        names += [f"{hf}input_layernorm.weight", f"{hf}post_attention_layernorm.weight"]
    return set(names)


# === Export back ===


def export(model, directory, model_type="llama"):
    """Writes a `TransformerLM` as a Hugging Face checkpoint of this family.

    The model must have this family's options (RMS norms, pre-norm,
    `"swiglu"`, rotary positions, unscaled embeddings; `use_bias=False`
    for Llama and Mistral, or the biases of Qwen2). Writes `config.json`
    and `model.safetensors`; `transformers`' `from_pretrained` loads them.

    Args:
        model: a `keras_attn.models.TransformerLM`.
        directory: the folder to write (created if missing).
        model_type: `"llama"`, `"mistral"` or `"qwen2"`. Defaults to
            `"llama"`.

    Returns:
        The directory as a `pathlib.Path`.

    Raises:
        ValueError: an option of `model` that the family cannot express.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"`model_type` must be one of {MODEL_TYPES}. Received: model_type={model_type!r}"
        )
    config = model.get_config()
    _check_exportable(model, config, model_type)
    key_heads = model.attention.key_value_heads(model.num_heads)
    hf_config = _hf_config(model, model_type, key_heads)
    # The load mapping run backwards.
    arguments = model_arguments(hf_config)
    if model.attention.head_dim is not None:
        # Set, even to `hidden_size / num_attention_heads`: the same mapping.
        arguments["attention"]["head_dim"] = model.attention.head_dim
    tensors = invert_mapping(
        model,
        lambda get: _to_ours(get, arguments, lambda name: name.endswith(_QWEN2_BIASES)),
        ARCHITECTURES[model_type],
    )
    return write_checkpoint(directory, tensors, hf_config)


def _to_numpy(variable):
    # float32 for the file, whatever the model's dtype policy.
    return keras.ops.convert_to_numpy(keras.ops.cast(variable, "float32"))


def _check_exportable(model, config, model_type):
    position = config.get("position")
    name = position.get("name") if isinstance(position, dict) else position
    required = {
        "normalization": ("rms", model.normalization),
        "normalize_first": (True, model.normalize_first),
        "activation": ("swiglu", model.activation),
        "position": ("rotary", name),
        "scale_embeddings": (False, config.get("scale_embeddings")),
        "use_bias": (model_type == "qwen2", model.use_bias),
        "attention.qk_norm": (False, model.attention.qk_norm),
        "attention.logit_soft_cap": (None, model.attention.logit_soft_cap),
        "attention.scale": (None, model.attention.scale),
    }
    for field, (expected, received) in required.items():
        if received != expected:
            raise ValueError(
                f"A {ARCHITECTURES[model_type]} needs {field}={expected!r}. "
                f"Received: model.{field}={received!r}"
            )
    if model.use_bias:
        values = {v.path: _to_numpy(v) for v in model.weights}
        nonzero = sorted(
            path
            for path, value in values.items()
            if path.endswith("/bias")
            and (
                "attention_output" in path
                or "feed_forward" in path
                or path == "logits/bias"
            )
            and np.any(value != 0)
        )
        if nonzero:
            raise ValueError(
                f"A {ARCHITECTURES[model_type]} has no bias at {nonzero[0]}, and "
                "this model's is not zero: it cannot be exported exactly."
            )
    elif not model.tie_embeddings:
        bias = _to_numpy(model.get_layer("logits").bias)
        if np.any(bias != 0):
            raise ValueError(
                f"A {ARCHITECTURES[model_type]} has no output bias, and this "
                "model's logits bias is not zero: it cannot be exported exactly."
            )


def _hf_config(model, model_type, key_heads):
    config = model.get_config()
    position = config.get("position")
    rotary = position if isinstance(position, dict) else {}
    rope = {"rope_type": "default", "rope_theta": rotary.get("max_wavelength", 10000.0)}
    if rotary.get("scaling_factor", 1.0) != 1.0:
        rope = {**rope, "rope_type": "linear", "factor": rotary["scaling_factor"]}
    window = model.attention.sliding_window
    hf_config = {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": model.vocabulary_size,
        "hidden_size": model.hidden_dim,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": key_heads,
        "head_dim": model.attention.key_dim(model.hidden_dim, model.num_heads),
        "intermediate_size": model.intermediate_dim,
        "hidden_act": "silu",
        "rms_norm_eps": model.layer_norm_epsilon,
        "max_position_embeddings": model.max_sequence_length,
        "tie_word_embeddings": model.tie_embeddings,
        "rope_parameters": rope,
        "pad_token_id": model.pad_id,
        "attention_dropout": 0.0,
        "dtype": "float32",
    }
    if model_type == "llama":
        hf_config.update(attention_bias=False, mlp_bias=False)
    elif model_type == "mistral":
        hf_config["sliding_window"] = window
    elif window is not None:
        hf_config.update(use_sliding_window=True, sliding_window=window)
    else:
        hf_config.update(use_sliding_window=False, sliding_window=None)
    return hf_config


def export_tokenizer(tokenizer, directory):
    """Writes a checkpoint's tokenizer back: its `tokenizer.json` (or
    `tokenizer.model`) and a `tokenizer_config.json` naming its BOS/EOS.

    Args:
        tokenizer: the tokenizer loaded with the checkpoint, a
            `keras_attn.text.checkpoint_tokenizer.CheckpointTokenizer` or a
            `keras_attn.hf.tokenizer.HFTokenizer`.
        directory: the checkpoint folder being written.

    Raises:
        TypeError: another tokenizer (ours, `SubwordTokenizer`, has other
            special ids than any Llama-family checkpoint).
    """
    from keras_attn.hf.tokenizer import HFTokenizer

    inner = getattr(tokenizer, "tokenizer", tokenizer)
    if not isinstance(inner, HFTokenizer):
        raise TypeError(
            "A Llama-family export writes the tokenizer loaded with a "
            "checkpoint (HFTokenizer or CheckpointTokenizer). Received: "
            f"tokenizer={tokenizer!r:.100}"
        )
    directory = Path(directory)
    settings = {"add_bos_token": inner.add_start, "add_eos_token": inner.add_end}
    for key, index in (("bos_token", inner.start_id), ("eos_token", inner.end_id)):
        settings[key] = None if index is None else inner.piece(index)
    if inner.is_sentencepiece:
        (directory / "tokenizer.model").write_bytes(
            inner.encoder.serialized_model_proto()
        )
        settings["tokenizer_class"] = "LlamaTokenizer"
    else:
        inner.encoder.save(str(directory / "tokenizer.json"))
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    (directory / "tokenizer_config.json").write_text(
        json.dumps(settings, indent=2) + "\n"
    )
