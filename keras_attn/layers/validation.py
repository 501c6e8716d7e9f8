"""Argument checks shared by the layers; messages name argument and value."""

import numbers


def check_positive_int(value, name):
    """Returns `value` if it is a positive integer, else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"`{name}` must be a positive integer. Received: {name}={value!r} "
            f"of type {type(value).__name__}"
        )
    if value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={value}"
        )
    return int(value)


def check_dropout_rate(value, name="dropout"):
    """Returns `value` as a float if it lies in `[0, 1)`, else raises."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`{name}` must be a float in [0, 1). Received: {name}={value!r}"
        )
    if not 0.0 <= value < 1.0:
        raise ValueError(
            f"`{name}` must be a float in [0, 1). Received: {name}={value}"
        )
    return float(value)


def check_divisible(dividend, divisor, dividend_name, divisor_name):
    """Raises `ValueError` unless `dividend % divisor == 0`."""
    if dividend % divisor:
        raise ValueError(
            f"`{dividend_name}` must be divisible by `{divisor_name}`. Received: "
            f"{dividend_name}={dividend}, {divisor_name}={divisor}"
        )


def check_choice(value, name, choices):
    """Returns `value` if it is one of `choices`, else raises `ValueError`."""
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {sorted(choices)}. Received: {name}={value!r}"
        )
    return value
