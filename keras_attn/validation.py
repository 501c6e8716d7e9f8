"""Argument checks for every public entry point of keras-attn.

One module, one calling convention: `check_x(value, name, ...)`, value
first, then the argument's public name (the one the user typed). Each
check returns the value in its canonical Python type (`int`, `float`,
`bool`), so callers write `self.units = check_positive_int(units, "units")`.

The rule for the exception type is Python's:

- `TypeError` when the value has the wrong type (`"2"`, `2.5` or `True`
  where an integer is expected, a string where a number is expected);
- `ValueError` when the type is right and the value is not (`0` where a
  positive integer is expected, `nan` or `inf` where a finite number is).

Every message names the argument, says what was expected and ends with
`Received: name=value`, as Keras's own argument errors do.

Booleans are never numbers here (`True` is an `int` to Python, but
`num_heads=True` is a bug, not a 1), and numbers are never booleans
(`normalize_first="no"` or `use_cache=0` are refused rather than read by
truthiness). NumPy scalars are accepted and converted.

Numbers that reach float32 math are bounded to what float32 can carry
there (`check_epsilon`, `check_max_wavelength`, `check_scaling_factor`):
a value a Python float holds but float32 does not (`1e-45`, `1e300`)
would otherwise be flushed to zero or rounded to infinity inside the
layer and give NaN, on some backends and not others.
"""

import collections.abc
import math
import numbers

import numpy as np

# Seeds go to NumPy and the backends' random generators, which take
# unsigned 32-bit seeds.
MAX_SEED = 2**32

# float32's largest finite number and its smallest normal one: JAX and
# TensorFlow flush smaller (subnormal) numbers to zero on CPU.
FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4028234663852886e+38
FLOAT32_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)  # 2**-126
# Positions are computed in float32, exact integers below 2**24: the
# longest sequence (or largest cache index) the position bounds cover.
MAX_POSITION = 2**24
# The bounds of the wavelength base and of the position scaling factor of
# sinusoidal and rotary positions. The inverse frequencies are
# `max_wavelength ** (-2i / d) / scaling_factor ** k`, `k` 1 (linear,
# YaRN) or at most 2 (dynamic): with `max_wavelength` in [1, 2**60] and
# `scaling_factor` in [2**-32, 2**32] each lies in [2**-124, 2**64], a
# normal float32 number, and each angle `position * frequency` of a
# position below `MAX_POSITION` below 2**88, finite (its sine and cosine
# too).
MAX_WAVELENGTH_RANGE = (1.0, 2.0**60)
SCALING_FACTOR_RANGE = (2.0**-32, 2.0**32)


def _received(name, value):
    return f"Received: {name}={value!r}"


def _type_name(value):
    return type(value).__name__


def is_integer(value):
    """True for Python and NumPy integers, False for booleans."""
    return isinstance(value, numbers.Integral) and not isinstance(
        value, (bool, np.bool_)
    )


def is_real(value):
    """True for Python and NumPy real numbers, False for booleans."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _describe_range(min_value, max_value, include_min=True, include_max=True):
    if min_value is None and max_value is None:
        return ""
    if max_value is None:
        return f" {'>=' if include_min else '>'} {min_value}"
    if min_value is None:
        return f" {'<=' if include_max else '<'} {max_value}"
    left = "[" if include_min else "("
    right = "]" if include_max else ")"
    return f" in {left}{min_value}, {max_value}{right}"


def check_int(value, name, min_value=None, max_value=None, allow_none=False):
    """Returns `value` as an `int` if it is an integer in the given range.

    Args:
        value: The argument's value.
        name: The argument's public name, for the message.
        min_value: Optional inclusive lower bound.
        max_value: Optional inclusive upper bound.
        allow_none: Whether `None` is accepted (and returned).

    Raises:
        TypeError: if `value` is not an integer (booleans and floats,
            even `2.0`, are not).
        ValueError: if it lies outside `[min_value, max_value]`.
    """
    if value is None and allow_none:
        return None
    expected = f"an integer{_describe_range(min_value, max_value)}"
    if allow_none:
        expected += " or None"
    if not is_integer(value):
        raise TypeError(
            f"`{name}` must be {expected}. {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    if (min_value is not None and value < min_value) or (
        max_value is not None and value > max_value
    ):
        raise ValueError(f"`{name}` must be {expected}. {_received(name, value)}")
    return int(value)


def check_positive_int(value, name, allow_none=False):
    """`check_int` with `min_value=1`."""
    if value is None and allow_none:
        return None
    if is_integer(value) and value < 1:
        raise ValueError(
            f"`{name}` must be a positive integer. {_received(name, value)}"
        )
    if not is_integer(value):
        raise TypeError(
            f"`{name}` must be a positive integer. {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    return int(value)


def check_non_negative_int(value, name, allow_none=False):
    """`check_int` with `min_value=0`."""
    return check_int(value, name, min_value=0, allow_none=allow_none)


def check_float(
    value,
    name,
    min_value=None,
    max_value=None,
    include_min=True,
    include_max=True,
    allow_none=False,
    reason=None,
):
    """Returns `value` as a finite `float` if it lies in the given range.

    Integers are accepted (`learning_rate=1` is a number); booleans,
    strings, NaN and infinities are not.

    Args:
        value: The argument's value.
        name: The argument's public name, for the message.
        min_value: Optional lower bound.
        max_value: Optional upper bound.
        include_min: Whether `min_value` itself is allowed.
        include_max: Whether `max_value` itself is allowed.
        allow_none: Whether `None` is accepted (and returned).
        reason: Optional text saying why the range is what it is, shown
            in parentheses after it.

    Raises:
        TypeError: if `value` is not a real number.
        ValueError: if it is NaN, infinite or outside the range.
    """
    if value is None and allow_none:
        return None
    expected = "a finite number" + _describe_range(
        min_value, max_value, include_min, include_max
    )
    if allow_none:
        expected += " or None"
    if reason:
        expected += f" ({reason})"
    if not is_real(value):
        raise TypeError(
            f"`{name}` must be {expected}. {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    value = float(value)
    too_low = min_value is not None and (
        value < min_value or (value == min_value and not include_min)
    )
    too_high = max_value is not None and (
        value > max_value or (value == max_value and not include_max)
    )
    if not math.isfinite(value) or too_low or too_high:
        raise ValueError(f"`{name}` must be {expected}. {_received(name, value)}")
    return value


def check_positive_float(value, name, allow_none=False):
    """A finite number `> 0`."""
    return check_float(
        value, name, min_value=0.0, include_min=False, allow_none=allow_none
    )


def check_epsilon(value, name="epsilon", allow_none=False):
    """A normalization's epsilon: a normal float32 number, as a `float`.

    The epsilon is added to a variance (or mean square) before its inverse
    square root. Zero, or a number below float32's smallest normal one
    (`2**-126`, which JAX and TensorFlow flush to zero), gives NaN for an
    input of equal values (an all-zero position); a number beyond float32's
    largest would be infinity.
    """
    return check_float(
        value,
        name,
        min_value=FLOAT32_SMALLEST_NORMAL,
        max_value=FLOAT32_MAX,
        allow_none=allow_none,
        reason="a normal float32 number: a smaller one is flushed to zero, "
        "and an input of equal values then normalizes to NaN",
    )


def check_max_wavelength(value, name="max_wavelength", allow_none=False):
    """The wavelength base of sinusoidal and rotary positions, as a `float`.

    Bounded to `MAX_WAVELENGTH_RANGE`, [1, 2**60]: at least 1, so that the
    wavelengths `2 * pi * max_wavelength ** (2i / d)` grow from `2 * pi`
    and no inverse frequency exceeds 1 (whatever `d`), and at most 2**60,
    so that each inverse frequency is a normal float32 number (see the
    comment on `MAX_WAVELENGTH_RANGE`).
    """
    low, high = MAX_WAVELENGTH_RANGE
    return check_float(
        value,
        name,
        min_value=low,
        max_value=high,
        allow_none=allow_none,
        reason="the longest wavelength over 2*pi: from 1, and small enough "
        "that every inverse frequency is a normal float32 number",
    )


def check_scaling_factor(value, name="scaling_factor"):
    """A position scaling factor (RoPE's context extension), as a `float`.

    Positions are divided by it in float32; bounded to
    `SCALING_FACTOR_RANGE`, [2**-32, 2**32], so that the inverse
    frequencies stay normal float32 numbers and the angles of positions
    below `MAX_POSITION` finite (see the comment on the range).
    """
    low, high = SCALING_FACTOR_RANGE
    return check_float(
        value,
        name,
        min_value=low,
        max_value=high,
        reason=f"positions, up to {MAX_POSITION}, are divided by it in "
        "float32: beyond these bounds the angles overflow or vanish",
    )


def check_rate(value, name="dropout", allow_none=False):
    """A probability in `[0, 1)`, as dropout rates are, as a `float`."""
    if allow_none and value is None:
        return None
    if not is_real(value):
        raise TypeError(
            f"`{name}` must be a float in [0, 1). {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    if not 0.0 <= value < 1.0:  # False for NaN too.
        raise ValueError(
            f"`{name}` must be a float in [0, 1). {_received(name, value)}"
        )
    return float(value)


def check_bool(value, name, allow_none=False):
    """Returns `value` if it is a boolean (Python or NumPy).

    Raises:
        TypeError: for anything else, including `0`, `1` and strings
            such as `"no"`, which truthiness would silently misread.
    """
    if value is None and allow_none:
        return None
    if not isinstance(value, (bool, np.bool_)):
        expected = "True or False" + (" or None" if allow_none else "")
        raise TypeError(
            f"`{name}` must be {expected}. {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    return bool(value)


def check_choice(value, name, choices):
    """Returns `value` if it is one of `choices`, else raises `ValueError`."""
    try:
        known = value in choices
    except TypeError:  # An unhashable value tested against a set.
        known = False
    if not known:
        shown = sorted(choices, key=repr)
        raise ValueError(f"`{name}` must be one of {shown}. {_received(name, value)}")
    return value


def check_divisible(dividend, divisor, dividend_name, divisor_name):
    """Raises `ValueError` unless `dividend % divisor == 0`."""
    if dividend % divisor:
        raise ValueError(
            f"`{dividend_name}` must be divisible by `{divisor_name}`. Received: "
            f"{dividend_name}={dividend}, {divisor_name}={divisor}"
        )


def check_seed(value, name="seed", allow_none=True):
    """An integer seed in `[0, 2**32)`, or `None` where allowed."""
    return check_int(
        value, name, min_value=0, max_value=MAX_SEED - 1, allow_none=allow_none
    )


def check_token_id(value, name, vocabulary_size, allow_none=False):
    """An integer token id in `[0, vocabulary_size)`."""
    if value is None and allow_none:
        return None
    expected = f"a token id in [0, vocabulary_size={vocabulary_size})"
    if not is_integer(value):
        raise TypeError(
            f"`{name}` must be {expected}. {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    if not 0 <= value < vocabulary_size:
        raise ValueError(f"`{name}` must be {expected}. {_received(name, value)}")
    return int(value)


def check_string(value, name, allow_none=False):
    """Returns `value` if it is a `str`."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        expected = "a string" + (" or None" if allow_none else "")
        raise TypeError(
            f"`{name}` must be {expected}. {_received(name, value)} "
            f"of type {_type_name(value)}"
        )
    return value


def check_string_list(value, name, allow_empty=True):
    """Returns `value` as a list of `str`: a sequence of strings, not one string.

    Raises:
        TypeError: for a single string (a common slip: its characters
            would be read as sentences), a non-iterable, or an element
            that is not a `str`.
        ValueError: for an empty sequence where `allow_empty` is False.
    """
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(
            f"`{name}` must be a list of strings, not a single string. "
            f"{_received(name, value)[:200]}"
        )
    strings = list(value)
    for index, string in enumerate(strings):
        if not isinstance(string, str):
            raise TypeError(
                f"`{name}` must contain only strings. Received: "
                f"{name}[{index}]={string!r:.100} of type {_type_name(string)}"
            )
    if not strings and not allow_empty:
        raise ValueError(f"`{name}` must not be empty. Received: {name}=[]")
    return strings


def check_string_pairs(first, second, first_name, second_name):
    """Two non-empty lists of `str` of the same length (sentence pairs).

    Returns:
        `(first, second)` as lists (`check_string_list` on each).

    Raises:
        TypeError: as `check_string_list`.
        ValueError: for different lengths, or no pairs at all.
    """
    first = check_string_list(first, first_name)
    second = check_string_list(second, second_name)
    if len(first) != len(second):
        raise ValueError(
            f"`{first_name}` and `{second_name}` must have the same length. "
            f"Received: len({first_name})={len(first)}, "
            f"len({second_name})={len(second)}"
        )
    if not first:
        raise ValueError(f"`{first_name}` and `{second_name}` must not be empty.")
    return first, second


def check_positive_int_sequence(value, name):
    """Returns a non-empty sequence of positive integers as a tuple of ints.

    For bucket lists, mesh shapes and lists of batch sizes. Any iterable
    but a string is accepted (list, tuple, NumPy array); the order is kept.

    Raises:
        TypeError: if `value` is not an iterable, is a string, or holds
            anything but integers (booleans and floats included).
        ValueError: if it is empty or holds an integer below 1.
    """
    expected = f"`{name}` must be a non-empty sequence of positive integers."
    if isinstance(value, (str, bytes)) or not isinstance(
        value, collections.abc.Iterable
    ):
        raise TypeError(
            f"{expected} {_received(name, value)} of type {_type_name(value)}"
        )
    items = tuple(value)
    if not all(is_integer(item) for item in items):
        raise TypeError(f"{expected} {_received(name, value)}")
    if not items or min(items) < 1:
        raise ValueError(f"{expected} {_received(name, value)}")
    return tuple(int(item) for item in items)


def check_float_dtype(value, name="dtype"):
    """Returns a dtype or dtype policy that computes in floating point.

    `None` (the global policy), a float dtype (`"float32"`, `"float64"`),
    a mixed policy (`"mixed_bfloat16"`) or a quantized one over floats
    pass. An integer or boolean dtype is refused here rather than failing
    later in an initializer, differently on each backend.

    Raises:
        ValueError: if the policy's compute or variable dtype is not a
            floating dtype.
    """
    if value is None:
        return value
    import keras  # Not at import time: the recipes import this module first.

    policy = keras.dtype_policies.get(value)
    for dtype in (policy.compute_dtype, policy.variable_dtype):
        if "float" not in keras.backend.standardize_dtype(dtype):
            raise ValueError(
                f"`{name}` must be a floating dtype or a mixed-precision policy "
                f'("float32", "float64", "mixed_bfloat16", ...). '
                f"{_received(name, policy.name)}"
            )
    return value


def eager_values(tensor):
    """The NumPy values of `tensor`, or `None` while it is traced or symbolic.

    Value checks (token ids in the vocabulary, 0/1 masks) can only read an
    eager tensor; inside `jit` or `tf.function` they are left to the code
    that handles the values there.
    """
    if isinstance(tensor, np.ndarray):
        return tensor
    import keras  # Not at import time: the recipes import this module first.

    if isinstance(tensor, keras.KerasTensor):
        return None
    try:
        return keras.ops.convert_to_numpy(tensor)
    except Exception:  # A JAX tracer or a graph-mode tf.Tensor has no values.
        return None
