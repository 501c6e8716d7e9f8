"""A call's arguments by name, for a `compute_output_spec` that reads a few."""

import inspect


def call_arguments(layer, args, kwargs):
    """The arguments of a call of `layer`, by `call`'s parameter names.

    Keras hands `compute_output_spec` the arguments of `call`. A layer whose
    output spec reads a few of many call arguments binds them here, so the
    argument list is written once, on `call`, and the two cannot drift apart.

    Args:
        layer: the `keras.layers.Layer` being called.
        args: tuple, the call's positional arguments.
        kwargs: dict, the call's keyword arguments.

    Returns:
        A dict from each parameter name of `layer.call` to its value, the
        defaults of `call` filling the arguments not given.
    """
    bound = inspect.signature(layer.call).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments
