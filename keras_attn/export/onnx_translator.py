"""Serves a translator written by `export_onnx_translator`: text in, text out.

Needs `numpy`, `onnxruntime` and `sentencepiece` only: no Keras, no
TensorFlow, no keras-attn. `export_onnx_translator` copies this file into
the export directory, so a client can run it from there:

    import sys
    sys.path.insert(0, "translator_onnx")
    from onnx_translator import OnnxTranslator

    print(OnnxTranslator("translator_onnx").translate(["A dog runs."]))

It tokenizes, batches and pads as `keras_attn.text.Translator` does
(sources sorted by length, end id appended, lengths padded to a multiple
of `length_multiple`, empty sentences answered without the model), runs
the exported decoding loop, and detokenizes up to the first end id.
"""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import onnxruntime
import sentencepiece

MODEL_FILE = "translator.onnx"
TOKENIZER_FILE = "tokenizer.model"
CONFIG_FILE = "translator.json"


class OnnxTranslator:
    """Translates strings with an exported translator in ONNX Runtime.

    Args:
        directory: the directory `export_onnx_translator` wrote.
        batch_size: sentences per call of the model. Defaults to `64`.
        providers: ONNX Runtime execution providers. Defaults to
            `("CPUExecutionProvider",)`.

    Example:

    >>> translator = OnnxTranslator("translator_onnx")  # doctest: +SKIP
    >>> translator.translate(["A dog runs.", ""])  # doctest: +SKIP
    ['Ein Hund rennt.', '']
    """

    def __init__(self, directory, batch_size=64, providers=("CPUExecutionProvider",)):
        directory = Path(directory)
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or batch_size < 1
        ):
            raise ValueError(
                f"`batch_size` must be a positive int. Received: batch_size={batch_size!r}"
            )
        self.batch_size = batch_size
        self.config = json.loads((directory / CONFIG_FILE).read_text())
        self.tokenizer = sentencepiece.SentencePieceProcessor(
            model_file=str(directory / TOKENIZER_FILE)
        )
        self.session = onnxruntime.InferenceSession(
            str(directory / MODEL_FILE), providers=list(providers)
        )

    def encode_sources(self, sentences):
        """Ids per sentence, end id appended, truncated to `max_source_length`."""
        end_id = self.config["end_id"]
        limit = self.config["max_source_length"]
        ids = [self.tokenizer.encode(sentence) + [end_id] for sentence in sentences]
        too_long = sum(len(row) > limit for row in ids)
        if too_long:
            warnings.warn(
                f"{too_long} of {len(ids)} sentences are longer than "
                f"max_source_length={limit} tokens and were truncated.",
                stacklevel=3,
            )
            ids = [
                row[: limit - 1] + [end_id] if len(row) > limit else row for row in ids
            ]
        return ids

    def translate_ids(self, sentences):
        """Decodes `sentences`; returns `(token_ids, scores)` per sentence."""
        sentences = _check_texts(sentences)
        ids = self.encode_sources(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        outputs, scores = [[] for _ in ids], [0.0] * len(ids)
        multiple = self.config["length_multiple"]
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            # Empty sentences (just the end id) need no model.
            todo = [i for i in batch if sentences[i].strip()]
            if not todo:
                continue
            longest = max(len(ids[i]) for i in todo)
            length = min(
                self.config["max_source_length"],
                max(multiple, math.ceil(longest / multiple) * multiple),
            )
            # (batch, length), padded with pad_id.
            source = np.full((len(todo), length), self.config["pad_id"], np.int32)
            for row, i in enumerate(todo):
                source[row, : len(ids[i])] = ids[i]
            result = dict(
                zip(
                    [output.name for output in self.session.get_outputs()],
                    self.session.run(None, {"encoder_tokens": source}),
                )
            )
            for row, i in enumerate(todo):
                outputs[i] = result["tokens"][row].tolist()
                scores[i] = float(result["scores"][row])
        return outputs, scores

    def detokenize(self, ids):
        """Text of `ids` up to the first end id, without start and padding."""
        config = self.config
        kept = []
        for token in ids:
            if token == config["end_id"]:
                break
            if token not in (config["pad_id"], config["start_id"]):
                kept.append(int(token))
        return self.tokenizer.decode(kept)

    def translate(self, sentences):
        """Translates a list of strings; returns a list of strings."""
        outputs, _ = self.translate_ids(sentences)
        return [self.detokenize(ids) for ids in outputs]


def _check_texts(sentences):
    if isinstance(sentences, (str, bytes, dict)):
        raise TypeError(
            "`sentences` must be a list of str. Received: sentences of type "
            f"{type(sentences).__name__}"
        )
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(
                f"`sentences[{index}]` must be a str. Received: {sentence!r:.100} "
                f"of type {type(sentence).__name__}"
            )
    return sentences
