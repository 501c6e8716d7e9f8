"""Logits processors: steer the decoding loop before the sampler chooses.

A processor takes the logits of every hypothesis at one step and what has
been decoded so far (a `DecodingContext`) and returns logits of the same
shape, `-inf` where a token may not come next. The decoding loop
(`decoding_loop.generate_tokens`) applies a list of them, in order, after
it has suppressed padding and the start token and before the sampler
(greedy, beam, sampling) sees the logits; the scores (what the beam ranks
by) are log-probabilities of the processed logits. Processors use only
`keras.ops` on static shapes, so they run inside the compiled loop (XLA,
`tf.function`, `torch.compile`).

The processors follow Hugging Face's of the same purpose
(`RepetitionPenaltyLogitsProcessor`, `NoRepeatNGramLogitsProcessor`,
`MinNewTokensLengthLogitsProcessor`, `NoBadWordsLogitsProcessor`,
`MinPLogitsWarper`) and give the same logits on the same inputs.
"""

import collections.abc
import dataclasses
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_attn.validation import (
    check_float,
    check_int,
    check_positive_int,
    is_integer,
)


class DecodingContext(NamedTuple):
    """What a processor may read at one step of the loop.

    Rows are the hypotheses, `batch * beams`.
    """

    # int32 (rows, total_length); positions <= index are decoded.
    tokens: Any
    # int32 scalar: the last decoded position (the logits choose index + 1).
    index: Any
    # int32 (rows,): the given tokens at the start (start token, prompt, prefix).
    prompt_lengths: Any
    # The ids that end a hypothesis (Python ints), maybe none.
    end_ids: tuple


def _token_counts(tokens, index, vocabulary_size, weights=None):
    """float32 `(rows, vocabulary)`: how often each id stands at positions <= index.

    `weights` (float32 `(rows, positions)`, default all ones) weighs each
    position; positions after `index` count 0. One `ops.scatter` (which
    sums duplicates on every backend), no `(rows, positions, vocabulary)`
    one-hot tensor.
    """
    rows, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    decoded = ops.arange(length, dtype="int32")[None, :] <= index  # (1, positions)
    values = ops.cast(decoded, "float32")
    if weights is not None:
        values = values * weights
    values = ops.broadcast_to(values, ops.shape(tokens))
    row_ids = ops.broadcast_to(
        ops.arange(rows, dtype="int32")[:, None], ops.shape(tokens)
    )
    # (rows * positions, 2): (row, token id) of every position.
    indices = ops.stack(
        [ops.reshape(row_ids, (-1,)), ops.reshape(ops.cast(tokens, "int32"), (-1,))],
        axis=1,
    )
    return ops.scatter(indices, ops.reshape(values, (-1,)), (rows, vocabulary_size))


def _ids_mask(vocabulary_size, token_ids):
    """bool `(vocabulary,)`: `True` at `token_ids`."""
    vocabulary = ops.arange(vocabulary_size, dtype="int32")
    mask = ops.zeros((vocabulary_size,), "bool")
    for token_id in token_ids:
        mask = ops.logical_or(mask, ops.equal(vocabulary, token_id))
    return mask


def _check_ids(value, name, allow_empty=False):
    """A sequence of non-negative ints (not a string) as a tuple."""
    expected = f"`{name}` must be a sequence of non-negative integer token ids."
    if isinstance(value, (str, bytes)) or not isinstance(
        value, collections.abc.Iterable
    ):
        raise TypeError(f"{expected} Received: {name}={value!r}")
    items = tuple(value)
    if not all(is_integer(item) and item >= 0 for item in items):
        raise ValueError(f"{expected} Received: {name}={value!r}")
    if not items and not allow_empty:
        raise ValueError(f"{expected} It must not be empty. Received: {name}={value!r}")
    return tuple(int(item) for item in items)


def _check_in_vocabulary(ids, name, value, vocabulary_size):
    if ids and max(ids) >= vocabulary_size:
        raise ValueError(
            f"`{name}` must hold token ids in [0, vocabulary_size="
            f"{vocabulary_size}). Received: {name}={value!r}"
        )


class LogitsProcessor:
    """The protocol: `processor(logits, context) -> logits`.

    `logits` are float32 `(rows, vocabulary)`, `context` a
    `DecodingContext`; the result has the logits' shape, with `-inf` where
    a token may not come next. Subclasses hold Python values only (checked
    in their constructor), implement `__call__` with `keras.ops` on static
    shapes, and `get_config`; `check_vocabulary` refuses ids outside the
    model's vocabulary where decoding starts.
    """

    def __call__(self, logits, context):
        raise NotImplementedError

    def check_vocabulary(self, vocabulary_size):
        """Raises `ValueError` for ids outside `[0, vocabulary_size)`."""

    def get_config(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class RepetitionPenalty(LogitsProcessor):
    """Makes every id decoded so far (prompt included) less likely.

    A logit `l` of such an id becomes `l / penalty` if positive, else
    `l * penalty` (Keskar et al., 2019), as Hugging Face's
    `RepetitionPenaltyLogitsProcessor`.

    Args:
        penalty: float > 0; above 1 discourages repetition, below 1
            encourages it. Defaults to `1.2`.

    Example:

    >>> processor = keras_attn.generation.RepetitionPenalty(1.3)

    References:
        Keskar et al., "CTRL: A Conditional Transformer Language Model for
        Controllable Generation", 2019.
    """

    penalty: float = 1.2

    def __post_init__(self):
        penalty = check_float(self.penalty, "penalty", min_value=0.0, include_min=False)
        object.__setattr__(self, "penalty", penalty)

    def __call__(self, logits, context):
        counts = _token_counts(context.tokens, context.index, ops.shape(logits)[-1])
        penalized = ops.where(logits < 0, logits * self.penalty, logits / self.penalty)
        return ops.where(counts > 0, penalized, logits)


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class NoRepeatNGram(LogitsProcessor):
    """Bans every token that would repeat an n-gram already decoded.

    The n-grams are those of the whole row (prompt or start token
    included), as Hugging Face's `NoRepeatNGramLogitsProcessor`; `n=1`
    bans every id seen so far.

    Args:
        n: int > 0, the n-gram size. Defaults to `3`.

    Example:

    >>> processor = keras_attn.generation.NoRepeatNGram(3)
    """

    n: int = 3

    def __post_init__(self):
        object.__setattr__(self, "n", check_positive_int(self.n, "n"))

    def __call__(self, logits, context):
        tokens, index, n = context.tokens, context.index, self.n
        length = tokens.shape[1]
        if length is None or n > length:
            return logits  # No n-gram fits (or a relaxed trace: see docstring).
        windows = length - n + 1
        starts = ops.arange(windows, dtype="int32")[None, :]  # (1, windows)
        # An n-gram counts once its last token is decoded, and only when the
        # n - 1 last decoded tokens exist.
        match = ops.logical_and(starts + n - 1 <= index, index + 1 >= n)
        for k in range(n - 1):
            position = ops.clip(index - n + 2 + k, 0, length - 1)
            suffix = ops.take(tokens, position, axis=1)  # (rows,)
            # (rows, windows): the k-th token of every n-gram.
            match = ops.logical_and(
                match, ops.equal(tokens[:, k : k + windows], suffix[:, None])
            )
        following = tokens[:, n - 1 : n - 1 + windows]  # (rows, windows)
        match = ops.broadcast_to(match, ops.shape(following))  # n = 1: (1, windows)
        rows = ops.shape(tokens)[0]
        row_ids = ops.broadcast_to(
            ops.arange(rows, dtype="int32")[:, None], ops.shape(following)
        )
        indices = ops.stack(
            [ops.reshape(row_ids, (-1,)), ops.reshape(following, (-1,))], axis=1
        )
        banned = ops.scatter(
            indices,
            ops.reshape(ops.cast(match, "float32"), (-1,)),
            (rows, ops.shape(logits)[-1]),
        )
        return ops.where(banned > 0, -float("inf"), logits)


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class MinNewTokens(LogitsProcessor):
    """Bans the end ids until a row has generated `min_new_tokens` tokens.

    New tokens are those after the row's given start (the start token and
    a target prefix, or an LM prompt); the end ids are the loop's
    (`end_id`, one id or several).

    Args:
        min_new_tokens: int >= 0. Defaults to `1`.

    Example:

    >>> processor = keras_attn.generation.MinNewTokens(5)
    """

    min_new_tokens: int = 1

    def __post_init__(self):
        value = check_int(self.min_new_tokens, "min_new_tokens", min_value=0)
        object.__setattr__(self, "min_new_tokens", value)

    def __call__(self, logits, context):
        if not context.end_ids or self.min_new_tokens == 0:
            return logits
        new_tokens = context.index + 1 - context.prompt_lengths  # (rows,)
        too_short = new_tokens < self.min_new_tokens
        ends = _ids_mask(ops.shape(logits)[-1], context.end_ids)  # (vocabulary,)
        banned = ops.logical_and(too_short[:, None], ends[None, :])
        return ops.where(banned, -float("inf"), logits)


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class BannedTokens(LogitsProcessor):
    """Never generates the given ids.

    Args:
        token_ids: a non-empty sequence of token ids.

    Example:

    >>> processor = keras_attn.generation.BannedTokens([5, 9])
    """

    token_ids: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "token_ids", _check_ids(self.token_ids, "token_ids"))

    def check_vocabulary(self, vocabulary_size):
        _check_in_vocabulary(
            self.token_ids, "token_ids", self.token_ids, vocabulary_size
        )

    def __call__(self, logits, context):
        banned = _ids_mask(ops.shape(logits)[-1], self.token_ids)
        return ops.where(banned[None, :], -float("inf"), logits)

    def get_config(self):
        return {"token_ids": list(self.token_ids)}


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class BannedSequences(LogitsProcessor):
    """Never generates the given token sequences.

    The last token of a sequence is banned where the decoded tokens end
    with the rest of it; a sequence of one token is banned everywhere (as
    Hugging Face's `NoBadWordsLogitsProcessor`).

    Args:
        sequences: a non-empty sequence of non-empty sequences of token ids.

    Example:

    >>> processor = keras_attn.generation.BannedSequences([[7, 8], [11]])
    """

    sequences: tuple = ()

    def __post_init__(self):
        value = self.sequences
        if isinstance(value, (str, bytes)) or not isinstance(
            value, collections.abc.Iterable
        ):
            raise TypeError(
                "`sequences` must be a sequence of token id sequences. "
                f"Received: sequences={value!r}"
            )
        sequences = tuple(_check_ids(sequence, "sequences") for sequence in value)
        if not sequences:
            raise ValueError(
                "`sequences` must hold at least one sequence. "
                f"Received: sequences={value!r}"
            )
        object.__setattr__(self, "sequences", sequences)

    def check_vocabulary(self, vocabulary_size):
        ids = tuple(token for sequence in self.sequences for token in sequence)
        _check_in_vocabulary(
            ids, "sequences", self.get_config()["sequences"], vocabulary_size
        )

    def __call__(self, logits, context):
        tokens, index = context.tokens, context.index
        length = ops.shape(tokens)[1]
        vocabulary = ops.arange(ops.shape(logits)[-1], dtype="int32")
        banned = ops.zeros(ops.shape(logits), "bool")
        for sequence in self.sequences:
            *before, last = sequence
            # (rows,): the decoded tokens end with `before`.
            follows = ops.broadcast_to(index + 1 >= len(before), ops.shape(tokens)[:1])
            for k, token in enumerate(before):
                position = ops.clip(index - len(before) + 1 + k, 0, length - 1)
                follows = ops.logical_and(
                    follows, ops.equal(ops.take(tokens, position, axis=1), token)
                )
            banned = ops.logical_or(
                banned,
                ops.logical_and(follows[:, None], ops.equal(vocabulary, last)[None, :]),
            )
        return ops.where(banned, -float("inf"), logits)

    def get_config(self):
        return {"sequences": [list(sequence) for sequence in self.sequences]}


@keras.saving.register_keras_serializable(package="keras_attn")
@dataclasses.dataclass(frozen=True)
class MinP(LogitsProcessor):
    """Keeps the tokens at least `p` times as likely as the most likely one.

    Min-p filtering (Nguyen et al., 2024), as Hugging Face's
    `MinPLogitsWarper` with `min_tokens_to_keep=1`. The probabilities are
    those of the logits it receives (before any temperature of the
    sampler).

    Args:
        p: float in `(0, 1]`. Defaults to `0.1`.

    Example:

    >>> processor = keras_attn.generation.MinP(0.05)

    References:
        Nguyen et al., "Turning Up the Heat: Min-p Sampling for Creative
        and Coherent LLM Outputs", 2024.
    """

    p: float = 0.1

    def __post_init__(self):
        value = check_float(self.p, "p", 0.0, 1.0, include_min=False)
        object.__setattr__(self, "p", value)

    def __call__(self, logits, context):
        probabilities = ops.softmax(logits, axis=-1)
        threshold = self.p * ops.max(probabilities, axis=-1, keepdims=True)
        return ops.where(probabilities < threshold, -float("inf"), logits)


def check_processors(processors, vocabulary_size, name="processors"):
    """`processors` as a tuple of checked `LogitsProcessor`s (`None`: empty).

    Checked where decoding starts: a list (not one processor), each a
    `LogitsProcessor` whose ids lie inside the model's vocabulary.
    """
    if processors is None:
        return ()
    if isinstance(processors, LogitsProcessor) or not isinstance(
        processors, (list, tuple)
    ):
        raise TypeError(
            f"`{name}` must be a list of keras_attn.generation.LogitsProcessor. "
            f"Received: {name}={processors!r}"
        )
    for processor in processors:
        if not isinstance(processor, LogitsProcessor):
            raise TypeError(
                f"`{name}` must hold keras_attn.generation.LogitsProcessor "
                f"objects. Received: {name}={processors!r}"
            )
        processor.check_vocabulary(vocabulary_size)
    return tuple(processors)


def apply_processors(processors, logits, context):
    """`logits` after each processor in turn."""
    for processor in processors:
        logits = processor(logits, context)
    return logits
