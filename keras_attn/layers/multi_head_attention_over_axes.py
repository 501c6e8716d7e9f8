"""`MultiHeadAttention` over `attention_axes`: inputs of rank > 3.

Keras's `MultiHeadAttention` attends over any axes of its inputs (the rows
and columns of an image, say). `keras_attn.layers.MultiHeadAttention` runs
them through the one sequence kernel: the attended axes are flattened, in
row-major order, into one sequence and the other axes join the batch
(`keras_attn.layers.attention_axes.AxesLayout`, built by `build`); the
masks and bias follow (`keras_attn.layers.masks_over_axes`), and the
attended values and scores go back to the inputs' layout.
"""

from keras_attn.layers.masks_over_axes import masks_to_sequence
from keras_attn.layers.query_key_heads import transform_heads


class AttentionOverAxes:
    """`_call_over_axes`, `MultiHeadAttention.call` for inputs of rank > 3."""

    def _call_over_axes(
        self,
        query,
        value,
        key,
        masks,
        attention_bias,
        return_attention_scores,
        training,
        causal_only,
    ):
        """`call` for inputs of rank > 3: attention over `attention_axes`.

        The masks use Keras's layout without the heads axis, the bias
        Keras's scores layout. The attended axes are flattened in
        row-major order into one sequence (the axes not attended over join
        the batch); the causal mask and the sliding window run along it
        (with one attention axis: along that axis).
        """
        layout = self._layout
        # (batch, ..., heads, dim)
        queries = transform_heads(self._query_dense(query), self.query_norm)
        keys = transform_heads(self._key_dense(key), self.key_norm)
        values = self._value_dense(value)
        # (batch', length, heads, dim)
        sequence = [layout.to_sequence(x) for x in (queries, keys, values)]
        mask, bias = masks_to_sequence(
            layout, masks, attention_bias, (queries, keys), sequence[:2]
        )
        attended, scores = self._call_compute_attention(
            *sequence,
            mask,
            bias,
            training,
            return_attention_scores,
            causal_only,
        )
        attended = layout.from_sequence(attended, queries)
        if scores is not None:
            scores = layout.scores_from_sequence(scores, queries, keys)
        return self._project_output(query, attended, scores, return_attention_scores)
