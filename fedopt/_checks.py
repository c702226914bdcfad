"""Checks of scalar arguments, shared by every layer: each error names the argument and the values
it takes, whatever the wrong value is (a list, a string, NaN), where ``float()`` or ``int()``
would raise an error that names no argument."""

from __future__ import annotations

import math
import numbers

import numpy as np


def real(name: str, value, low: float = 0.0, *, strict: bool = False, below: float = math.inf,
         hint: str = "") -> float:
    """``value`` as a finite float ``>= low`` (``> low`` when ``strict``) and ``< below``; ``hint`` ends the error."""
    try:
        number = math.nan if isinstance(value, bool) else float(value)  # True is a flag, not the number 1
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and (number > low if strict else number >= low) and number < below):
        if below < math.inf:
            interval = f"in {'(' if strict else '['}{low:g}, {below:g})"
        else:
            interval = f"a finite number {'>' if strict else '>='} {low:g}"
        raise ValueError(f"{name} must be {interval}, got {value!r}{hint}")
    return number


def count(name: str, value, minimum: int = 1, *, none: str = "", hint: str = "") -> int | None:
    """``value`` as an integer ``>= minimum``; None passes when ``none`` says what it means."""
    if value is None and none:
        return None
    whole = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
             and int(value) == value)
    if not (whole and value >= minimum):
        allowed = f", or None {none}" if none else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{allowed}, got {value!r}{hint}")
    return int(value)


def float_dtype(value, name: str = "dtype") -> np.dtype:
    """``value`` as float64 or float32, the two precisions of the kernels (not None, not another dtype)."""
    try:
        dtype = None if value is None else np.dtype(value)
    except (TypeError, ValueError):  # not a dtype at all
        dtype = None
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"{name} must be 'float64' or 'float32', got {value!r}")
    return dtype
