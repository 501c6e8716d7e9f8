"""The read-only names of `MultiHeadAttention`, Keras's and its own.

`keras.layers.MultiHeadAttention` exposes its arguments as read-only
properties (`num_heads`, `key_dim`, ...) and holds its sub-layers as
`_query_dense` etc.; code written for it reaches for both. This mixin gives
`keras_attn.layers.MultiHeadAttention` the same names, read from the
attributes its constructor and `build` set.
"""


class MultiHeadAttentionNames:
    """Read-only properties of `MultiHeadAttention`'s arguments and sub-layers."""

    @property
    def num_heads(self):
        return self._num_heads

    @property
    def key_dim(self):
        return self._key_dim

    @property
    def value_dim(self):
        return self._value_dim

    @property
    def num_key_value_heads(self):
        """The number of key/value heads (`num_heads` unless grouped)."""
        return self._num_key_value_heads

    @property
    def dropout(self):
        return self._dropout

    @property
    def use_bias(self):
        return self._use_bias

    @property
    def use_gate(self):
        return self._use_gate

    @property
    def attention_axes(self):
        return self._attention_axes

    @property
    def sliding_window(self):
        return self._sliding_window

    @property
    def flash_attention(self):
        return self._flash_attention

    @property
    def output_dim(self):
        """Deprecated: the last entry of `output_shape` (`None` if unset)."""
        return None if self._output_shape is None else self._output_shape[-1]

    @property
    def use_fused_attention(self):
        """Deprecated: whether the fused kernel may run (`flash_attention`)."""
        return self._flash_attention is not False

    # The sub-layers are held as `_query_dense` etc. (Keras's names, which
    # code written for Keras's layer reaches for) and saved under these
    # public names: Keras's saving visits public attributes first, so the
    # weights' paths in `.keras` and `.weights.h5` files stay
    # `query_dense/...`, as in Keras's own layer and earlier keras-attn.

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    @property
    def gate_dense(self):
        """The gate projection, or `None` without `use_gate`."""
        return getattr(self, "_gate_dense", None)
