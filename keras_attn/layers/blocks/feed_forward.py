"""Position-wise feed-forward network, section 3.3 of the paper, and its gated
variants (Shazeer, 2020)."""

import keras
from keras import ops

from keras_attn.layers._last_axis_matmul import flattens_positions
from keras_attn.layers.blocks.position_wise_dense import PositionwiseDense
from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.validation import check_bool, check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="keras_attn")
def gelu_approximate(x):
    """GELU's tanh approximation, `keras.activations.gelu(x, approximate=True)`.

    The gate of `"geglu_approximate"`: T5 v1.1's and Gemma's GELU
    (`transformers`' `"gelu_new"` and `"gelu_pytorch_tanh"`).
    """
    return keras.activations.gelu(x, approximate=True)


# The gated activations `FeedForward` takes by name, and the activation each
# applies to its gate (Shazeer, "GLU Variants Improve Transformer", 2020).
GATED_ACTIVATIONS = ("geglu", "swiglu", "reglu", "geglu_approximate")
_GATE_ACTIVATIONS = {
    "geglu": "gelu",
    "swiglu": "silu",
    "reglu": "relu",
    "geglu_approximate": gelu_approximate,
}


def is_gated(activation):
    """Whether `activation` names a gated activation (`GATED_ACTIVATIONS`)."""
    return isinstance(activation, str) and activation in GATED_ACTIVATIONS


def get_activation(activation, name="activation"):
    """A gated activation's name as it is, any other as `keras.activations.get`.

    Args:
        activation: a Keras activation (name, serialized or callable) or
            the name of a gated one (`GATED_ACTIVATIONS`).
        name: str, the argument's public name, for the message. Defaults
            to `"activation"`.

    Raises:
        ValueError: `activation` is neither, or is Keras's `"glu"`, which
            halves the features it is given, so the output projection could
            not take them (naming the argument and value).
    """
    if is_gated(activation):
        return activation
    try:
        function = keras.activations.get(activation)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"`{name}` must name a Keras activation (e.g. 'relu', 'gelu'), "
            f"a gated one ({', '.join(GATED_ACTIVATIONS)}) or be a callable. "
            f"Received: {name}={activation!r:.100} ({error})"
        ) from error
    if function is keras.activations.glu:
        raise ValueError(
            f"`{name}='glu'` splits the features it is given in two halves, "
            "a value and its sigmoid gate, so the feed-forward network's "
            "output projection would receive half of `intermediate_dim`. "
            "For a gated linear unit use a gated feed-forward network, "
            f"{name}='swiglu', 'geglu' or 'reglu' (a gate projection of its "
            f"own, Shazeer, 2020). Received: {name}={activation!r:.100}"
        )
    return function


def serialize_activation(activation):
    """The config entry of an activation from `get_activation`."""
    if is_gated(activation):
        return activation
    return keras.activations.serialize(activation)


@keras.saving.register_keras_serializable(package="keras_attn")
class FeedForward(keras.layers.Layer):
    """`FFN(x) = max(0, x W_1 + b_1) W_2 + b_2`, applied at every position.

    With a gated activation (`"geglu"`, `"swiglu"`, `"reglu"` or
    `"geglu_approximate"`) the inner layer is a gated linear unit,
    `FFN(x) = (act(x W_gate) * (x W_1)) W_2` (biases added when
    `use_bias`), `act` being GELU (Keras's exact one,
    `keras.activations.gelu`), SiLU (Swish), ReLU or GELU's tanh
    approximation (`gelu_approximate`, T5 v1.1's): a third sub-layer
    `gate_dense` (`W_gate`) carries the activation and `intermediate_dense`
    (`W_1`) is linear, the names and roles of keras-hub's gated
    feed-forward (and of Hugging Face's `gate_proj` and `up_proj`).

    Args:
        intermediate_dim: int, the inner dimension `d_ff` (2048 in the base
            model).
        activation: activation of the inner layer: a Keras activation (name
            or callable) or the name of a gated one in `GATED_ACTIVATIONS`.
            Keras's `"glu"`, which halves the features, is refused (use a
            gated one). Defaults to `"relu"`.
        dropout: float in `[0, 1)`, dropout on the inner activations.
            Defaults to `0.0`.
        use_bias: bool. Defaults to `True`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        bias_initializer: Defaults to `"zeros"`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, length, dim)`.
        training: bool, whether dropout is active.

    Returns:
        A tensor of the shape of `inputs`.

    Example:

    >>> ffn = keras_attn.layers.FeedForward(intermediate_dim=32)
    >>> tuple(ffn(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 8)
    >>> swiglu = keras_attn.layers.FeedForward(32, activation="swiglu")
    >>> tuple(swiglu(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.3.
        Shazeer, "GLU Variants Improve Transformer", 2020,
        https://arxiv.org/abs/2002.05202.
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = check_positive_int(intermediate_dim, "intermediate_dim")
        # A callable, or the name of a gated activation.
        self.activation = get_activation(activation)
        self.dropout = check_rate(dropout, "dropout")
        self.use_bias = check_bool(use_bias, "use_bias")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    @property
    def gated(self):
        """Whether the inner layer is a gated linear unit."""
        return is_gated(self.activation)

    def build(self, inputs_shape):
        dim = inputs_shape[-1]
        check_positive_int(dim, "inputs.shape[-1]")
        dense_args = dict(
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
        )
        self.intermediate_dense = PositionwiseDense(
            self.intermediate_dim,
            activation=None if self.gated else self.activation,
            name="intermediate_dense",
            **dense_args,
        )
        self.intermediate_dense.build(inputs_shape)
        self.gate_dense = None
        if self.gated:
            self.gate_dense = PositionwiseDense(
                self.intermediate_dim,
                activation=_GATE_ACTIVATIONS[self.activation],
                name="gate_dense",
                **dense_args,
            )
            self.gate_dense.build(inputs_shape)
        self.output_dense = PositionwiseDense(dim, name="output_dense", **dense_args)
        self.dropout_layer = FastDropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self.built = True

    def call(self, inputs, training=None):
        # Position-wise: one 2-D product per layer over all positions, which
        # XLA compiles to a cheaper backward pass (not on torch, see
        # `flattens_positions`).
        flat = inputs
        if flattens_positions():
            flat = ops.reshape(inputs, (-1, inputs.shape[-1]))  # (batch * length, dim)
        hidden = self.intermediate_dense(flat)  # (..., d_ff)
        if self.gated:
            hidden = self.gate_dense(flat) * hidden  # (..., d_ff)
        if training:  # the identity at inference: no layer call
            hidden = self.dropout_layer(hidden, training=training)
        outputs = self.output_dense(hidden)  # (..., dim)
        if flat is inputs:
            return outputs
        return ops.reshape(outputs, ops.shape(inputs))  # (batch, length, dim)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": serialize_activation(self.activation),
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
