"""ONNX export of zoo models and of a translator's decoding loop.

`export_onnx` is Keras's `model.export(path, format="onnx")` with the help
our models need: the input signature of the functional model (dynamic
batch and length where the backend allows), and on TensorFlow the op
conversions tf2onnx lacks (`keras_attn.export.tf2onnx_ops`).
`export_onnx_translator` writes a trained `Transformer` and its
`SubwordTokenizer` as a directory that `keras_attn.export.onnx_translator`
(NumPy, ONNX Runtime and `sentencepiece`, no Keras, no TensorFlow) serves:
text in, text out. See `docs/serving.md` for what works on which backend.
"""

import importlib.util
import json
import shutil
from pathlib import Path

import keras

from keras_attn.export.atomic_export import (
    check_file_destination,
    check_onnx_file,
    export_directory,
    export_file,
)
from keras_attn.export.translator_arguments import (
    Destination,
    check_translator_export,
)
from keras_attn.generation.samplers import BeamSampler
from keras_attn.generation.seq2seq import generate_seq2seq
from keras_attn.validation import check_int, check_positive_int

# BitwiseAnd (inside `keras.ops.argmax` on TensorFlow) is ONNX opset 18.
TRANSLATOR_OPSET = 18
MODEL_FILE = "translator.onnx"
TOKENIZER_FILE = "tokenizer.model"
CONFIG_FILE = "translator.json"
RUNTIME_FILE = "onnx_translator.py"
ONNX_TRANSLATOR = Destination(
    "export_onnx_translator", "an ONNX translator folder", MODEL_FILE
)
# The opsets whose files ONNX Runtime runs, per backend (measured on the zoo
# models, tf2onnx 1.17, torch 2.13, jax2onnx 0.17.1): below 13 tf2onnx has
# no `Einsum` and writes files the checker refuses, above 18 it refuses;
# torch's exporter writes opset 18 whatever lower opset is asked, and above
# 25 a file that declares 18 but holds newer ops; jax2onnx below 18 writes
# files the checker refuses.
OPSET_RANGES = {"tensorflow": (13, 18), "torch": (18, 25), "jax": (18, 25)}
# What is true of Keras's JAX converter on keras-attn's models (checked with
# jax2onnx 0.17.1): it converts `TransformerEncoderClassifier` and
# `VisionTransformer` at a fixed `batch_size` and `sequence_length`, and no
# model with a dynamic dimension, nor `Transformer` or `TransformerLM` at
# all (its `jnp.arange` refuses the `stop=None` of the position encodings;
# the vision transformer reshapes a symbolic batch dimension).
JAX_ONNX_MESSAGE = (
    "On the JAX backend Keras converts to ONNX with jax2onnx, which "
    "(0.17.1) converts keras-attn's TransformerEncoderClassifier and "
    "VisionTransformer only at a fixed `batch_size` and `sequence_length`, "
    "and fails on every model with a dynamic dimension and on Transformer "
    "and TransformerLM. Export with KERAS_BACKEND=tensorflow or "
    "KERAS_BACKEND=torch instead: every zoo model, dynamic batch and "
    "length; the weights and `.keras` files are the same on every backend "
    "(docs/serving.md)."
)


def _input_signature(model, batch_size, sequence_length):
    """The model's inputs as `keras.InputSpec`s; `None` dims filled if given."""
    specs = {}
    for tensor in model.inputs:
        shape = list(tensor.shape)
        if shape[0] is None:
            shape[0] = batch_size
        if len(shape) == 2 and shape[1] is None:
            shape[1] = sequence_length
        specs[tensor.name] = keras.InputSpec(
            shape=tuple(shape), dtype=tensor.dtype, name=tensor.name
        )
    if len(specs) == 1:
        return list(specs.values())
    return [specs]  # One positional argument: the dict of named inputs.


def check_opset_version(opset_version, backend):
    """`opset_version` (or `None`), an opset the backend's converter writes well.

    Raises:
        TypeError: not an integer (`True`, `"18"`, `18.0`).
        ValueError: outside `OPSET_RANGES[backend]`.
    """
    if opset_version is None:
        return None
    low, high = OPSET_RANGES[backend]
    opset_version = check_int(opset_version, "opset_version")
    if not low <= opset_version <= high:
        raise ValueError(
            f"`opset_version` must be an ONNX opset in [{low}, {high}] on the "
            f"{backend} backend (the opsets its converter writes files of "
            "that ONNX Runtime runs), or None for the converter's default. "
            f"Received: opset_version={opset_version}"
        )
    return opset_version


def export_onnx(model, path, batch_size=None, sequence_length=None, opset_version=None):
    """Writes a zoo model's forward pass (`model(inputs)`) as an ONNX file.

    The batch and sequence dimensions stay dynamic unless given. On torch,
    Keras exports dynamic shapes through the TorchScript exporter, which
    fails on Keras's layer normalization; there the dynamic export goes
    through `torch.export` and torch's ONNX exporter directly (one batch
    dimension shared by the inputs, one length per token input), and
    Keras's own export serves fixed shapes. On JAX, Keras's converter
    (jax2onnx) converts the classifier and the vision transformer at fixed
    shapes only; any other case is refused with a `ValueError` that says so
    and points to the TensorFlow and torch backends.

    The file is written beside `path` under a hidden name, checked by the
    ONNX checker and renamed over `path`: a kill, a full disk or a failed
    conversion leaves a previous file at `path` byte-identical.

    Args:
        model: a built zoo model (`Transformer`, `TransformerLM`,
            `TransformerEncoderClassifier`, `VisionTransformer`).
        path: the `.onnx` file to write (replaced if it exists; its folder
            is created).
        batch_size: int, a fixed batch size. Defaults to `None` (dynamic).
        sequence_length: int, a fixed length of token inputs. Defaults to
            `None` (dynamic).
        opset_version: int, the ONNX opset: 13 to 18 on TensorFlow, 18 to
            25 on torch and JAX. Defaults to `None`, the converter's default.

    Returns:
        The `pathlib.Path` written.

    Example:

    >>> model = keras_attn.models.TransformerLM.from_preset(
    ...     "lm_tiny", vocabulary_size=50)
    >>> keras_attn.export.export_onnx(model, "/tmp/lm.onnx")  # doctest: +SKIP
    """
    backend = keras.backend.backend()
    path = check_file_destination(path, "export_onnx")
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    if sequence_length is not None:
        sequence_length = check_positive_int(sequence_length, "sequence_length")
    opset_version = check_opset_version(opset_version, backend)
    signature = _input_signature(model, batch_size, sequence_length)
    if backend == "tensorflow":
        from keras_attn.export.tf2onnx_ops import register_tf2onnx_handlers

        register_tf2onnx_handlers()
    if backend == "jax" and importlib.util.find_spec("jax2onnx") is None:
        raise ImportError(
            f"`export_onnx` needs jax2onnx on the JAX backend. {JAX_ONNX_MESSAGE}"
        )

    def write(temporary):
        if backend == "torch" and any(
            None in spec.shape for spec in _named_specs(signature).values()
        ):
            _export_torch_dynamic(model, temporary, signature, opset_version)
            return
        try:
            model.export(
                str(temporary),
                format="onnx",
                input_signature=signature,
                opset_version=opset_version,
                verbose=False,
            )
        except (TypeError, ValueError, NotImplementedError) as error:
            if backend != "jax":
                raise
            raise ValueError(
                f"jax2onnx could not convert this {type(model).__name__} "
                f"(batch_size={batch_size}, sequence_length={sequence_length}). "
                f"{JAX_ONNX_MESSAGE} jax2onnx's error: {type(error).__name__}: "
                f"{str(error)[:300]}"
            ) from error

    return export_file(path, write, lambda temporary: check_onnx_file(temporary, path))


def _export_torch_dynamic(model, path, signature, opset_version):
    """`torch.onnx.export(dynamo=True)` with dynamic batch and lengths."""
    import torch

    specs = _named_specs(signature)
    max_length = getattr(model, "max_sequence_length", None)
    # One batch dimension for every input (their batch sizes must agree).
    batch = torch.export.Dim("batch", min=1)
    examples, dynamic_shapes = {}, {}
    for name, spec in specs.items():
        # Example sizes of 2 and 3: torch.export specializes sizes 0 and 1.
        shape = [
            size if size is not None else (2 if axis == 0 else 3)
            for axis, size in enumerate(spec.shape)
        ]
        examples[name] = torch.ones(shape, dtype=getattr(torch, spec.dtype))
        dynamic_shapes[name] = {
            axis: batch
            if axis == 0
            else torch.export.Dim(f"{name}_length", min=1, max=max_length)
            for axis, size in enumerate(spec.shape)
            if size is None
        }

    class _Forward(torch.nn.Module):
        def __init__(self, zoo_model, names):
            super().__init__()
            self.zoo_model = zoo_model
            self.names = names

        def forward(self, *tensors):
            inputs = dict(zip(self.names, tensors))
            if len(inputs) == 1:
                inputs = tensors[0]
            return self.zoo_model(inputs)

    names = list(specs)
    torch.onnx.export(
        _Forward(model, names).eval(),
        tuple(examples[name] for name in names),
        str(path),
        dynamo=True,
        # One entry: `forward`'s `*tensors`, a tuple of the inputs.
        dynamic_shapes=(tuple(dynamic_shapes[name] for name in names),),
        input_names=names,
        output_names=["output_0"],
        opset_version=opset_version,
        # One self-contained file (torch writes the weights to a second,
        # `<path>.data`, by default), so that one rename swaps it in whole.
        external_data=False,
        verbose=False,
    )


def _named_specs(signature):
    if isinstance(signature[0], dict):
        return signature[0]
    return {spec.name: spec for spec in signature}


class _DecodingGraph(keras.Model):
    """`encoder_tokens` -> the decoded `tokens` and `scores` (the whole loop)."""

    def __init__(self, transformer, start_id, end_id, sampler):
        super().__init__(name="decoding_graph")
        self.transformer = transformer
        self.start_id = start_id
        self.end_id = end_id
        self.sampler = sampler
        self.built = True

    def call(self, encoder_tokens):
        result = generate_seq2seq(
            self.transformer,
            encoder_tokens,
            start_id=self.start_id,
            end_id=self.end_id,
            sampler=self.sampler,
        )
        return {"tokens": result["tokens"], "scores": result["scores"]}


def export_onnx_translator(
    model,
    tokenizer,
    directory,
    strategy="greedy",
    beam_size=4,
    length_penalty_alpha=0.6,
    length_multiple=8,
    max_source_length=None,
    overwrite=True,
):
    """Writes a translator that ONNX Runtime serves without Keras or TensorFlow.

    The directory holds `translator.onnx` (encoder and cached decoding
    loop, `encoder_tokens` int32 `(batch, length)` -> `tokens` int32
    `(batch, length + 50)` and `scores` float32 `(batch,)`, with dynamic
    batch and length), `tokenizer.model` (the SentencePiece model),
    `translator.json` (special ids and settings) and `onnx_translator.py`,
    the runtime: `OnnxTranslator(directory).translate(["A dog runs."])`.
    Tokenization runs in the client with the `sentencepiece` package (the
    same model file), so a client needs `numpy`, `onnxruntime` and
    `sentencepiece`. It gives the translations of
    `keras_attn.text.Translator` with the same strategy and
    `length_multiple`.

    Needs the TensorFlow backend (Keras converts through tf2onnx); weights
    trained on any backend load there. The model, tokenizer, search,
    `max_source_length` and destination arguments are checked by the check
    `export_translator` uses, so both refuse the same things with the same
    messages, before any work.

    The folder is written beside `directory` under a hidden name, loaded
    once by the client (`OnnxTranslator`, which checks every file) and
    swapped in by a rename: a kill, a full disk or a failed conversion
    leaves a previous export at `directory` byte-identical.

    Args:
        model: a trained `keras_attn.models.Transformer`.
        tokenizer: its `keras_attn.text.SubwordTokenizer`.
        directory: `str` or `pathlib.Path`, the folder to write.
        strategy: `"greedy"` or `"beam"`. Defaults to `"greedy"`.
        beam_size: beams of `strategy="beam"`. Defaults to `4`.
        length_penalty_alpha: beam search's length penalty. Defaults to `0.6`.
        length_multiple: source lengths are padded to a multiple of this,
            as `Translator` does. Defaults to `8`.
        max_source_length: most source ids, end id included (at least 2,
            at most the model's learned positions). Defaults to `None`, the
            model's `max_sequence_length`.
        overwrite: bool, whether to replace a previous export at
            `directory`; `False` refuses an existing `directory` with a
            `FileExistsError`. A file, or a folder holding other files than
            an export, is never replaced. Defaults to `True`.

    Returns:
        The `pathlib.Path` of the directory.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ValueError(
            "`export_onnx_translator` needs the TensorFlow backend: the "
            "decoding loop is converted by tf2onnx. Load the model with "
            "KERAS_BACKEND=tensorflow (weights from any backend load there). "
            f"Received: backend={backend!r}"
        )
    arguments = check_translator_export(ONNX_TRANSLATOR, locals())
    length_multiple = check_positive_int(length_multiple, "length_multiple")
    if arguments.strategy == "beam":
        sampler = BeamSampler(
            num_beams=arguments.search_options["beam_size"],
            length_penalty_alpha=arguments.search_options["length_penalty_alpha"],
        )
    else:
        sampler = "greedy"
    if not hasattr(tokenizer, "model_proto"):
        raise TypeError(
            "`tokenizer` must be a `keras_attn.text.SubwordTokenizer` (its "
            "SentencePiece `model_proto` is written for the client). "
            f"Received: tokenizer={tokenizer!r:.100}"
        )
    config = {
        "start_id": int(tokenizer.start_id),
        "end_id": int(tokenizer.end_id),
        "pad_id": int(model.pad_id),
        "max_source_length": arguments.max_source_length,
        "length_multiple": length_multiple,
        "strategy": arguments.strategy,
        "beam_size": arguments.search_options.get("beam_size"),
        "length_penalty_alpha": arguments.search_options.get("length_penalty_alpha"),
        "keras_version": keras.__version__,
    }

    from keras_attn.export.tf2onnx_ops import register_tf2onnx_handlers

    register_tf2onnx_handlers()
    graph = _DecodingGraph(model, tokenizer.start_id, tokenizer.end_id, sampler)

    def write(partial):
        graph.export(
            str(partial / MODEL_FILE),
            format="onnx",
            input_signature=[
                keras.InputSpec(
                    shape=(None, None), dtype="int32", name="encoder_tokens"
                )
            ],
            opset_version=TRANSLATOR_OPSET,
            verbose=False,
        )
        (partial / TOKENIZER_FILE).write_bytes(tokenizer.model_proto)
        (partial / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        shutil.copyfile(Path(__file__).with_name(RUNTIME_FILE), partial / RUNTIME_FILE)

    return export_directory(arguments.directory, write, _check_translator_folder)


def _check_translator_folder(partial):
    """The ONNX checker on the graph, then the client loads the folder."""
    from keras_attn.export.onnx_translator import OnnxTranslator

    check_onnx_file(partial / MODEL_FILE, MODEL_FILE)
    OnnxTranslator(partial)
