"""A compiled entry point for the decoding strategies."""

import inspect

import keras
from keras import ops

from keras_attn.generation import samplers as samplers_lib
from keras_attn.generation import streaming
from keras_attn.generation.beam_search import beam_search
from keras_attn.generation.causal_lm import check_prompt, generate_lm, lm_settings
from keras_attn.generation.decoding_inputs import (
    check_end_ids,
    check_max_length,
    check_max_length_for,
    check_source,
    check_special_token_ids,
    resolve_max_length,
)
from keras_attn.generation.greedy_search import greedy_search
from keras_attn.generation.logits_processors import check_processors
from keras_attn.generation.sample import sample
from keras_attn.generation.samplers import from_strategy
from keras_attn.generation.seq2seq import (
    check_prefix,
    empty_decoding_result,
    generate_seq2seq,
    seq2seq_settings,
)
from keras_attn.generation.stop_sequences import check_stop_sequences
from keras_attn.thread_safety import predict_lock
from keras_attn.validation import check_bool, check_choice, check_positive_int

STRATEGIES = {"greedy": greedy_search, "beam": beam_search, "sample": sample}
# The options of each strategy that configure its sampler.
_SAMPLER_OPTIONS = {
    "greedy": (),
    "beam": ("beam_size", "length_penalty_alpha"),
    "sample": ("top_k", "top_p", "temperature", "seed"),
}
# Arguments that `SequenceGenerator` passes itself, not through `**options`.
_FIXED_ARGUMENTS = ("model", "encoder_tokens", "start_id", "end_id")


def _check_options(strategy, options):
    """Raises `ValueError` for an unknown strategy option or a bad `max_length`.

    Done at construction: inside the compiled `predict` function the same
    error would come wrapped in a traceback of the call. The sampler's
    options are checked where the sampler is made (`from_strategy`).
    """
    parameters = inspect.signature(STRATEGIES[strategy]).parameters
    accepted = [name for name in parameters if name not in _FIXED_ARGUMENTS]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown options for strategy={strategy!r}: {', '.join(unknown)}. "
            f"Expected some of: {', '.join(accepted)}"
        )
    if options.get("max_length") is not None:
        check_max_length(options["max_length"])


def _check_sampler_options(model, is_lm, options):
    """The options left once the sampler is set: `max_length`, `use_cache`.

    `max_length` is bounded by what the model supports
    (`decoding_inputs.max_length_limit`).
    """
    accepted = ("max_length", "use_cache", "return_token_scores")
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown options: {', '.join(unknown)}. Expected some of: "
            f"{', '.join(accepted)}"
        )
    if is_lm and options.get("max_length") is None:
        raise ValueError(
            "A TransformerLM generator needs `max_length`, the total length "
            "of the returned sequences. Received: max_length=None"
        )
    if options.get("max_length") is not None:
        check_max_length_for(model, options["max_length"])
    for name in ("use_cache", "return_token_scores"):
        if name in options:
            check_bool(options[name], name)


def _first_replica(result, generator, batch_size):
    """`result` cut to `batch_size` rows when a strategy copied the batch.

    Under a `tf.distribute` strategy (a generator built in its scope),
    Keras's TensorFlow `predict_on_batch` hands every replica the whole
    batch and concatenates their outputs: `(replicas * batch, ...)`. Each
    replica decodes the same rows with the same weights and seed state, so
    the first replica's rows are the result (and equal a single device's).
    """
    strategy = getattr(generator, "distribute_strategy", None)  # TF only
    replicas = getattr(strategy, "num_replicas_in_sync", 1)
    if replicas == 1:
        return result
    return {
        name: value[:batch_size] if len(value) == replicas * batch_size else value
        for name, value in result.items()
    }


class SequenceGenerator(keras.Model):
    """Runs the decoding loop with a sampler as one compiled function.

    The wrapped model is a sub-layer, so Keras's own predict machinery
    compiles the whole decoding loop: `jax.jit` on JAX, `tf.function` (with
    XLA where available) on TensorFlow. Each new input shape compiles once;
    pad inputs to a few bucket lengths to reuse compilations.

    `generate` is thread-safe: threads may share one generator, or several
    generators over one model, on every backend, first (compiling) call
    included. A deterministic sampler gives each call what it gives alone;
    a seeded one shares out between the calls the draws that calls one
    after another would get, each once. On JAX every call holds the
    model's lock (`keras_attn.thread_safety`: Keras's JAX predict donates
    the variables' buffers); on TensorFlow and torch only a random
    sampler's calls do (each advances the seed state), the others run
    concurrently.

    A `keras_attn.models.Transformer` is decoded with `generate_seq2seq`
    (the input is source ids), a `keras_attn.models.TransformerLM` with
    `generate_lm` (the input is right-padded prompts, which need
    `max_length`, the total length, in `options`).

    Args:
        model: a `keras_attn.models.Transformer` or `TransformerLM`.
        strategy: `"greedy"`, `"beam"` or `"sample"`, with its keyword
            options. Defaults to `None`, meaning `"beam"` unless `sampler`
            is given.
        start_id: int, the start id (sequence-to-sequence only). Defaults
            to `2`.
        end_id: int, the end id, or a list of ids (a sequence ends at any
            of them); `None` runs a `TransformerLM` to `max_length`.
            Defaults to `3`.
        sampler: a `keras_attn.generation.Sampler` or its name, in place of
            `strategy`. Defaults to `None`.
        processors: a list of `keras_attn.generation.LogitsProcessor`,
            applied in the compiled loop before the sampler. Defaults to
            `None` (none).
        stop_sequences: a list of lists of token ids: a sequence also ends
            once its generated tokens end with one of them. Defaults to
            `None` (none).
        **options: passed to the strategy (`beam_size`,
            `length_penalty_alpha`, `top_k`, `top_p`, `temperature`, `seed`,
            `max_length`, ...); with `sampler`, `max_length`, `use_cache`
            and `return_token_scores`.

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=20)
    >>> generator = keras_attn.generation.SequenceGenerator(
    ...     model, sampler=keras_attn.generation.GreedySampler(), max_length=8)
    >>> generator.generate(np.ones((2, 5), "int32"))["tokens"].shape
    (2, 8)
    """

    def __init__(
        self,
        model,
        strategy=None,
        start_id=2,
        end_id=3,
        sampler=None,
        processors=None,
        stop_sequences=None,
        **options,
    ):
        self.is_lm = not hasattr(model, "encode")
        # Every option as given, for the record; the loop's own options
        # (`max_length`, `use_cache`) are what is left once the sampler is set.
        given_options = dict(options)
        if sampler is None:
            strategy = "beam" if strategy is None else strategy
            check_choice(strategy, "strategy", STRATEGIES)
            if not self.is_lm:
                _check_options(strategy, options)
            sampler_options = {
                name: options.pop(name)
                for name in _SAMPLER_OPTIONS[strategy]
                if name in options
            }
            sampler = from_strategy(strategy, **sampler_options)
        elif strategy is not None:
            raise ValueError(
                "Pass either `sampler` or `strategy`, not both. "
                f"Received: strategy={strategy!r}, sampler={sampler!r}"
            )
        sampler = samplers_lib.get(sampler)
        _check_sampler_options(model, self.is_lm, options)
        super().__init__(name=f"{type(sampler).__name__.lower()}_generator")
        self.model = model
        if self.is_lm:
            end_id = check_end_ids(
                end_id, model.vocabulary_size, pad_id=model.pad_id, allow_none=True
            )
        else:
            end_id = check_special_token_ids(
                start_id, end_id, model.vocabulary_size, model.pad_id
            )
        self.start_id = start_id
        self.end_id = end_id
        self.processors = check_processors(processors, model.vocabulary_size)
        self.stop_sequences = check_stop_sequences(
            stop_sequences, model.vocabulary_size, model.pad_id
        )
        if sampler.is_random:
            seed = sampler.seed
            if not isinstance(seed, keras.random.SeedGenerator):
                seed = keras.random.SeedGenerator(seed)
            # Attached to the generator so compiled runs carry its state.
            self.seed_generator = seed
            sampler = sampler.with_seed(seed)
        self.sampler = sampler
        self.options = given_options
        self.decode_options = options
        self.built = True

    @property
    def strategy(self):
        """The sampler's name: `"greedy"`, `"beam"`, `"random"`, `"top_k"`, ..."""
        names = {cls: name for name, cls in samplers_lib.SAMPLERS.items()}
        return names.get(type(self.sampler), type(self.sampler).__name__)

    def loop_settings(self):
        """The decoding loop's `LoopSettings` for this generator."""
        use_cache = self.decode_options.get("use_cache", True)
        if self.is_lm:
            return lm_settings(
                self.model,
                self.end_id,
                self.sampler,
                use_cache,
                self.processors,
                self.stop_sequences,
            )
        return seq2seq_settings(
            self.model,
            self.start_id,
            self.end_id,
            self.sampler,
            use_cache,
            self.processors,
            self.stop_sequences,
        )

    def call(self, tokens):
        if isinstance(tokens, dict) and streaming.STATE_KEY in tokens:
            return streaming.resume(
                self, tokens[streaming.STATE_KEY], tokens[streaming.STEPS_KEY]
            )
        if isinstance(tokens, dict) and streaming.START_KEY in tokens:
            return streaming.start(
                self, tokens[streaming.START_KEY], tokens.get("prefix_tokens")
            )
        if self.is_lm:
            return generate_lm(
                self.model,
                tokens,
                end_id=self.end_id,
                sampler=self.sampler,
                processors=self.processors,
                stop_sequences=self.stop_sequences,
                **self.decode_options,
            )
        prefix_tokens = None
        if isinstance(tokens, dict):
            tokens, prefix_tokens = tokens["encoder_tokens"], tokens["prefix_tokens"]
        return generate_seq2seq(
            self.model,
            tokens,
            start_id=self.start_id,
            end_id=self.end_id,
            sampler=self.sampler,
            processors=self.processors,
            prefix_tokens=prefix_tokens,
            stop_sequences=self.stop_sequences,
            **self.decode_options,
        )

    def generate(self, tokens, prefix_tokens=None):
        """Decodes a batch of ids; returns a dict of NumPy arrays.

        The ids are checked here, before anything is compiled: shape
        `(batch, length)`, an integer dtype, every id in the vocabulary. An
        empty batch gives empty arrays without running the model.

        Args:
            tokens: int `(batch, length)`: source ids, or an LM's
                right-padded prompts.
            prefix_tokens: int `(batch, prefix_length)`, right-padded with
                the model's `pad_id`: the target's first tokens per source
                sentence (sequence-to-sequence only). Each prefix width
                compiles once. Defaults to `None`.
        """
        inputs, batch_size = self._checked_inputs(tokens, prefix_tokens)
        if batch_size == 0:
            return self._empty_result(inputs)
        with predict_lock(self.model, advances_state=self.sampler.is_random):
            result = self.predict_on_batch(inputs)
        return _first_replica(result, self, batch_size)

    def stream(self, tokens, prefix_tokens=None, chunk_tokens=16):
        """Decodes a batch of ids in chunks; returns an iterator.

        The iterator yields, after every chunk of at most `chunk_tokens`
        decoding steps, the tokens decoded so far: int32 NumPy
        `(batch, length)`, laid out as `generate`'s `"tokens"` (padding
        where nothing is decoded yet). The last one equals what `generate`
        returns (the same steps and random draws: a fresh generator with
        the same seed gives the same tokens). Each chunk is one call of the
        compiled loop (`keras_attn.generation.streaming`), traced once;
        a decoding of `n` steps takes `ceil(n / chunk_tokens)` chunks.

        The arguments are checked here, when `stream` is called. Beam
        search is refused: its best hypothesis can change after a chunk.

        Args:
            tokens: int `(batch, length)`: source ids, or an LM's
                right-padded prompts.
            prefix_tokens: as in `generate`. Defaults to `None`.
            chunk_tokens: int > 0, the most steps per chunk. Defaults to
                `16`.

        Returns:
            An iterator of int32 NumPy arrays `(batch, length)`.
        """
        chunk_tokens = check_positive_int(chunk_tokens, "chunk_tokens")
        if self.sampler.num_beams > 1:
            raise ValueError(
                "Streaming decodes one hypothesis per sequence: beam search's "
                "best hypothesis can change after a chunk, so text already "
                "yielded would be taken back. Use a greedy or random sampler. "
                f"Received: sampler={self.sampler!r}"
            )
        inputs, batch_size = self._checked_inputs(tokens, prefix_tokens)
        if batch_size == 0:
            return iter(())
        if isinstance(inputs, dict):
            start = {streaming.START_KEY: inputs["encoder_tokens"], **inputs}
            del start["encoder_tokens"]
        else:
            start = {streaming.START_KEY: inputs}
        return self._chunks(start, chunk_tokens)

    def _chunks(self, start, chunk_tokens):
        """`stream`'s iterator: one compiled call per chunk."""
        advances_state = self.sampler.is_random
        with predict_lock(self.model, advances_state=advances_state):
            packed = self.predict_on_batch(start)
        if streaming.is_done(packed):  # nothing to decode: the given tokens
            yield streaming.best_tokens(packed, self.is_lm)
        while not streaming.is_done(packed):
            with predict_lock(self.model, advances_state=False):
                packed = self.predict_on_batch(
                    streaming.chunk_input(packed, chunk_tokens)
                )
            yield streaming.best_tokens(packed, self.is_lm)

    def _checked_inputs(self, tokens, prefix_tokens):
        """`(inputs, batch_size)`: the checked ids as the compiled call takes them."""
        if prefix_tokens is not None and self.is_lm:
            raise ValueError(
                "`prefix_tokens` is for a sequence-to-sequence model; a "
                "TransformerLM continues its prompt. Received: prefix_tokens="
                f"{prefix_tokens!r}"
            )
        if self.is_lm:
            tokens = check_prompt(self.model, tokens, self.decode_options["max_length"])
            # Every prompt block padded to `max_length` columns (the prompts
            # and their continuation share one buffer, so the tokens are the
            # same): one compiled function for every prompt width. Without
            # it TensorFlow retraces a second width with the length relaxed
            # to `None`, which the prompt block cannot be built from.
            width = self.decode_options["max_length"] - tokens.shape[1]
            tokens = ops.pad(
                tokens, ((0, 0), (0, width)), constant_values=self.model.pad_id
            )
        else:
            tokens = check_source(self.model, tokens)
        batch_size = tokens.shape[0]
        inputs = tokens
        if prefix_tokens is not None and batch_size:
            max_length = resolve_max_length(
                self.model, tokens, self.decode_options.get("max_length")
            )
            prefix_tokens = check_prefix(
                self.model, prefix_tokens, max_length, batch_size
            )
            inputs = {"encoder_tokens": tokens, "prefix_tokens": prefix_tokens}
        return inputs, batch_size

    def _empty_result(self, tokens):
        """`generate`'s result for an empty batch, as NumPy arrays."""
        max_length = resolve_max_length(
            self.model, tokens, self.decode_options.get("max_length")
        )
        result = empty_decoding_result(self.sampler, max_length)
        return {key: keras.ops.convert_to_numpy(value) for key, value in result.items()}
