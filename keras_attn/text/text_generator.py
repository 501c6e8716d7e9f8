"""Text in, text out for a language model: a tokenizer, a `TransformerLM`, a sampler."""

import math
import threading

import numpy as np
import tensorflow as tf

from keras_attn.generation import SequenceGenerator, samplers
from keras_attn.generation.logits_processors import check_processors
from keras_attn.text.task_checks import (
    check_jit_compile,
    check_texts,
    check_tokenizer_matches,
    compiled,
    load_preset,
)
from keras_attn.validation import check_int, check_positive_int


class TextGenerator:
    """Continues raw strings with a trained `keras_attn.models.TransformerLM`.

    Each prompt becomes `[start] + its pieces`; prompts are sorted by length,
    batched, right-padded to a multiple of `length_multiple`, continued by
    a compiled `keras_attn.generation.SequenceGenerator` (the one decoding
    loop, with the key/value cache) until the end id or `max_length`
    pieces, detokenized and returned in the input order, prompt included
    (as keras-hub's `CausalLM.generate`).

    Thread-safe: threads may share one `TextGenerator` (a server's request
    threads), on every backend, first (compiling) call included. Each
    generator is made once per sampler and `max_length`; decoding is
    serialized where the backend needs it (`SequenceGenerator`), so a
    deterministic sampler gives each thread what a call alone gives, and a
    seeded sampler gives the calls the draws that sequential calls would
    share out, each once.

    Args:
        model: a trained `keras_attn.models.TransformerLM`.
        tokenizer: the `keras_attn.text.SubwordTokenizer` it was trained with.
        sampler: a `keras_attn.generation.Sampler` or its name (`"greedy"`,
            `"beam"`, `"random"`, `"top_k"`, `"top_p"`). Defaults to
            `"greedy"`.
        max_length: int, the most pieces of a returned sequence, start
            token and prompt included. Defaults to `None`, meaning the
            model's `max_sequence_length`.
        batch_size: prompts per decoding batch. Defaults to `32`.
        length_multiple: prompt lengths are padded to a multiple of this.
            Defaults to `8`.
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

    Example:

    >>> generator = keras_attn.text.TextGenerator.from_preset("multi30k_en_lm")
    >>> generator.generate(["A dog"])
    ['A dog is running through the grass.']
    """

    def __init__(
        self,
        model,
        tokenizer,
        sampler="greedy",
        max_length=None,
        batch_size=32,
        length_multiple=8,
        jit_compile="auto",
    ):
        check_tokenizer_matches(tokenizer, model)
        self.jit_compile = check_jit_compile(jit_compile)
        self.model = model
        self.tokenizer = tokenizer
        self.sampler = samplers.get(sampler)
        self.max_length = self._check_max_length(max_length)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.length_multiple = check_positive_int(length_multiple, "length_multiple")
        # One generator per (sampler, max_length), made once even when
        # threads ask for a new one together: two generators of a seeded
        # sampler would draw the same numbers.
        self._generators = {}
        self._generators_lock = threading.Lock()

    @classmethod
    def from_preset(cls, preset, dtype=None, **kwargs):
        """A `TextGenerator` from a trained `TransformerLM` preset.

        Args:
            preset: the name of a shipped trained preset, such as
                `"multi30k_en_lm"`, the path of a directory written by
                `TransformerLM.save_to_preset(directory, tokenizer=...)`, or
                a Hugging Face causal LM checkpoint (`"hf://owner/name"` or
                its local directory; `keras_attn.hf.tasks`).
            dtype: the model's dtype policy. Defaults to `None`, meaning the
                saved one.
            **kwargs: `TextGenerator` arguments (`sampler`, `max_length`,
                `batch_size`, ...).

        Returns:
            A `TextGenerator`.
        """
        from keras_attn.hf import files, tasks

        if files.is_hf_checkpoint(preset):  # "hf://owner/name" or its directory
            return tasks.load_text_generator(cls, preset, dtype=dtype, **kwargs)
        from keras_attn.models import TransformerLM

        _, model, tokenizer = load_preset(preset, TransformerLM, dtype)
        return cls(model, tokenizer, **kwargs)

    def _check_max_length(self, max_length):
        if max_length is None:
            return int(self.model.max_sequence_length)
        # The start id and at least one generated piece.
        return check_int(
            max_length,
            "max_length",
            min_value=2,
            max_value=self.model.max_sequence_length,
        )

    def _generator(self, sampler, max_length, processors=()):
        key = (sampler, max_length, processors)
        with self._generators_lock:
            if key not in self._generators:
                generator = SequenceGenerator(
                    self.model,
                    sampler=sampler,
                    end_id=self.tokenizer.end_id,
                    processors=processors,
                    max_length=max_length,
                )
                self._generators[key] = compiled(generator, self.jit_compile)
            return self._generators[key]

    def generate_ids(self, prompts, max_length=None, sampler=None, processors=None):
        """Continues `prompts`; returns `(token_ids, scores)` per prompt."""
        prompts = check_texts(prompts, "prompts")
        processors = check_processors(processors, self.model.vocabulary_size)
        max_length = (
            self.max_length
            if max_length is None
            else self._check_max_length(max_length)
        )
        sampler = self.sampler if sampler is None else samplers.get(sampler)
        if not prompts:
            return [], []
        pieces = self.tokenizer.tokenize(tf.constant(prompts, tf.string)).to_list()
        ids = [[self.tokenizer.start_id, *row] for row in pieces]
        too_long = [len(row) for row in ids if len(row) >= max_length]
        if too_long:
            raise ValueError(
                f"A prompt of {max(too_long)} pieces (start included) leaves no "
                f"room to generate within max_length={max_length}. Pass a larger "
                "`max_length` or a shorter prompt."
            )
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        outputs, scores = [None] * len(ids), [0.0] * len(ids)
        generator = self._generator(sampler, max_length, processors)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            longest = max(len(ids[i]) for i in batch)
            width = min(
                max_length,
                self.length_multiple * math.ceil(longest / self.length_multiple),
            )
            prompt = np.full((len(batch), width), self.tokenizer.pad_id, "int32")
            for row, i in enumerate(batch):
                prompt[row, : len(ids[i])] = ids[i]
            result = generator.generate(prompt)
            for row, i in enumerate(batch):
                outputs[i] = result["tokens"][row].tolist()
                scores[i] = float(result["scores"][row])
        return outputs, scores

    def generate(self, prompts, max_length=None, sampler=None, processors=None):
        """Continues a list of strings; returns a list of strings.

        Args:
            prompts: a list of strings (an empty string starts from
                nothing); a single string, a dict or a string with a lone
                surrogate is refused.
            max_length: int, the most pieces per sequence. Defaults to
                `None`, meaning the generator's.
            sampler: a sampler or its name for this call. Defaults to
                `None`, meaning the generator's.
            processors: a list of `keras_attn.generation.LogitsProcessor`
                applied inside the compiled loop (each list compiles once).
                Defaults to `None` (none).

        Returns:
            A list of strings, each its prompt and the continuation.
        """
        outputs, _ = self.generate_ids(prompts, max_length, sampler, processors)
        if not outputs:
            return []
        texts = self.tokenizer.detokenize(np.asarray(outputs, "int32")).numpy()
        return [text.decode("utf-8") for text in texts]
