"""`MultiHeadAttention`'s override point: `_compute_attention` on projected heads.

`keras.layers.MultiHeadAttention` lets a subclass replace the attention
itself by overriding `_compute_attention(query, key, value,
attention_mask, training, ...)`, which receives the projected heads and
the merged mask; code written for Keras's layer does so. This mixin gives
`keras_attn.layers.MultiHeadAttention` that method (the default runs
`keras_attn.layers.attention_core.compute_attention`) and the one place
that calls it, `_call_compute_attention`, which passes a subclass's
override only the arguments of Keras's older signature unless they are
set.
"""

from keras_attn.layers.attention_core import compute_attention


class ComputeAttentionOverride:
    """`_compute_attention` and its caller, for `MultiHeadAttention`."""

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
        attention_bias=None,
        masked_keys_are_finite=False,
    ):
        """Attention on projected heads: the override point of Keras's layer.

        `call` and `call_with_key_value` project their inputs and hand the
        heads here. With `attention_axes`, the axes not attended over have
        joined the batch and the attended ones are one length, so this
        method always sees sequences.

        Args:
            query: projected queries `(batch, query_length, num_heads,
                key_dim)`.
            key: projected keys `(batch, key_length, num_key_value_heads,
                key_dim)`.
            value: projected values `(batch, key_length,
                num_key_value_heads, value_dim)`.
            attention_mask: optional boolean mask `(batch, query_length,
                key_length)` or `(batch, num_heads, query_length,
                key_length)` (or a shape that broadcasts to it).
            training: bool, whether dropout is active.
            return_attention_scores: bool, whether to compute the weights.
            use_causal_mask: bool, whether to apply the causal mask as
                well (`call` passes it only when it is the only mask, so
                the backend's causal kernel runs). Defaults to `False`.
            attention_bias: optional float tensor broadcastable to
                `(batch, num_heads, query_length, key_length)`, added to
                the scaled scores. Defaults to `None`.
            masked_keys_are_finite: bool, whether the keys and values that
                no query attends are known finite (a zeroed cache), so the
                guard that zeroes them is skipped (see
                `keras_attn.layers.attention_core.compute_attention`).
                Defaults to `False`.

        Returns:
            `(attention_output, attention_scores)`: `(batch, query_length,
            num_heads, value_dim)` and the weights `(batch, num_heads,
            query_length, key_length)`, or `None` unless
            `return_attention_scores=True`.
        """
        if len(query.shape) != 4:
            raise ValueError(
                "`_compute_attention` takes projected heads `(batch, length, "
                "num_heads, head_dim)`. Received: "
                f"query.shape={tuple(query.shape)}"
            )
        return compute_attention(
            query,
            key,
            value,
            mask=attention_mask,
            bias=attention_bias,
            is_causal=use_causal_mask,
            scale=self._inverse_sqrt_key_dim,
            dropout_rate=self._dropout,
            training=training,
            seed_generator=self.seed_generator,
            return_attention_scores=return_attention_scores,
            flash_attention=self._flash_attention,
            masked_keys_are_finite=masked_keys_are_finite,
        )

    def _overrides_compute_attention(self):
        return (
            type(self)._compute_attention
            is not ComputeAttentionOverride._compute_attention
        )

    def _call_compute_attention(
        self,
        queries,
        keys,
        values,
        mask,
        bias,
        training,
        return_attention_scores,
        causal_only=False,
        masked_keys_are_finite=False,
    ):
        """`_compute_attention` with only the arguments a subclass's
        override of Keras's older signature takes, unless set.

        `masked_keys_are_finite` is a shortcut, not a meaning: it reaches
        only our own `_compute_attention`, never an override.
        """
        extra = {}
        if causal_only:
            extra["use_causal_mask"] = True
        if bias is not None:
            extra["attention_bias"] = bias
        if masked_keys_are_finite and not self._overrides_compute_attention():
            extra["masked_keys_are_finite"] = True
        return self._compute_attention(
            queries,
            keys,
            values,
            mask,
            training,
            return_attention_scores,
            **extra,
        )
