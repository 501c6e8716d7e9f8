"""Decoding strategies as data: sampler objects for the one decoding loop.

A sampler says how the next token is chosen; `decoding_loop.generate_tokens`
runs the loop (cache, prompts, end of sentence) for every model and every
sampler. The names follow keras-hub's `keras_hub.samplers`.
"""

import dataclasses

import keras
from keras import ops

from keras_attn.generation.decoding_loop import top_k_rows
from keras_attn.validation import (
    check_bool,
    check_float,
    check_positive_int,
    check_seed,
    is_integer,
)

# The smallest temperature: below it float32 `logits / temperature`
# overflows for large logits (softmax then gives NaN), and sampling is
# already greedy decoding.
MIN_TEMPERATURE = 1e-6
# The largest GNMT `alpha`: `((5 + length) / 6) ** alpha` then stays finite
# in float32 for any length up to about 40,000 (`max_length` is bounded far
# below), so length-normalised scores stay ordered instead of all rounding
# to -0.0. Wu et al. tune alpha in [0, 1].
MAX_LENGTH_PENALTY_ALPHA = 10.0


def check_temperature(temperature, name="temperature"):
    """`temperature` as a float in `[MIN_TEMPERATURE, inf)`."""
    return check_float(temperature, name, min_value=MIN_TEMPERATURE)


def check_length_penalty_alpha(alpha, name="length_penalty_alpha"):
    """`alpha` as a float in `[0, MAX_LENGTH_PENALTY_ALPHA]`."""
    return check_float(alpha, name, min_value=0.0, max_value=MAX_LENGTH_PENALTY_ALPHA)


def filter_logits(logits, top_k=None, top_p=None, temperature=1.0):
    """Divides by `temperature` and keeps the top-k / top-p candidates.

    Ids already at `-inf` (the decoding loop suppresses padding and start
    that way) stay at `-inf` for any temperature.

    Args:
        logits: float tensor `(batch, vocabulary)`.
        top_k: int, keep the `k` most likely ids (all of them if `k` is at
            least the vocabulary size). Defaults to `None` (all).
        top_p: float in `(0, 1]`, keep the smallest set of most likely ids
            whose probability reaches `top_p` (Holtzman et al., 2020).
            Defaults to `None` (all).
        temperature: float >= `1e-6`. Defaults to `1.0`.

    Returns:
        Logits of the same shape with discarded ids at `-inf`.
    """
    logits = ops.cast(logits, "float32") / temperature
    vocabulary_size = logits.shape[-1]
    if top_k is not None and vocabulary_size is not None:
        top_k = min(top_k, vocabulary_size)  # more than there are: keep all
    if top_k is not None:
        kth_best = ops.top_k(logits, top_k, sorted=True)[0][:, -1:]  # (batch, 1)
        logits = ops.where(logits < kth_best, -float("inf"), logits)
    if top_p is not None:
        vocabulary_size = ops.shape(logits)[-1]
        sorted_logits = ops.top_k(logits, vocabulary_size, sorted=True)[0]
        sorted_probs = ops.softmax(sorted_logits, axis=-1)
        # Probability mass strictly before each candidate, in sorted order.
        mass_before = ops.cumsum(sorted_probs, axis=-1) - sorted_probs
        kept = ops.where(mass_before < top_p, sorted_logits, float("inf"))
        threshold = ops.min(kept, axis=-1, keepdims=True)  # (batch, 1)
        logits = ops.where(logits < threshold, -float("inf"), logits)
    return logits


def sample_from_logits(logits, uniform):
    """Inverse-CDF sampling: the first id whose cumulative probability > `uniform`.

    Ids of zero probability (filtered to `-inf`) are never returned.

    Args:
        logits: float `(batch, vocabulary)`, `-inf` for excluded ids.
        uniform: float `(batch,)` in `[0, 1)`.

    Returns:
        int32 `(batch,)`.
    """
    probabilities = ops.softmax(logits, axis=-1)
    cumulative = ops.cumsum(probabilities, axis=-1)  # (batch, vocabulary)
    # Scaled by the total, which rounding leaves a little off 1: a draw just
    # below 1 would otherwise pass the whole sum and pick the last id.
    threshold = ops.cast(uniform, cumulative.dtype)[:, None] * cumulative[:, -1:]
    ids = ops.sum(ops.cast(cumulative <= threshold, "int32"), axis=-1)
    # If rounding still passes the sum, take the last id of nonzero
    # probability, never an excluded one.
    last = ops.shape(logits)[-1] - 1
    possible = ops.cast(probabilities > 0, "int32")
    last_possible = last - ops.cast(
        ops.argmax(ops.flip(possible, axis=-1), axis=-1), "int32"
    )
    return ops.minimum(ids, last_possible)


def length_penalty(length, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al., 2016)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _set_checked(sampler, name, check, *args, **kwargs):
    """Checks a field of a frozen sampler and stores its canonical value."""
    value = check(getattr(sampler, name), name, *args, **kwargs)
    object.__setattr__(sampler, name, value)


@dataclasses.dataclass(frozen=True)
class Sampler:
    """How the decoding loop picks the next token: the base class.

    A sampler holds no tensors; the loop calls `random_draws` once before
    it starts and `select` at every step. Subclasses set `num_beams` (the
    hypotheses kept per sequence) and implement `select`.

    Args:
        temperature: float >= `1e-6`, the logits are divided by it before a
            random choice (smaller values would overflow float32 logits,
            and sample as greedy decoding does). Defaults to `1.0`.
    """

    temperature: float = dataclasses.field(default=1.0, kw_only=True)

    num_beams = 1
    is_random = False

    def __post_init__(self):
        _set_checked(self, "temperature", check_temperature)

    def random_draws(self, num_steps, batch_size):
        """The uniform numbers the sampler uses, `(num_steps, batch)`, or `None`.

        Drawn before the loop, one per step and sequence, so that a seed
        gives the same tokens with and without the key/value cache.
        """
        return None

    def select(self, logits, candidate_log_probs, candidate_lengths, draw):
        """Chooses the continuations of every hypothesis.

        Args:
            logits: float32 `(batch, beams, vocabulary)`, the model's logits
                (padding and start at `-inf`, so that no temperature can
                bring them back).
            candidate_log_probs: float32 `(batch, beams, vocabulary)`, the
                log-probability of each hypothesis extended by each token
                (`decoding_loop.MASKED` where a token can not follow: after the end, or
                where a prompt fixes the token).
            candidate_lengths: int32 `(batch, beams)`, the generated length of
                each hypothesis once extended.
            draw: float32 `(batch,)` uniform numbers of this step, or `None`.

        Returns:
            `(parents, ids)`, int32 `(batch, beams)`: the hypothesis each new
            one extends, and the token it adds.
        """
        raise NotImplementedError

    def final_scores(self, log_probs, lengths):
        """Scores `(batch, beams)` that rank finished hypotheses."""
        return log_probs

    def with_seed(self, seed):
        """A copy using `seed` (int or `keras.random.SeedGenerator`)."""
        return self

    def get_config(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@dataclasses.dataclass(frozen=True)
class GreedySampler(Sampler):
    """Takes the most likely token at every step (ties: the lower id).

    Example:

    >>> sampler = keras_attn.generation.GreedySampler()
    """

    def select(self, logits, candidate_log_probs, candidate_lengths, draw):
        ids = ops.argmax(logits, axis=-1)  # (batch, 1)
        return ops.zeros_like(ids, "int32"), ops.cast(ids, "int32")


@dataclasses.dataclass(frozen=True)
class BeamSampler(Sampler):
    """Beam search with the GNMT length penalty (section 6.1 of the paper).

    Hypotheses are ranked by `log P(y | x) / lp(y)` with
    `lp(y) = ((5 + |y|) / 6) ** alpha`, `|y|` counting the end token. At
    every step each live hypothesis is extended by every token and the
    `num_beams` best candidates are kept; an ended hypothesis stays in the
    beam (extended by padding at no cost) and competes with its final
    score. With `num_beams=1` the search is greedy search.

    Args:
        num_beams: int, hypotheses kept per sequence. Defaults to `4`.
        length_penalty_alpha: float in `[0, 10]`, `alpha` (larger values
            overflow the penalty in float32 and every score would round to
            `-0.0`). Defaults to `0.6`.
        return_all_beams: bool, whether `generate` returns every beam.
            Defaults to `False`.

    Example:

    >>> sampler = keras_attn.generation.BeamSampler(num_beams=5)

    References:
        Vaswani et al., 2017, section 6.1; Wu et al., "Google's Neural
        Machine Translation System", 2016, section 7.
    """

    num_beams: int = 4
    length_penalty_alpha: float = 0.6
    return_all_beams: bool = False

    def __post_init__(self):
        super().__post_init__()
        _set_checked(self, "num_beams", check_positive_int)
        _set_checked(self, "length_penalty_alpha", check_length_penalty_alpha)
        _set_checked(self, "return_all_beams", check_bool)

    def select(self, logits, candidate_log_probs, candidate_lengths, draw):
        batch_size = ops.shape(candidate_log_probs)[0]
        vocabulary_size = ops.shape(candidate_log_probs)[-1]
        penalties = length_penalty(candidate_lengths, self.length_penalty_alpha)
        # (batch, beams * vocabulary): length-normalised candidate scores.
        scores = ops.reshape(
            candidate_log_probs / penalties[:, :, None],
            (batch_size, self.num_beams * vocabulary_size),
        )
        _, best = top_k_rows(scores, self.num_beams)  # (batch, beams)
        parents = ops.cast(best // vocabulary_size, "int32")
        return parents, ops.cast(best % vocabulary_size, "int32")

    def final_scores(self, log_probs, lengths):
        return log_probs / length_penalty(lengths, self.length_penalty_alpha)


@dataclasses.dataclass(frozen=True)
class RandomSampler(Sampler):
    """Samples the next token from the whole (tempered) distribution.

    Args:
        temperature: float >= `1e-6`. Defaults to `1.0`.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.

    Example:

    >>> sampler = keras_attn.generation.RandomSampler(temperature=0.8, seed=1)
    """

    seed: object = dataclasses.field(default=None, kw_only=True)

    is_random = True

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.seed, keras.random.SeedGenerator):
            _set_checked(self, "seed", check_seed)

    def random_draws(self, num_steps, batch_size):
        return keras.random.uniform((num_steps, batch_size), seed=self.seed)

    def filter(self, logits):
        """`(batch, vocabulary)` logits with the excluded ids at `-inf`."""
        return filter_logits(logits, temperature=self.temperature)

    def select(self, logits, candidate_log_probs, candidate_lengths, draw):
        ids = sample_from_logits(self.filter(logits[:, 0, :]), draw)  # (batch,)
        ids = ops.cast(ids, "int32")[:, None]
        return ops.zeros_like(ids), ids

    def with_seed(self, seed):
        return dataclasses.replace(self, seed=seed)

    def get_config(self):
        config = super().get_config()
        if not (config["seed"] is None or is_integer(config["seed"])):
            config["seed"] = None  # a SeedGenerator does not serialize
        return config


@dataclasses.dataclass(frozen=True)
class TopKSampler(RandomSampler):
    """Samples among the `k` most likely tokens (Fan et al., 2018).

    Args:
        k: int > 0. Defaults to `5`.
        temperature: float >= `1e-6`. Defaults to `1.0`.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.

    Example:

    >>> sampler = keras_attn.generation.TopKSampler(k=20, seed=1)
    """

    k: int = 5

    def __post_init__(self):
        super().__post_init__()
        _set_checked(self, "k", check_positive_int)

    def filter(self, logits):
        return filter_logits(logits, top_k=self.k, temperature=self.temperature)


@dataclasses.dataclass(frozen=True)
class TopPSampler(RandomSampler):
    """Nucleus sampling: the smallest set of tokens whose mass reaches `p`.

    Args:
        p: float in `(0, 1]`. Defaults to `0.9`.
        k: int, first keep only the `k` most likely tokens. Defaults to
            `None` (all).
        temperature: float >= `1e-6`. Defaults to `1.0`.
        seed: int or `keras.random.SeedGenerator`. Defaults to `None`.

    Example:

    >>> sampler = keras_attn.generation.TopPSampler(p=0.9, seed=1)

    References:
        Holtzman et al., "The Curious Case of Neural Text Degeneration", 2020.
    """

    p: float = 0.9
    k: int | None = None

    def __post_init__(self):
        super().__post_init__()
        _set_checked(self, "p", check_float, 0.0, 1.0, include_min=False)
        _set_checked(self, "k", check_positive_int, allow_none=True)

    def filter(self, logits):
        return filter_logits(
            logits, top_k=self.k, top_p=self.p, temperature=self.temperature
        )


SAMPLERS = {
    "greedy": GreedySampler,
    "beam": BeamSampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
}


def get(identifier):
    """A sampler from a name (`"greedy"`, `"beam"`, `"random"`, `"top_k"`,
    `"top_p"`), a `{"class_name": ..., "config": ...}` dict, or a sampler.

    Example:

    >>> keras_attn.generation.samplers.get("top_k")
    TopKSampler(temperature=1.0, seed=None, k=5)
    """
    if isinstance(identifier, Sampler):
        return identifier
    if isinstance(identifier, dict) and "class_name" in identifier:
        name = identifier["class_name"]
        by_class = {cls.__name__: cls for cls in SAMPLERS.values()}
        if name in by_class:
            return by_class[name].from_config(identifier.get("config", {}))
    elif isinstance(identifier, str) and identifier in SAMPLERS:
        return SAMPLERS[identifier]()
    raise ValueError(
        "`sampler` must be a keras_attn.generation.Sampler or one of "
        f"{sorted(SAMPLERS)}. Received: sampler={identifier!r}"
    )


def serialize(sampler):
    """`{"class_name": ..., "config": ...}` for `get`."""
    return {"class_name": type(sampler).__name__, "config": sampler.get_config()}


def check_sampling_args(top_k, top_p, temperature):
    """Checks `strategy="sample"`'s options by those names; returns them.

    `top_k` and `top_p` may be `None` (no filtering).
    """
    return (
        check_positive_int(top_k, "top_k", allow_none=True),
        check_float(top_p, "top_p", 0.0, 1.0, include_min=False, allow_none=True),
        check_temperature(temperature),
    )


def from_strategy(strategy, **options):
    """The sampler of the older `strategy=` + keyword options interface.

    `"greedy"`; `"beam"` with `beam_size`, `length_penalty_alpha`;
    `"sample"` with `top_k`, `top_p`, `temperature`, `seed`. Every entry
    point that takes a strategy name (`greedy_search`, `beam_search`,
    `sample`, `generate_lm`, `SequenceGenerator`) comes through here, so
    the options are checked, by the names the caller typed (`beam_size`,
    not the sampler's `num_beams`), in this one place.

    Example:

    >>> sampler = keras_attn.generation.samplers.from_strategy("beam", beam_size=5)
    >>> type(sampler).__name__, sampler.num_beams
    ('BeamSampler', 5)
    """
    if strategy == "greedy":
        return GreedySampler()
    if strategy == "beam":
        if "beam_size" in options:
            beam_size = options.pop("beam_size")
            options["num_beams"] = check_positive_int(beam_size, "beam_size")
        return BeamSampler(**options)
    if strategy == "sample":
        top_k, top_p, temperature = check_sampling_args(
            options.pop("top_k", None),
            options.pop("top_p", None),
            options.pop("temperature", 1.0),
        )
        if top_p is not None:
            return TopPSampler(p=top_p, k=top_k, temperature=temperature, **options)
        if top_k is not None:
            return TopKSampler(k=top_k, temperature=temperature, **options)
        return RandomSampler(temperature=temperature, **options)
    raise ValueError(
        "`strategy` must be one of ['beam', 'greedy', 'sample']. "
        f"Received: strategy={strategy!r}"
    )
