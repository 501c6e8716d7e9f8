"""A compiled entry point for the decoding strategies."""

import inspect

import keras

from keras_attn.generation.beam_search import beam_search, check_beam_search_args
from keras_attn.generation.decoding_loop import check_max_length, check_token_ids
from keras_attn.generation.greedy_search import greedy_search
from keras_attn.generation.sampling import check_sampling_args, sample
from keras_attn.layers.validation import check_choice

STRATEGIES = {"greedy": greedy_search, "beam": beam_search, "sample": sample}
# Arguments that `SequenceGenerator` passes itself, not through `**options`.
_FIXED_ARGUMENTS = ("model", "encoder_tokens", "start_id", "end_id")


def _check_options(strategy, options):
    """Raises `ValueError` for an unknown or invalid strategy option.

    Done at construction: inside the compiled `predict` function the same
    error would come wrapped in a traceback of the call.
    """
    parameters = inspect.signature(STRATEGIES[strategy]).parameters
    accepted = [name for name in parameters if name not in _FIXED_ARGUMENTS]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown options for strategy={strategy!r}: {', '.join(unknown)}. "
            f"Expected some of: {', '.join(accepted)}"
        )
    arguments = {name: parameters[name].default for name in accepted}
    arguments.update(options)
    if arguments["max_length"] is not None:
        check_max_length(arguments["max_length"])
    if strategy == "beam":
        check_beam_search_args(
            arguments["beam_size"], arguments["length_penalty_alpha"]
        )
    elif strategy == "sample":
        check_sampling_args(
            arguments["top_k"], arguments["top_p"], arguments["temperature"]
        )


class SequenceGenerator(keras.Model):
    """Runs greedy search, beam search or sampling as one compiled function.

    The wrapped `Transformer` is a sub-layer, so Keras's own predict
    machinery compiles the whole decoding loop: `jax.jit` on JAX,
    `tf.function` (with XLA where available) on TensorFlow. Each new input
    shape compiles once; pad sources to a few bucket lengths to reuse
    compilations.

    Args:
        model: a `keras_attn.models.Transformer`.
        strategy: `"greedy"`, `"beam"` or `"sample"`. Defaults to `"beam"`.
        start_id: int, the start id. Defaults to `2`.
        end_id: int, the end id. Defaults to `3`.
        **options: passed to the strategy (`beam_size`,
            `length_penalty_alpha`, `top_k`, `top_p`, `temperature`, `seed`,
            `max_length`, ...).

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=20)
    >>> generator = keras_attn.generation.SequenceGenerator(
    ...     model, strategy="greedy", max_length=8)
    >>> generator.generate(np.ones((2, 5), "int32"))["tokens"].shape
    (2, 8)
    """

    def __init__(self, model, strategy="beam", start_id=2, end_id=3, **options):
        super().__init__(name=f"{strategy}_generator")
        self.model = model
        self.strategy = check_choice(strategy, "strategy", STRATEGIES)
        check_token_ids(start_id, end_id, model.vocabulary_size)
        _check_options(strategy, options)
        self.start_id = start_id
        self.end_id = end_id
        if strategy == "sample":
            # Attached to the model so compiled runs carry its state.
            self.seed_generator = keras.random.SeedGenerator(options.pop("seed", None))
            options["seed"] = self.seed_generator
        self.options = options
        self.built = True

    def call(self, encoder_tokens):
        return STRATEGIES[self.strategy](
            self.model,
            encoder_tokens,
            start_id=self.start_id,
            end_id=self.end_id,
            **self.options,
        )

    def generate(self, encoder_tokens):
        """Decodes a batch of source ids; returns a dict of NumPy arrays."""
        return self.predict_on_batch(encoder_tokens)
