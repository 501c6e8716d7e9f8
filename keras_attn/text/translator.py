"""Text in, text out: a tokenizer, a `Transformer` and a decoding strategy."""

import math
import warnings

import numpy as np
import tensorflow as tf

from keras_attn.generation import SequenceGenerator
from keras_attn.text.task_checks import (
    check_jit_compile,
    check_texts,
    check_tokenizer_matches,
    compiled,
    load_preset,
)
from keras_attn.validation import check_int, check_positive_int


def _bucket_length(length, multiple, limit):
    """`length` rounded up to a multiple of `multiple`, at most `limit`."""
    return min(limit, max(multiple, int(math.ceil(length / multiple)) * multiple))


def _with_preset_beam_options(directory, options, beam_size, length_penalty_alpha):
    """`options` with the beam settings given, else the preset's, if any."""
    from keras_attn.models.preset_files import METADATA_FILE, read_preset_file

    saved = read_preset_file(directory, METADATA_FILE).get("decoding", {})
    options = dict(options)
    given = dict(beam_size=beam_size, length_penalty_alpha=length_penalty_alpha)
    for name, value in given.items():
        value = saved.get(name) if value is None else value
        if value is not None:
            options.setdefault(name, value)
    return options


class Translator:
    """Translates raw strings with a trained `keras_attn.models.Transformer`.

    Sentences are tokenized with the `keras_attn.text.SubwordTokenizer`,
    sorted by length, batched, padded to a multiple of `length_multiple`
    (so compiled decoding is reused across batches rather than recompiled
    for every length), decoded by a compiled `SequenceGenerator` and
    detokenized, then returned in the input order.

    Empty strings translate to empty strings. A sentence longer than
    `max_source_length` tokens (end id included) is truncated to that
    length with a warning that says how many were. The sentences must be a
    list (or 1-D array) of `str`: a single string, a dict, or a string
    with a lone surrogate is refused (`TypeError`, `ValueError`).

    Thread-safe: threads may share one `Translator` (a server's request
    threads), on every backend, first (compiling) call included; each call
    gives what it gives alone (a seeded sampler's draws are shared out
    between the calls, each once). Its state is read-only after
    construction, and its `SequenceGenerator` serializes decoding where
    the backend needs it.

    Args:
        model: a trained `keras_attn.models.Transformer`.
        tokenizer: the `keras_attn.text.SubwordTokenizer` it was trained with.
        strategy: `"beam"`, `"greedy"` or `"sample"`. Defaults to `None`,
            meaning `"beam"` unless `sampler` is given.
        batch_size: sentences per decoding batch. Defaults to `64`.
        max_source_length: most source tokens; at most the model's
            `max_sequence_length` with learned positions. Defaults to
            `None`, meaning the model's `max_sequence_length`.
        length_multiple: source lengths are padded to a multiple of this.
            Defaults to `8`.
        sampler: a `keras_attn.generation.Sampler` (`BeamSampler(5)`,
            `TopPSampler(0.9, seed=1)`, ...) or its name, in place of
            `strategy` and its options. Defaults to `None`.
        jit_compile: `"auto"`, `True` or `False` (NumPy booleans too),
            how Keras compiles the decoding loop
            (`SequenceGenerator.compile(jit_compile=...)`). `"auto"` is
            Keras's default: XLA on JAX, `tf.function` on
            TensorFlow, eager steps on torch. `True` on torch hands the loop
            to `torch.compile`: about 2x faster per batch once compiled, but
            the first batch of each shape compiles for up to a minute
            (`docs/performance.md`, "Compiled decoding on torch"), so it
            pays off for a server, not for a few sentences. Defaults to
            `"auto"`.
        **options: decoding options (`beam_size`, `length_penalty_alpha`,
            `top_k`, `top_p`, `seed`, `max_length`, ...).

    Example:

    >>> translator = keras_attn.text.Translator(model, tokenizer)
    >>> translator.translate(["A dog runs.", ""])
    ['Ein Hund rennt.', '']
    """

    def __init__(
        self,
        model,
        tokenizer,
        strategy=None,
        batch_size=64,
        max_source_length=None,
        length_multiple=8,
        sampler=None,
        jit_compile="auto",
        **options,
    ):
        check_tokenizer_matches(tokenizer, model)
        jit_compile = check_jit_compile(jit_compile)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = check_positive_int(batch_size, "batch_size")
        if max_source_length is None:
            max_source_length = model.max_sequence_length
        # At least one piece and the end id.
        self.max_source_length = check_int(
            max_source_length, "max_source_length", min_value=2
        )
        position_limit = model.position_scheme.max_length
        if position_limit is not None and self.max_source_length > position_limit:
            # Longer sources would fail inside the position embedding.
            raise ValueError(
                "`max_source_length` must be at most the model's "
                f"max_sequence_length={model.max_sequence_length} "
                f"({model.position_scheme.name} positions). "
                f"Received: max_source_length={max_source_length}"
            )
        self.length_multiple = check_positive_int(length_multiple, "length_multiple")
        generator = SequenceGenerator(
            model,
            strategy=strategy,
            start_id=tokenizer.start_id,
            end_id=tokenizer.end_id,
            sampler=sampler,
            **options,
        )
        self.generator = compiled(generator, jit_compile)

    @classmethod
    def from_preset(
        cls,
        preset,
        strategy=None,
        beam_size=None,
        length_penalty_alpha=None,
        dtype=None,
        sampler=None,
        **options,
    ):
        """A `Translator` from a trained preset: its model and tokenizer.

        Args:
            preset: the name of a shipped trained preset, such as
                `"multi30k_en_de"` (see `keras_attn.models.list_presets()`),
                or the path of a directory written by
                `Transformer.save_to_preset(directory, tokenizer=...)`.
            strategy: `"beam"`, `"greedy"` or `"sample"`. Defaults to
                `None`, meaning `"beam"` unless `sampler` is given.
            beam_size: int. Defaults to `None`, meaning the preset's
                (`metadata.json`'s `"decoding"`), else the generator's.
            length_penalty_alpha: float. Defaults to `None`, meaning the
                preset's, else the generator's.
            dtype: the model's dtype policy, e.g. `"mixed_bfloat16"`.
                Defaults to `None`, meaning the saved one (`float32`, also
                for weights stored in float16).
            sampler: a `keras_attn.generation.Sampler` or its name, in
                place of `strategy`; the preset's beam settings are then
                not used. Defaults to `None`.
            **options: other `Translator` and decoding arguments
                (`batch_size`, `max_source_length`, `top_k`, `seed`, ...).

        Returns:
            A `Translator`.

        Example:

        >>> translator = keras_attn.text.Translator.from_preset("multi30k_en_de")
        >>> translator.translate(["A dog runs."])
        ['Ein Hund rennt.']
        """
        from keras_attn.models import Transformer

        directory, model, tokenizer = load_preset(preset, Transformer, dtype)
        if sampler is not None:
            return cls(model, tokenizer, strategy=strategy, sampler=sampler, **options)
        strategy = "beam" if strategy is None else strategy
        if strategy == "beam":
            options = _with_preset_beam_options(
                directory, options, beam_size, length_penalty_alpha
            )
        elif beam_size is not None or length_penalty_alpha is not None:
            raise ValueError(
                "`beam_size` and `length_penalty_alpha` apply to "
                f'strategy="beam" only. Received: strategy={strategy!r}'
            )
        return cls(model, tokenizer, strategy=strategy, **options)

    def encode_sources(self, sentences):
        """Token ids (end id appended) per sentence, truncated with a warning."""
        ids = [
            list(row) + [self.tokenizer.end_id]
            for row in self.tokenizer.tokenize(
                tf.constant(sentences, tf.string)
            ).to_list()
        ]
        too_long = sum(len(row) > self.max_source_length for row in ids)
        if too_long:
            warnings.warn(
                f"{too_long} of {len(ids)} sentences are longer than "
                f"max_source_length={self.max_source_length} tokens and were "
                "truncated.",
                stacklevel=3,
            )
            ids = [
                row[: self.max_source_length - 1] + [self.tokenizer.end_id]
                if len(row) > self.max_source_length
                else row
                for row in ids
            ]
        return ids

    def translate_ids(self, sentences):
        """Decodes `sentences`; returns `(token_ids, scores)` per sentence."""
        sentences = check_texts(sentences, "sentences")
        ids = self.encode_sources(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        outputs, scores = [None] * len(ids), [0.0] * len(ids)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            # Empty sentences (just the end id) need no model: empty output.
            todo = [i for i in batch if sentences[i].strip()]
            for i in batch:
                outputs[i] = []
            if not todo:
                continue
            length = _bucket_length(
                max(len(ids[i]) for i in todo),
                self.length_multiple,
                self.max_source_length,
            )
            source = np.zeros((len(todo), length), dtype="int32")
            for row, i in enumerate(todo):
                source[row, : len(ids[i])] = ids[i]
            result = self.generator.generate(source)
            for row, i in enumerate(todo):
                outputs[i] = result["tokens"][row].tolist()
                scores[i] = float(result["scores"][row])
        return outputs, scores

    def translate(self, sentences):
        """Translates a list of strings; returns a list of strings."""
        outputs, _ = self.translate_ids(sentences)
        if not outputs:
            return []
        width = max(1, max(len(row) for row in outputs))
        dense = np.zeros((len(outputs), width), dtype="int32")
        for row, ids in enumerate(outputs):
            dense[row, : len(ids)] = ids
        texts = self.tokenizer.detokenize(dense).numpy()
        return [text.decode("utf-8") for text in texts]

    def generate(self, sentences):
        """An alias of `translate`: a list of strings in, a list out."""
        return self.translate(sentences)
