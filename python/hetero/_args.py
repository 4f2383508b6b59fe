"""Argument checks at the binding's boundary: a wrong type is a TypeError and a bad value an
InvalidArgument (a ValueError), each naming the parameter, before anything reaches the C ABI (which would
otherwise see "123" for 123, or a negative timeout as an immediate one)."""

import math
import numbers
import os

from ._errors import invalid


def _type_name(value):
    return type(value).__name__


def text(value, name, optional=False):
    """A str (None too when `optional`), as UTF-8 bytes."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        wanted = "a str or None" if optional else "a str"
        raise TypeError(f"{name} must be {wanted}, not {_type_name(value)}")
    return value.encode()


def path(value, name):
    """None, a str or an os.PathLike, as UTF-8 bytes."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, bytes or os.PathLike, not {_type_name(value)}")
    return value.encode()


def integer(value, name, minimum=None, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {_type_name(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise invalid(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise invalid(f"{name} must be <= {maximum}, got {value}")
    return value


def real(value, name, minimum=None, above=None, maximum=None):
    """A finite int or float; `minimum` inclusive, `above` exclusive."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {_type_name(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise invalid(f"{name} must be finite, got {value}")
    if minimum is not None and value < minimum:
        raise invalid(f"{name} must be >= {minimum}, got {value}")
    if above is not None and value <= above:
        raise invalid(f"{name} must be > {above}, got {value}")
    if maximum is not None and value > maximum:
        raise invalid(f"{name} must be <= {maximum}, got {value}")
    return value


def flag(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {_type_name(value)}")
    return value


def callback(value, name):
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, not {_type_name(value)}")
    return value


def sequence(value, name):
    """A list or tuple (not a str, bytes or dict, which iterate as something else)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple, not {_type_name(value)}")
    return value
