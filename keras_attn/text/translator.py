"""Text in, text out: a tokenizer, a `Transformer` and a decoding strategy."""

import math
import threading
import warnings

import numpy as np
import tensorflow as tf

from keras_attn.generation import BeamSampler, SequenceGenerator
from keras_attn.generation.decoding_inputs import resolve_max_length
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
from keras_attn.validation import (
    check_bool,
    check_int,
    check_positive_int,
    check_string_list,
)


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


def _load_ensemble(presets, dtype):
    """`(first directory, TransformerEnsemble, tokenizer)` of several presets."""
    from keras_attn.hf import files
    from keras_attn.models import Transformer, TransformerEnsemble

    if not presets:
        raise ValueError("`preset` must name at least one preset. Received: preset=[]")
    loaded = []
    for i, preset in enumerate(presets):
        if files.is_hf_checkpoint(preset):
            raise ValueError(
                "An ensemble is made of keras-attn presets (shipped names or "
                "directories of `save_to_preset`), not Hugging Face "
                f"checkpoints. Received: preset[{i}]={str(preset)!r}"
            )
        loaded.append(load_preset(preset, Transformer, dtype))
    tokenizer = loaded[0][2]
    for i, (_, _, other) in enumerate(loaded[1:], start=1):
        if other.model_proto != tokenizer.model_proto:
            raise ValueError(
                "The presets of an ensemble must share one tokenizer. "
                f"Received: preset[{i}]={str(presets[i])!r}, whose tokenizer "
                f"differs from that of preset[0]={str(presets[0])!r}"
            )
    ensemble = TransformerEnsemble([model for _, model, _ in loaded])
    return loaded[0][0], ensemble, tokenizer


def _check_return_scores(return_scores):
    """`return_scores`: `False`, `True` or `"raw"`."""
    if isinstance(return_scores, str):
        if return_scores == "raw":
            return return_scores
        raise ValueError(
            '`return_scores` must be False, True or "raw". '
            f"Received: return_scores={return_scores!r}"
        )
    return check_bool(return_scores, "return_scores")


def extra_end_ids(end_ids):
    """`end_ids` as a tuple of ids (checked by the generator), `None`: `()`."""
    if end_ids is None:
        return ()
    if not isinstance(end_ids, (list, tuple)):
        raise TypeError(
            f"`end_ids` must be a list of token ids. Received: end_ids={end_ids!r:.100}"
        )
    return tuple(end_ids)


def stop_sequence_ids(tokenizer, stop_sequences):
    """The pieces of each stop string, as a tuple of tuples of ids."""
    if stop_sequences is None:
        return ()
    stop_sequences = check_string_list(stop_sequences, "stop_sequences")
    if any(not text for text in stop_sequences):
        raise ValueError(
            "`stop_sequences` must hold non-empty strings. "
            f"Received: stop_sequences={stop_sequences!r:.100}"
        )
    pieces = tokenizer.tokenize(tf.constant(stop_sequences, tf.string)).to_list()
    return tuple(tuple(row) for row in pieces)


def _check_streamable(generator, num_return_sequences, return_scores):
    """Refuses what a stream can not give, naming it."""
    if num_return_sequences is not None or return_scores:
        raise ValueError(
            "`stream=True` yields text only: not with `num_return_sequences` "
            f"or `return_scores`. Received: num_return_sequences="
            f"{num_return_sequences!r}, return_scores={return_scores!r}"
        )
    if generator.sampler.num_beams > 1:
        raise ValueError(
            "`stream=True` needs a greedy or random sampler: beam search's "
            "best hypothesis can change after a chunk, so text already "
            f"yielded would be taken back. Received: sampler={generator.sampler!r}"
        )


@shared_docstrings
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
        {{jit_compile_arg}}
        processors: a list of `keras_attn.generation.LogitsProcessor`
            applied inside the compiled loop for every call that gives
            none. Defaults to `None` (none).
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
        processors=None,
        **options,
    ):
        check_tokenizer_matches(tokenizer, model)
        jit_compile = check_jit_compile(jit_compile)
        self.jit_compile = jit_compile
        self.processors = check_processors(processors, model.vocabulary_size)
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
            processors=self.processors,
            **options,
        )
        self.generator = compiled(generator, jit_compile)
        # One generator per processor list, end ids, stop sequences and
        # token scores, made once even when threads ask for it together (a
        # seeded sampler's draws are shared out).
        self._generators = {(self.processors, (), (), False): self.generator}
        self._generators_lock = threading.Lock()

    def _generator(
        self, processors=None, end_ids=None, stop_sequences=None, token_scores=False
    ):
        """The compiled generator of these controls (`None`: the translator's).

        `end_ids` are ids that end a translation besides the tokenizer's end
        id; `stop_sequences` strings, each tokenized into a stop sequence.
        """
        if processors is None:
            processors = self.processors
        processors = check_processors(processors, self.model.vocabulary_size)
        end_ids = extra_end_ids(end_ids)
        stops = stop_sequence_ids(self.tokenizer, stop_sequences)
        key = (processors, end_ids, stops, token_scores)
        with self._generators_lock:
            if key not in self._generators:
                options = dict(self.generator.decode_options)
                if token_scores:
                    options["return_token_scores"] = True
                generator = SequenceGenerator(
                    self.model,
                    start_id=self.tokenizer.start_id,
                    end_id=[self.tokenizer.end_id, *end_ids]
                    if end_ids
                    else self.tokenizer.end_id,
                    sampler=self.generator.sampler,
                    processors=processors,
                    stop_sequences=stops,
                    **options,
                )
                self._generators[key] = compiled(generator, self.jit_compile)
            return self._generators[key]

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
                `Transformer.save_to_preset(directory, tokenizer=...)`; or
                a list of them, decoded together as a
                `keras_attn.models.TransformerEnsemble` (they must share one
                tokenizer; the beam settings are the first one's).
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
        from keras_attn.hf import files

        if isinstance(preset, (list, tuple)):
            directory, model, tokenizer = _load_ensemble(preset, dtype)
        elif files.is_hf_checkpoint(preset):  # "hf://owner/name" or its directory
            # The family of its model_type (Marian, T5) loads it.
            directory = files.resolve_checkpoint(preset)
            model_type = files.read_config(directory)["model_type"]
            family = files.family(model_type)
            if not hasattr(family, "load_translator"):
                raise ValueError(
                    "A Translator loads an encoder-decoder checkpoint (model "
                    f"types marian, t5). Received: {str(preset)!r} with "
                    f"model_type={model_type!r}"
                )
            return family.load_translator(
                cls,
                directory,
                dtype=dtype,
                strategy=strategy,
                beam_size=beam_size,
                length_penalty_alpha=length_penalty_alpha,
                sampler=sampler,
                **options,
            )
        else:
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

    def _prefix_ids(self, prefix, count):
        """Token ids per sentence of `prefix` (a list of strings), or `None`s."""
        if prefix is None:
            return [[] for _ in range(count)]
        prefix = check_string_list(prefix, "prefix")
        if len(prefix) != count:
            raise ValueError(
                "`prefix` must hold one string per sentence, "
                f"{count}. Received: {len(prefix)} prefixes"
            )
        if not prefix:
            return []
        return self.tokenizer.tokenize(tf.constant(prefix, tf.string)).to_list()

    def _batches(self, sentences, generator, prefix):
        """`(batch, todo, source, prefix_tokens)` per decoding batch, and the
        prefix ids per sentence.

        `batch` are the sentences' numbers, `todo` those that need the model
        (empty sentences without a prefix translate to nothing).
        """
        ids = self.encode_sources(sentences)
        prefixes = self._prefix_ids(prefix, len(ids))
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = []
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            todo = [i for i in batch if sentences[i].strip() or prefixes[i]]
            if not todo:
                batches.append((batch, todo, None, None))
                continue
            length = _bucket_length(
                max(len(ids[i]) for i in todo),
                self.length_multiple,
                self.max_source_length,
            )
            source = np.zeros((len(todo), length), dtype="int32")
            for row, i in enumerate(todo):
                source[row, : len(ids[i])] = ids[i]
            prefix_tokens = self._prefix_block(generator, source, prefixes, todo)
            batches.append((batch, todo, source, prefix_tokens))
        return batches, prefixes

    def _decode(self, sentences, prefix, generator):
        """Every hypothesis per sentence: `(token_ids, scores, raw_scores)`,
        best first; `raw_scores` (summed log-probabilities) where the
        generator returns token scores, else `None`s.

        A sampler other than `BeamSampler` gives one hypothesis.
        """
        sentences = check_texts(sentences, "sentences")
        batches, prefixes = self._batches(sentences, generator, prefix)
        outputs = [None] * len(sentences)
        scores, raw = [None] * len(sentences), [None] * len(sentences)
        for batch, todo, source, prefix_tokens in batches:
            # Empty sentences (just the end id) need no model: empty output,
            # or their prefix.
            for i in batch:
                outputs[i], scores[i], raw[i] = [list(prefixes[i])], [0.0], [0.0]
            if not todo:
                continue
            result = generator.generate(source, prefix_tokens=prefix_tokens)
            tokens = result.get("beam_tokens", result["tokens"][:, None])
            beam_scores = result.get("beam_scores", result["scores"][:, None])
            token_scores = result.get("beam_token_scores")
            if token_scores is None and "token_scores" in result:
                token_scores = result["token_scores"][:, None]
            for row, i in enumerate(todo):
                outputs[i] = [beam.tolist() for beam in tokens[row]]
                scores[i] = [float(score) for score in beam_scores[row]]
                if token_scores is not None:
                    raw[i] = [float(score) for score in token_scores[row].sum(-1)]
        return outputs, scores, raw

    def _stream(self, sentences, generator, prefix, chunk_tokens):
        """`translate(stream=True)`'s iterator (arguments checked)."""
        batches, prefixes = self._batches(sentences, generator, prefix)
        stream = TextStream(len(sentences))
        # Sentences without a model call: their prefix, at once.
        done = [i for batch, todo, _, _ in batches for i in batch if i not in todo]
        if done:
            texts = self._detokenize([prefixes[i] for i in done])
            yield stream.update(done, texts, final=True)
        for _, todo, source, prefix_tokens in batches:
            if not todo:
                continue
            tokens = None
            for tokens in generator.stream(source, prefix_tokens, chunk_tokens):
                texts = self._detokenize([row.tolist() for row in tokens])
                yield stream.update(todo, texts)
            texts = self._detokenize([row.tolist() for row in tokens])
            rest = stream.update(todo, texts, final=True)
            if any(rest):
                yield rest

    def _prefix_block(self, generator, source, prefixes, todo):
        """int32 `(batch, width)` prefixes (a bucketed width), or `None`."""
        longest = max(len(prefixes[i]) for i in todo)
        if not any(prefixes[i] for i in todo):
            return None
        max_length = resolve_max_length(
            self.model, source, generator.decode_options.get("max_length")
        )
        if longest >= max_length:
            raise ValueError(
                f"`prefix` must be shorter than max_length={max_length} pieces "
                f"(one is left to generate). Received: a prefix of {longest} pieces"
            )
        width = min(
            max_length - 1,
            self.length_multiple * math.ceil(longest / self.length_multiple),
        )
        block = np.full((len(todo), width), self.tokenizer.pad_id, "int32")
        for row, i in enumerate(todo):
            block[row, : len(prefixes[i])] = prefixes[i]
        return block

    def translate_ids(
        self,
        sentences,
        processors=None,
        prefix=None,
        end_ids=None,
        stop_sequences=None,
    ):
        """Decodes `sentences`; returns `(token_ids, scores)` per sentence.

        The arguments are `translate`'s.
        """
        generator = self._generator(processors, end_ids, stop_sequences)
        outputs, scores, _ = self._decode(sentences, prefix, generator)
        return [beams[0] for beams in outputs], [beams[0] for beams in scores]

    def _detokenize(self, outputs):
        """Strings of token id lists."""
        if not outputs:
            return []
        width = max(1, max(len(row) for row in outputs))
        dense = np.zeros((len(outputs), width), dtype="int32")
        for row, ids in enumerate(outputs):
            dense[row, : len(ids)] = ids
        texts = self.tokenizer.detokenize(dense).numpy()
        return [text.decode("utf-8") for text in texts]

    def _check_num_return_sequences(self, num_return_sequences, generator):
        if num_return_sequences is None:
            return None
        k = check_positive_int(num_return_sequences, "num_return_sequences")
        sampler = generator.sampler
        beams = sampler.num_beams if isinstance(sampler, BeamSampler) else 1
        if k > beams:
            raise ValueError(
                "`num_return_sequences` must be at most the beam width, "
                f"{beams} ({type(sampler).__name__}); use a BeamSampler with "
                f"num_beams >= {k}. Received: num_return_sequences={k}"
            )
        return k

    def translate(
        self,
        sentences,
        processors=None,
        prefix=None,
        num_return_sequences=None,
        return_scores=False,
        end_ids=None,
        stop_sequences=None,
        stream=False,
        chunk_tokens=16,
    ):
        """Translates a list of strings; returns a list of strings.

        Args:
            sentences: a list of strings.
            processors: a list of `keras_attn.generation.LogitsProcessor`
                for this call (each list compiles once). Defaults to
                `None`, meaning the translator's.
            prefix: a list of strings, one per sentence: each translation
                starts with its prefix's pieces (forced decoding; `""` for
                none) and the model continues it. Defaults to `None`.
            num_return_sequences: int, the best `k` hypotheses per
                sentence, at most the beam width of a `BeamSampler`.
                Defaults to `None` (the best one, not in a list).
            return_scores: `False`, `True` or `"raw"`: whether each
                translation comes as a `(text, score)` pair. With `True`
                the score is what the search ranks by (the
                length-normalized log-probability for beam search); with
                `"raw"` the summed log-probability of the generated tokens.
                Defaults to `False`.
            end_ids: a list of token ids that end a translation besides the
                tokenizer's end id (each list compiles once). Defaults to
                `None` (none).
            stop_sequences: a list of strings: a translation also ends once
                its generated pieces end with the pieces of one of them
                (the string is tokenized on its own, as a word start; kept
                in the output). Defaults to `None` (none).
            stream: bool, whether to return an iterator that yields, after
                each chunk of decoding steps, the new text of every
                sentence (a list of strings, `""` for a sentence with
                nothing new); the concatenation of a sentence's pieces is
                its translation. Greedy and random samplers only; not with
                `num_return_sequences` or `return_scores`. Defaults to
                `False`.
            chunk_tokens: int > 0, the most decoding steps per streamed
                chunk. Defaults to `16`.

        Returns:
            A list with one entry per sentence: a string, or a
            `(text, score)` pair with `return_scores`; with
            `num_return_sequences=k` a list of `k` of them, best first.
            With `stream=True`, an iterator of such lists of new text.
        """
        return_scores = _check_return_scores(return_scores)
        stream = check_bool(stream, "stream")
        generator = self._generator(
            processors, end_ids, stop_sequences, token_scores=return_scores == "raw"
        )
        k = self._check_num_return_sequences(num_return_sequences, generator)
        if stream:
            chunk_tokens = check_positive_int(chunk_tokens, "chunk_tokens")
            _check_streamable(generator, num_return_sequences, return_scores)
            sentences = check_texts(sentences, "sentences")
            return self._stream(sentences, generator, prefix, chunk_tokens)
        outputs, scores, raw = self._decode(sentences, prefix, generator)
        if return_scores == "raw":
            scores = raw
        kept = 1 if k is None else k
        flat = [beam for beams in outputs for beam in beams[:kept]]
        texts = iter(self._detokenize(flat))
        results = []
        for beams, beam_scores in zip(outputs, scores):
            pairs = [
                (next(texts), score) for _, score in zip(beams[:kept], beam_scores)
            ]
            pairs += pairs[-1:] * (kept - len(pairs))  # an empty sentence: one
            items = pairs if return_scores else [text for text, _ in pairs]
            results.append(items[0] if k is None else items)
        return results

    def generate(self, sentences, **kwargs):
        """An alias of `translate`: a list of strings in, a list out."""
        return self.translate(sentences, **kwargs)
