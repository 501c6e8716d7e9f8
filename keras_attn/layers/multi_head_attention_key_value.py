"""`MultiHeadAttention`'s cacheable split: keys and values, then attention.

A call of `keras_attn.layers.MultiHeadAttention` projects the keys and
values and attends to them. Decoding with a cache splits the two:
`compute_key_value` projects (and normalizes and rotates) keys and values
once, for a cache to store, and `call_with_key_value` attends from new
queries to what the cache holds. One protocol, one return type: the same
as `call`'s.
"""

from keras_attn.layers.attention_arguments import check_key_value_shapes
from keras_attn.layers.masking import as_bool_mask
from keras_attn.layers.query_key_heads import transform_heads


class KeyValueAttention:
    """`compute_key_value` and `call_with_key_value` of `MultiHeadAttention`."""

    def compute_key_value(self, value, key=None, start_index=0):
        """Projects keys and values into heads (the cacheable half of a call).

        Keys are normalized (`qk_norm`) and rotated (rotary positions) here,
        so a cache stores them ready to attend.

        Args:
            value: tensor `(batch, key_length, value_features)`.
            key: optional tensor `(batch, key_length, key_features)`.
                Defaults to `value`.
            start_index: int or scalar int tensor, the position of the first
                key (the cache index), for rotary positions. Defaults to `0`.

        Returns:
            `(keys, values)` of shapes `(batch, key_length,
            num_key_value_heads, key_dim)` and `(batch, key_length,
            num_key_value_heads, value_dim)`.
        """
        key = value if key is None else key
        check_key_value_shapes(value.shape, key.shape)
        keys = transform_heads(
            self._key_dense(key), self.key_norm, self._rotation, start_index
        )
        return keys, self._value_dense(value)

    def call_with_key_value(
        self,
        query,
        keys,
        values,
        attention_mask=None,
        attention_bias=None,
        return_attention_scores=False,
        training=None,
        start_index=0,
        masked_keys_are_finite=False,
    ):
        """Attends from `query` to keys and values already projected.

        This is the decoding path: `keys`/`values` come from
        `compute_key_value`, once per sentence for cross-attention and
        growing by one position per step for self-attention. The mask is
        used as given: `sliding_window` is not applied here (the caller
        knows the positions).

        Args:
            query: tensor `(batch, query_length, query_dim)`.
            keys: tensor `(batch, key_length, num_key_value_heads,
                key_dim)`.
            values: tensor `(batch, key_length, num_key_value_heads,
                value_dim)`.
            attention_mask: optional boolean
                `(batch, query_length, key_length)` or
                `(batch, num_heads, query_length, key_length)`.
            attention_bias: optional float tensor broadcastable to
                `(batch, num_heads, query_length, key_length)`. Defaults to
                `None`.
            return_attention_scores: bool. Defaults to `False`.
            training: bool, whether dropout is active. Defaults to `None`.
            start_index: int or scalar int tensor, the position of the first
                query (the cache index), for rotary positions. Defaults to
                `0`.
            masked_keys_are_finite: bool, whether the keys and values at
                the positions `attention_mask` hides from every query are
                known finite, as the unwritten slots of a cache allocated
                with zeros: then they are not zeroed first (two passes
                over `keys` and `values` saved per call). Defaults to
                `False`.

        Returns:
            As `call`.
        """
        if self._layout is not None:
            raise ValueError(
                "`call_with_key_value` attends along one sequence axis; layer "
                f"{self.name} was built for inputs of rank {self._layout.rank}. "
                "Call the layer instead."
            )
        mask = as_bool_mask(attention_mask, "attention_mask")
        bias = self._sequence_bias(attention_bias, query, keys)
        # (batch, query_length, num_heads, key_dim)
        queries = self._queries(query, start_index)
        attended, scores = self._call_compute_attention(
            queries,
            keys,
            values,
            mask,
            bias,
            training,
            return_attention_scores,
            masked_keys_are_finite=masked_keys_are_finite,
        )
        return self._project_output(query, attended, scores, return_attention_scores)
