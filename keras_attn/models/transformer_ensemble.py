"""Several encoder-decoder Transformers decoded as one."""

import keras
from keras import ops

from keras_attn.models.transformer import Transformer
from keras_attn.validation import check_positive_float


def _check_members(members):
    """`members` as a tuple of `Transformer`s that decode one vocabulary."""
    if isinstance(members, Transformer) or not isinstance(members, (list, tuple)):
        raise TypeError(
            "`members` must be a list of `keras_attn.models.Transformer`. "
            f"Received: members={members!r:.100}"
        )
    if not members:
        raise ValueError("`members` must hold at least one model. Received: []")
    for i, member in enumerate(members):
        if not isinstance(member, Transformer):
            raise TypeError(
                "`members` must be a list of `keras_attn.models.Transformer`. "
                f"Received: members[{i}] of type {type(member).__name__}"
            )
    first = members[0]
    # The sentences go through each member as the same ids, and each member
    # must accept every length the ensemble does.
    for name, value in (
        ("vocabulary_size", lambda m: m.vocabulary_size),
        ("pad_id", lambda m: m.pad_id),
        ("max_sequence_length", lambda m: m.max_sequence_length),
        ("position_scheme.max_length", lambda m: m.position_scheme.max_length),
    ):
        for i, member in enumerate(members[1:], start=1):
            if value(member) != value(first):
                raise ValueError(
                    f"Every member must have members[0]'s {name}="
                    f"{value(first)!r}. Received: members[{i}].{name}="
                    f"{value(member)!r}"
                )
    return tuple(members)


def _check_weights(weights, count):
    """The members' weights as floats summing to one (`None`: equal)."""
    if weights is None:
        return (1.0 / count,) * count
    if not isinstance(weights, (list, tuple)) or len(weights) != count:
        raise ValueError(
            f"`weights` must hold one positive float per member, {count}. "
            f"Received: weights={weights!r:.100}"
        )
    weights = [
        check_positive_float(weight, f"weights[{i}]")
        for i, weight in enumerate(weights)
    ]
    total = sum(weights)
    return tuple(weight / total for weight in weights)


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEnsemble(keras.Model):
    """Encoder-decoder `Transformer`s decoded together, as one model.

    Each member encodes the source and decodes the same target tokens with
    its own cache; at every position the ensemble's output is the weighted
    mean of the members' log-probabilities (Marian's and OpenNMT's
    ensembles: the normalized geometric mean of their distributions). The
    decoding loop, its samplers and `keras_attn.text.Translator` take the
    ensemble wherever they take a `Transformer`: beam search ranks every
    hypothesis by the ensemble's scores, in one beam.

    Members may differ in depth and width (checkpoints of different seeds,
    epochs or sizes) but must decode one vocabulary: the same
    `vocabulary_size`, `pad_id`, `max_sequence_length` and position limit.

    Args:
        members: a list of `keras_attn.models.Transformer`.
        weights: a list of positive floats, one per member, normalized to
            sum to one. Defaults to `None`, meaning equal weights.
        **kwargs: `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: a dict of `encoder_tokens` `(batch, source_length)` and
            `decoder_tokens` `(batch, target_length)`, as `Transformer`.

    Returns (call):
        float32 log-probabilities `(batch, target_length, vocabulary_size)`.

    Example:

    >>> members = [
    ...     keras_attn.models.Transformer.from_preset(
    ...         "transformer_tiny", vocabulary_size=20)
    ...     for _ in range(2)
    ... ]
    >>> ensemble = keras_attn.models.TransformerEnsemble(members)
    >>> generator = keras_attn.generation.SequenceGenerator(
    ...     ensemble, strategy="beam", beam_size=2, max_length=6)
    >>> generator.generate(np.ones((1, 4), "int32"))["tokens"].shape
    (1, 6)
    """

    def __init__(self, members, weights=None, **kwargs):
        super().__init__(**kwargs)
        self.members = _check_members(members)
        self.member_weights = _check_weights(weights, len(self.members))
        first = self.members[0]
        self.vocabulary_size = first.vocabulary_size
        self.pad_id = first.pad_id
        self.max_sequence_length = first.max_sequence_length
        self.position_scheme = first.position_scheme

    def build(self, input_shape=None):
        # Every member was built when it was made (functional models).
        self.built = True

    def _mean(self, logits):
        """The weighted mean of each member's log-softmax, in float32."""
        total = None
        for weight, member_logits in zip(self.member_weights, logits):
            log_probabilities = ops.log_softmax(ops.cast(member_logits, "float32"))
            term = log_probabilities * weight
            total = term if total is None else total + term
        return total

    def call(self, inputs, training=False):
        return self._mean(
            [member(inputs, training=training) for member in self.members]
        )

    def encode(self, encoder_tokens, training=False):
        """Runs every member's encoder.

        Returns:
            `(encoder_outputs, encoder_padding_mask)`: a tuple of each
            member's `(batch, source_length, hidden_dim)` output, and the
            boolean `(batch, source_length)` mask they share.
        """
        outputs, mask = [], None
        for member in self.members:
            output, mask = member.encode(encoder_tokens, training=training)
            outputs.append(output)
        return tuple(outputs), mask

    def decode(
        self, decoder_tokens, encoder_output, encoder_padding_mask, training=False
    ):
        """Teacher-forced decoder passes; returns the mean log-probabilities."""
        return self._mean(
            [
                member.decode(
                    decoder_tokens, output, encoder_padding_mask, training=training
                )
                for member, output in zip(self.members, encoder_output)
            ]
        )

    def initial_cache(self, encoder_output, encoder_padding_mask, max_length):
        """Every member's cache (see `Transformer.initial_cache`).

        Returns:
            A dict: `"self_attention"`, the tuple of the members' slots
            (what beam search reorders), and `"members"`, the rest of each
            member's cache.
        """
        caches = [
            member.initial_cache(output, encoder_padding_mask, max_length)
            for member, output in zip(self.members, encoder_output)
        ]
        return {
            "self_attention": tuple(cache["self_attention"] for cache in caches),
            "members": tuple(
                {k: v for k, v in cache.items() if k != "self_attention"}
                for cache in caches
            ),
        }

    def decode_step(self, decoder_tokens, cache, cache_index):
        """Decodes new positions with every member (see
        `Transformer.decode_step`).

        Returns:
            `(log_probabilities, cache)`: float32 `(batch, new_length,
            vocabulary_size)`, the members' weighted mean, and the updated
            cache.
        """
        logits, self_attention = [], []
        for member, slots, rest in zip(
            self.members, cache["self_attention"], cache["members"]
        ):
            member_logits, member_cache = member.decode_step(
                decoder_tokens, {**rest, "self_attention": slots}, cache_index
            )
            logits.append(member_logits)
            self_attention.append(member_cache["self_attention"])
        return self._mean(logits), {**cache, "self_attention": tuple(self_attention)}

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "members": [
                    keras.saving.serialize_keras_object(member)
                    for member in self.members
                ],
                "weights": list(self.member_weights),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["members"] = [
            keras.saving.deserialize_keras_object(member)
            for member in config["members"]
        ]
        return cls(**config)
