"""ONNX conversions for the TensorFlow ops that tf2onnx 1.17 lacks.

Keras's `model.export(path, format="onnx")` on the TensorFlow backend
traces the model to a TensorFlow graph and hands it to tf2onnx. Three ops
that our models and decoding loop produce have no tf2onnx handler, and the
file it writes is then refused by ONNX Runtime (`No Op registered for
Erfc`):

- `Erfc`, from `keras.activations.gelu` (exact GELU is
  `0.5 * x * erfc(-x / sqrt(2))` in TensorFlow 2.21): written as
  `1 - Erf(x)`.
- `XlaDynamicUpdateSlice`, from `keras.ops.slice_update` (the decoding
  cache and the token buffer): written as `ScatterND` over the update's
  index grid, with XLA's clamping of the start indices.
- `Bitcast` float32 to int32 followed by `BitwiseAnd` with the sign mask,
  from `keras.ops.signbit` (inside `keras.ops.argmax`, which tells `-0.0`
  from `0.0`): the sign bit is computed directly (`x < 0`, or `1 / x < 0`
  for `-0.0`). Any other use of `Bitcast` is refused at conversion time.

`register_tf2onnx_handlers()` adds them to tf2onnx's op registry (once per
process); they apply to every later conversion in the process, Keras's
`model.export(format="onnx")` included.
"""

import functools

import numpy as np

# The int32 with only the sign bit set: what `signbit` masks a float's bits with.
SIGN_MASK = np.iinfo(np.int32).min


@functools.cache
def register_tf2onnx_handlers():
    """Registers the conversions above with tf2onnx (idempotent)."""
    from onnx import TensorProto
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    def constant(ctx, name, value):
        return ctx.make_const(utils.make_name(name), np.asarray(value)).output[0]

    @tf_op("Erfc")
    class Erfc:  # noqa: F841  (registered by the decorator)
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
            erf = ctx.make_node("Erf", [node.input[0]], op_name_scope=node.name)
            one = constant(ctx, "erfc_one", np.array(1, dtype=dtype))
            node.type = "Sub"
            ctx.replace_inputs(node, [one, erf.output[0]])

    @tf_op("XlaDynamicUpdateSlice")
    class XlaDynamicUpdateSlice:  # noqa: F841
        @classmethod
        def version_13(cls, ctx, node, **kwargs):
            operand, update, starts = node.input
            rank = len(ctx.get_shape(update))
            scope = dict(op_name_scope=node.name)
            operand_shape = ctx.make_node("Shape", [operand], **scope).output[0]
            update_shape = ctx.make_node("Shape", [update], **scope).output[0]
            starts = ctx.make_node(
                "Cast", [starts], attr={"to": TensorProto.INT64}, **scope
            ).output[0]
            # XLA clamps each start to [0, operand_dim - update_dim].
            limit = ctx.make_node("Sub", [operand_shape, update_shape], **scope)
            starts = ctx.make_node("Min", [starts, limit.output[0]], **scope)
            starts = ctx.make_node(
                "Max",
                [starts.output[0], constant(ctx, "dus_zero", np.int64(0))],
                **scope,
            ).output[0]
            coordinates = []
            for axis in range(rank):
                index = constant(ctx, "dus_axis", np.array([axis], np.int64))
                size = ctx.make_node("Gather", [update_shape, index], **scope)
                start = ctx.make_node("Gather", [starts, index], **scope)
                # (update_dim,): this axis's positions in the operand.
                positions = ctx.make_node(
                    "Range",
                    [
                        ctx.make_node("Squeeze", [start.output[0]], **scope).output[0],
                        ctx.make_node(
                            "Squeeze",
                            [
                                ctx.make_node(
                                    "Add", [start.output[0], size.output[0]], **scope
                                ).output[0]
                            ],
                            **scope,
                        ).output[0],
                        constant(ctx, "dus_one", np.int64(1)),
                    ],
                    **scope,
                )
                # (1, ..., update_dim, ..., 1), then broadcast to update.shape.
                axis_shape = np.ones(rank, np.int64)
                axis_shape[axis] = -1
                positions = ctx.make_node(
                    "Reshape",
                    [positions.output[0], constant(ctx, "dus_shape", axis_shape)],
                    **scope,
                )
                positions = ctx.make_node(
                    "Expand", [positions.output[0], update_shape], **scope
                )
                coordinates.append(
                    ctx.make_node(
                        "Unsqueeze",
                        [positions.output[0], constant(ctx, "dus_last", [-1])],
                        **scope,
                    ).output[0]
                )
            # (*update.shape, rank): the operand index of every update element.
            indices = ctx.make_node("Concat", coordinates, attr={"axis": -1}, **scope)
            node.type = "ScatterND"
            ctx.replace_inputs(node, [operand, indices.output[0], update])

    @tf_op("Bitcast")
    class SignBitcast:  # noqa: F841
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            source = ctx.get_dtype(node.input[0])
            target = node.get_attr_value("type")
            consumers = ctx.find_output_consumers(node.output[0])
            if (
                source != TensorProto.FLOAT
                or target != TensorProto.INT32
                or not all(_masks_sign(ctx, consumer) for consumer in consumers)
            ):
                raise ValueError(
                    "Only `Bitcast` float32 -> int32 feeding `BitwiseAnd` with "
                    "the sign mask (keras.ops.signbit) converts to ONNX. "
                    f"Received: node {node.name}"
                )
            x = node.input[0]
            scope = dict(op_name_scope=node.name)
            zero = constant(ctx, "sign_zero", np.float32(0))
            negative = ctx.make_node("Less", [x, zero], **scope)
            # 1 / -0.0 is -inf: the sign of a zero.
            inverse = ctx.make_node(
                "Div", [constant(ctx, "sign_one", np.float32(1)), x], **scope
            )
            negative_zero = ctx.make_node("Less", [inverse.output[0], zero], **scope)
            sign = ctx.make_node(
                "Or", [negative.output[0], negative_zero.output[0]], **scope
            )
            # Only the sign bit is kept by the consumer: the other bits are 0.
            node.type = "Where"
            node.attr.clear()
            ctx.replace_inputs(
                node,
                [
                    sign.output[0],
                    constant(ctx, "sign_mask", np.int32(SIGN_MASK)),
                    constant(ctx, "sign_none", np.int32(0)),
                ],
            )

    @tf_op("BitwiseAnd")
    class BitwiseAnd:  # noqa: F841
        @classmethod
        def version_18(cls, ctx, node, **kwargs):
            pass  # ONNX's BitwiseAnd (opset 18) is TensorFlow's.

        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            # Before opset 18: only the sign mask of `signbit`, whose other
            # input already holds nothing but the sign bit (above).
            if not _masks_sign(ctx, node):
                raise ValueError(
                    "`BitwiseAnd` converts to ONNX before opset 18 only as "
                    f"keras.ops.signbit's sign mask. Received: node {node.name}"
                )
            node.type = "Identity"
            ctx.replace_inputs(node, [node.input[0]])


def _masks_sign(ctx, node):
    """Whether `node` is `BitwiseAnd(x, SIGN_MASK)`."""
    if node.type != "BitwiseAnd":
        return False
    mask = ctx.get_node_by_output(node.input[1])
    return (
        mask is not None
        and mask.is_const()
        and np.all(mask.get_tensor_value(as_list=False) == SIGN_MASK)
    )
