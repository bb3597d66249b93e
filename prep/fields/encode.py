"""One input -> one sample: the user's function, then each declared field's encoder. What does
not fit is a Reject naming the field; the function's own failure names its exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Boxes, Field, Image, Instances, Keypoints, Mask
from loaders.fields.base import FieldError
from prep.media.image.stats import PixelSums
from prep.run.errors import Reject as UserReject
from prep.run.inputs import Reject

PLACED = (Mask, Boxes, Instances, Keypoints)  # the fields bound to an image field, placed like it


def encode_sample(
    value: Any,
    make: Callable[[Any], Any],
    fields: dict[str, Field],
    base: Path | None,
    sums: dict[str, PixelSums] | None = None,
) -> dict[str, np.ndarray] | None:
    """The arrays of one sample (array name -> its stored value), or None (skipped). `sums`
    counts the stored pixels of each image field (by name) of a sample that is not rejected."""
    sample = _call(make, value)
    if sample is None:
        return None
    if not isinstance(sample, dict):
        raise Reject(
            "not_a_sample", f"{_name(make)} returned a {type(sample).__name__}, not a dict"
        )
    missing = [n for n in fields if n not in sample]
    extra = [str(n) for n in sample if n not in fields]
    if missing or extra:
        what = f"field {missing[0]} is missing" if missing else f"field {extra[0]} is not declared"
        raise Reject(
            "field_missing" if missing else "field_extra", f"{what} (declared: {list(fields)})"
        )
    out: dict[str, np.ndarray] = {}
    uprights: dict[str, tuple[int, int]] = {}
    pixels: dict[str, dict[int, np.ndarray]] = {}
    for name, field in fields.items():  # images before their masks: see ordered()
        v = sample[name]
        if isinstance(field, (Image, Mask)) and isinstance(v, (str, Path)) and base is not None:
            v = base / v  # an absolute path stays as it is
        try:
            got = _encode_field(field, v, uprights, pixels if sums is not None else None, name)
        except FieldError as e:
            raise Reject(e.code, f"field {name}: {e}") from None
        except Reject as r:
            raise Reject(r.code, f"field {name}: {r.message}") from None
        upright = got.pop("upright", None)
        if upright is not None:
            uprights[name] = (int(upright[0]), int(upright[1]))
        out |= {name + suffix: arr for suffix, arr in got.items()}
    if sums is not None:  # the sample is whole: its pixels count
        for name, at in pixels.items():
            sums.setdefault(name, PixelSums()).add(at)
    return out


def _encode_field(
    field: Field,
    value: Any,
    uprights: dict[str, tuple[int, int]],
    pixels: dict[str, dict[int, np.ndarray]] | None,
    name: str,
) -> dict[str, np.ndarray]:
    """One field's arrays (by suffix); an image's stored pixels go in `pixels[name]`."""
    if isinstance(field, PLACED):  # placed like their image
        return field.encode_for(value, uprights[field.image])  # type: ignore[union-attr]
    encode_pixels = getattr(field, "encode_pixels", None)
    if pixels is not None and encode_pixels is not None:
        got, pixels[name] = encode_pixels(value)
        return dict(got)
    return field.encode(value)


def _call(make: Callable[[Any], Any], value: Any) -> Any:
    try:
        return make(value)
    except UserReject as r:
        raise Reject(r.code, str(r)) from None
    except Exception as e:  # the user's code: any failure is this input's reject
        raise Reject("function_error", f"{_name(make)} raised {type(e).__name__}: {e}") from None


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__qualname__', type(fn).__name__)}()"


def ordered(fields: dict[str, Field]) -> dict[str, Field]:
    """Images first, so that each mask's (and boxes') image is encoded before it."""
    return dict(sorted(fields.items(), key=lambda kv: isinstance(kv[1], PLACED)))
