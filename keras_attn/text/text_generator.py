"""Text in, text out for a language model: a tokenizer, a `TransformerLM`, a sampler."""

import math
import threading

import numpy as np
import tensorflow as tf

from keras_attn.generation import SequenceGenerator, samplers
from keras_attn.generation.logits_processors import check_processors
from keras_attn.shared_docstrings import shared_docstrings
from keras_attn.text.streamed_text import TextStream
from keras_attn.text.task_checks import (
    check_jit_compile,
    check_texts,
    check_tokenizer_matches,
    compiled,
    load_preset,
)
from keras_attn.text.translator import extra_end_ids, stop_sequence_ids
from keras_attn.validation import check_bool, check_int, check_positive_int


@shared_docstrings
class TextGenerator:
    """Continues raw strings with a trained `keras_attn.models.TransformerLM`.

    Each prompt becomes `[start] + its pieces` (its pieces alone with
    `add_start=False`); prompts are sorted by length,
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
        {{jit_compile_arg}}
        add_start: bool, whether each prompt starts with the tokenizer's
            start id. `False` for a model trained without one (Qwen2's
            tokenizer adds no BOS); an empty prompt is then refused, as it
            gives the model nothing to continue. Defaults to `True`.

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
        add_start=True,
    ):
        check_tokenizer_matches(tokenizer, model)
        self.add_start = check_bool(add_start, "add_start")
        if self.add_start and tokenizer.start_id is None:
            raise ValueError(
                "The tokenizer has no start id: pass add_start=False (each "
                "prompt is then its pieces alone). Received: add_start=True"
            )
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

    def _generator(self, sampler, max_length, processors=(), end_ids=(), stops=()):
        key = (sampler, max_length, processors, end_ids, stops)
        with self._generators_lock:
            if key not in self._generators:
                end_id = self.tokenizer.end_id
                generator = SequenceGenerator(
                    self.model,
                    sampler=sampler,
                    end_id=[end_id, *end_ids] if end_ids else end_id,
                    processors=processors,
                    stop_sequences=stops,
                    max_length=max_length,
                )
                self._generators[key] = compiled(generator, self.jit_compile)
            return self._generators[key]

    def _prepare(self, prompts, max_length, sampler, processors, end_ids, stops):
        """`(generator, ids, batches)`: the checked call, each prompt's ids
        (start id included where added) and the padded prompt block of each batch."""
        prompts = check_texts(prompts, "prompts")
        processors = check_processors(processors, self.model.vocabulary_size)
        max_length = (
            self.max_length
            if max_length is None
            else self._check_max_length(max_length)
        )
        sampler = self.sampler if sampler is None else samplers.get(sampler)
        generator = self._generator(
            sampler,
            max_length,
            processors,
            extra_end_ids(end_ids),
            stop_sequence_ids(self.tokenizer, stops),
        )
        if not prompts:
            return generator, [], []
        pieces = self.tokenizer.tokenize(tf.constant(prompts, tf.string)).to_list()
        start = [self.tokenizer.start_id] if self.add_start else []
        ids = [start + row for row in pieces]
        empty = [i for i, row in enumerate(ids) if not row]
        if empty:
            raise ValueError(
                "Without a start token (add_start=False) a prompt needs at "
                f"least one piece to continue. Received: prompts[{empty[0]}]="
                f"{prompts[empty[0]]!r}"
            )
        too_long = [len(row) for row in ids if len(row) >= max_length]
        if too_long:
            raise ValueError(
                f"A prompt of {max(too_long)} pieces (start id included where added) leaves no "
                f"room to generate within max_length={max_length}. Pass a larger "
                "`max_length` or a shorter prompt."
            )
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = []
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
            batches.append((batch, prompt))
        return generator, ids, batches

    def generate_ids(
        self,
        prompts,
        max_length=None,
        sampler=None,
        processors=None,
        end_ids=None,
        stop_sequences=None,
    ):
        """Continues `prompts`; returns `(token_ids, scores)` per prompt.

        The arguments are `generate`'s.
        """
        generator, ids, batches = self._prepare(
            prompts, max_length, sampler, processors, end_ids, stop_sequences
        )
        return self._generate_batches(generator, len(ids), batches)

    def _generate_batches(self, generator, count, batches):
        """`(token_ids, scores)` of the `count` prompts, in their order,
        generated batch by batch (`_prepare`'s `batches`)."""
        outputs, scores = [None] * count, [0.0] * count
        for batch, prompt in batches:
            result = generator.generate(prompt)
            for row, i in enumerate(batch):
                outputs[i] = result["tokens"][row].tolist()
                scores[i] = float(result["scores"][row])
        return outputs, scores

    def _detokenize(self, outputs):
        texts = self.tokenizer.detokenize(np.asarray(outputs, "int32")).numpy()
        return [text.decode("utf-8") for text in texts]

    def _stream(self, generator, count, batches, chunk_tokens):
        """`generate(stream=True)`'s iterator (arguments checked)."""
        stream = TextStream(count)
        for batch, prompt in batches:
            tokens = None
            for tokens in generator.stream(prompt, chunk_tokens=chunk_tokens):
                yield stream.update(batch, self._detokenize(tokens))
            rest = stream.update(batch, self._detokenize(tokens), final=True)
            if any(rest):
                yield rest

    def generate(
        self,
        prompts,
        max_length=None,
        sampler=None,
        processors=None,
        end_ids=None,
        stop_sequences=None,
        stream=False,
        chunk_tokens=16,
    ):
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
            end_ids: a list of token ids that end a sequence besides the
                tokenizer's end id (each list compiles once). Defaults to
                `None` (none).
            stop_sequences: a list of strings: a sequence also ends once its
                generated pieces end with the pieces of one of them (the
                string is tokenized on its own, as a word start; kept in
                the output). Defaults to `None` (none).
            stream: bool, whether to return an iterator that yields, after
                each chunk of decoding steps, the new text of every prompt
                (a list of strings, `""` for a prompt with nothing new; the
                first chunk of a prompt holds its prompt text too); the
                concatenation of a prompt's pieces is what `generate`
                returns for it. Greedy and random samplers only. Defaults
                to `False`.
            chunk_tokens: int > 0, the most decoding steps per streamed
                chunk. Defaults to `16`.

        Returns:
            A list of strings, each its prompt and the continuation; with
            `stream=True`, an iterator of lists of new text.
        """
        stream = check_bool(stream, "stream")
        generator, ids, batches = self._prepare(
            prompts, max_length, sampler, processors, end_ids, stop_sequences
        )
        if stream:
            chunk_tokens = check_positive_int(chunk_tokens, "chunk_tokens")
            if generator.sampler.num_beams > 1:
                raise ValueError(
                    "`stream=True` needs a greedy or random sampler: beam "
                    "search's best hypothesis can change after a chunk. "
                    f"Received: sampler={generator.sampler!r}"
                )
            return self._stream(generator, len(ids), batches, chunk_tokens)
        outputs, _ = self._generate_batches(generator, len(ids), batches)
        if not outputs:
            return []
        return self._detokenize(outputs)
