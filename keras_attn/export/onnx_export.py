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

import json
import shutil
from pathlib import Path

import keras

from keras_attn.generation.samplers import BeamSampler, check_length_penalty_alpha
from keras_attn.generation.seq2seq import generate_seq2seq
from keras_attn.validation import check_choice, check_positive_int

# BitwiseAnd (inside `keras.ops.argmax` on TensorFlow) is ONNX opset 18.
TRANSLATOR_OPSET = 18
MODEL_FILE = "translator.onnx"
TOKENIZER_FILE = "tokenizer.model"
CONFIG_FILE = "translator.json"
RUNTIME_FILE = "onnx_translator.py"
STRATEGIES = ("greedy", "beam")


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


def export_onnx(model, path, batch_size=None, sequence_length=None, opset_version=None):
    """Writes a zoo model's forward pass (`model(inputs)`) as an ONNX file.

    The batch and sequence dimensions stay dynamic unless given. On torch,
    Keras exports dynamic shapes through the TorchScript exporter, which
    fails on Keras's layer normalization; there the dynamic export goes
    through `torch.export` and torch's ONNX exporter directly (one batch
    dimension shared by the inputs, one length per token input), and
    Keras's own export serves fixed shapes.

    Args:
        model: a built zoo model (`Transformer`, `TransformerLM`,
            `TransformerEncoderClassifier`, `VisionTransformer`).
        path: the `.onnx` file to write.
        batch_size: int, a fixed batch size. Defaults to `None` (dynamic).
        sequence_length: int, a fixed length of token inputs. Defaults to
            `None` (dynamic).
        opset_version: int, the ONNX opset. Defaults to `None`, the
            converter's default.

    Returns:
        The `pathlib.Path` written.

    Example:

    >>> model = keras_attn.models.TransformerLM.from_preset(
    ...     "lm_tiny", vocabulary_size=50)
    >>> keras_attn.export.export_onnx(model, "/tmp/lm.onnx")  # doctest: +SKIP
    """
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    if sequence_length is not None:
        sequence_length = check_positive_int(sequence_length, "sequence_length")
    backend = keras.backend.backend()
    signature = _input_signature(model, batch_size, sequence_length)
    path = Path(path)
    if backend == "torch" and any(
        None in spec.shape for spec in _named_specs(signature).values()
    ):
        return _export_torch_dynamic(model, path, signature, opset_version)
    if backend == "tensorflow":
        from keras_attn.export.tf2onnx_ops import register_tf2onnx_handlers

        register_tf2onnx_handlers()
    model.export(
        str(path),
        format="onnx",
        input_signature=signature,
        opset_version=opset_version,
        verbose=False,
    )
    return path


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
        verbose=False,
    )
    return path


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
    trained on any backend load there.

    Args:
        model: a trained `keras_attn.models.Transformer`.
        tokenizer: its `keras_attn.text.SubwordTokenizer`.
        directory: the directory to write (created; files replaced).
        strategy: `"greedy"` or `"beam"`. Defaults to `"greedy"`.
        beam_size: beams of `strategy="beam"`. Defaults to `4`.
        length_penalty_alpha: beam search's length penalty. Defaults to `0.6`.
        length_multiple: source lengths are padded to a multiple of this,
            as `Translator` does. Defaults to `8`.
        max_source_length: most source ids, end id included. Defaults to
            `None`, the model's `max_sequence_length`.

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
    strategy = check_choice(strategy, "strategy", STRATEGIES)
    if strategy == "beam":
        sampler = BeamSampler(
            num_beams=check_positive_int(beam_size, "beam_size"),
            length_penalty_alpha=check_length_penalty_alpha(length_penalty_alpha),
        )
    else:
        sampler = "greedy"
    length_multiple = check_positive_int(length_multiple, "length_multiple")
    if max_source_length is None:
        max_source_length = int(model.max_sequence_length)
    max_source_length = check_positive_int(max_source_length, "max_source_length")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    from keras_attn.export.tf2onnx_ops import register_tf2onnx_handlers

    register_tf2onnx_handlers()
    graph = _DecodingGraph(model, tokenizer.start_id, tokenizer.end_id, sampler)
    graph.export(
        str(directory / MODEL_FILE),
        format="onnx",
        input_signature=[
            keras.InputSpec(shape=(None, None), dtype="int32", name="encoder_tokens")
        ],
        opset_version=TRANSLATOR_OPSET,
        verbose=False,
    )
    (directory / TOKENIZER_FILE).write_bytes(tokenizer.model_proto)
    config = {
        "start_id": int(tokenizer.start_id),
        "end_id": int(tokenizer.end_id),
        "pad_id": int(model.pad_id),
        "max_source_length": max_source_length,
        "length_multiple": length_multiple,
        "strategy": strategy,
        "beam_size": beam_size if strategy == "beam" else None,
        "length_penalty_alpha": length_penalty_alpha if strategy == "beam" else None,
        "keras_version": keras.__version__,
    }
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    shutil.copyfile(Path(__file__).with_name(RUNTIME_FILE), directory / RUNTIME_FILE)
    return directory
