"""Numbers from a manifest prep may not have written, shown to people: a bad value is "?"."""

from __future__ import annotations

import math


def number(value: object, low: float = -math.inf) -> float | None:
    """`value` where it is a finite real number of at least `low`, else None: a manifest prep
    did not write may say `"rate": "fast"`, NaN or true, and `prep info` shows it as "?".

    >>> number(16000), number("fast"), number(float("nan")), number(True), number(0, low=1)
    (16000.0, None, None, None, None)
    """
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except OverflowError:  # an int of hundreds of digits
        return None
    return x if math.isfinite(x) and x >= low else None


def shown(value: object, spec: str, low: float = -math.inf) -> str:
    """`value` formatted by `spec` where it is a number (see `number`), else "?".

    >>> shown(960, ",.0f"), shown("x", ",.0f")
    ('960', '?')
    """
    x = number(value, low)
    return "?" if x is None else format(x, spec)
