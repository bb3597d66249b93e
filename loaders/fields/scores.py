"""Per-sample quality scores (`prep pack`'s `quality` field, issue 39): one float32 in [0, 1] per
issue, low is bad, the issue flagged where the score is under its threshold (CleanVision's
convention). The shape issues (odd_size, odd_aspect) are scored against the dataset's own
sizes (`orig_size`), whose quartiles the manifest keeps in `extra.quality.shape`.

>>> s = Scores(("blur", "dark"), (0.29, 0.32))
>>> s.flags(np.array([[0.1, 0.9], [0.5, 0.2]], np.float32)).tolist()
[[True, False], [False, True]]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, FieldError, Reading, as_array, spec, tensor
from loaders.format.spec import ArraySpec, FormatError

SHAPE_ISSUES = ("odd_size", "odd_aspect")
SIZE_FENCE = 3.0  # CleanVision's odd_size iqr_factor: beyond 3 IQRs of the quartiles
MIN_IQR = math.log(2) / SIZE_FENCE  # log units: a dataset of one size flags only 2x and more
# exp(-distance / IQR) under exp(-3): beyond the fence; the aspect relative to the median
# aspect under CleanVision's 0.35 (theirs: to a square).
SHAPE_THRESHOLDS = (math.exp(-SIZE_FENCE), 0.35)
SHAPE_KEYS = ("size_q1", "size_q3", "aspect_median")
OUTLIER_FRACTION = 0.01  # the share flagged as outliers, by default (fastdup's top 1%)
NEIGHBOURS = 5  # the score is the mean distance to this many nearest samples
REFERENCES = 4096  # a larger dataset's neighbours are sought among this many, seeded


@dataclass(frozen=True)
class Scores(Field):
    names: tuple[str, ...] = ()
    thresholds: tuple[float, ...] = ()
    kind = "scores"

    def __post_init__(self) -> None:
        names, th = self.names, self.thresholds
        if not (isinstance(names, tuple) and all(isinstance(n, str) for n in names)):
            raise ValueError(f"names {str(names)[:40]} is not a list of issue names")
        if len(set(names)) != len(names) or not isinstance(th, tuple) or len(th) != len(names):
            raise ValueError(f"names {str(names)[:40]}: distinct, one threshold each")
        if not all(isinstance(t, int | float) and 0 <= t <= 1 for t in th):
            raise ValueError(f"thresholds {str(th)[:40]} are not numbers in [0, 1]")

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "scores", "float32", (len(self.names),))]

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        arr = as_array(value, np.dtype("float32"))
        if arr.shape != (len(self.names),):
            raise FieldError(
                "field_shape", f"scores of shape {list(arr.shape)}, not [{len(self.names)}]"
            )
        if not ((arr >= 0) & (arr <= 1)).all():  # NaN compares False
            raise FieldError("field_nan", f"scores {arr.tolist()} are not all in [0, 1]")
        return {"": arr}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: tensor(batch.values(name))}

    def flags(self, values: np.ndarray) -> np.ndarray:
        """bool (N, K): each sample's issues, from its (N, K) scores."""
        return values < np.asarray(self.thresholds, np.float32)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        v = np.asarray(arrays[name]).reshape(-1, len(self.names))
        bad = np.argwhere(~((v >= 0) & (v <= 1)))
        if not len(bad):
            return []
        k, j = bad[0].tolist()
        return [
            f"{name}: sample {k}'s {self.names[j]} score {v[k, j]} is not in [0, 1] "
            f"({len(bad)} such)"
        ]

    def check_extra(self, name: str, extra: Mapping[str, Any], count: int) -> None:
        quality = extra.get("quality")
        if quality is None:
            return
        shape = quality.get("shape") if isinstance(quality, dict) else None
        counts = quality.get("issues") if isinstance(quality, dict) else None
        ok = isinstance(shape, dict) and all(
            isinstance(shape.get(k), int | float) and math.isfinite(shape[k]) for k in SHAPE_KEYS
        )
        ok &= isinstance(counts, dict) and all(
            isinstance(k, str) and type(v) is int for k, v in counts.items()
        )
        if not ok:
            raise FormatError(
                f"extra.quality {str(quality)[:60]} is not {{issues: counts, shape: "
                f"{list(SHAPE_KEYS)}}}. HINT: repack the dataset"
            )

    def lines(self, name: str, m: Any) -> list[str]:
        """The count of each issue the manifest keeps (checked by check_extra)."""
        counts = m.extra.get("quality", {}).get("issues", {})
        shown = ", ".join(f"{k[:20]} {v:,}" for k, v in counts.items()) or "not counted"
        return [f"{name}: issues flagged: {shown} (prep issues lists them)"]


def shape_reference(hw: np.ndarray) -> dict[str, float]:
    """`extra.quality.shape` of (N, 2) upright sizes (h, w): the quartiles of the log of each
    image's side sqrt(h * w), and the median log aspect log(w / h)."""
    hw = np.asarray(hw, np.float64).reshape(-1, 2)
    if not len(hw):
        return dict.fromkeys(SHAPE_KEYS, 0.0)
    size = 0.5 * np.log(np.maximum(hw[:, 0] * hw[:, 1], 1))
    aspect = np.log(np.maximum(hw[:, 1], 1) / np.maximum(hw[:, 0], 1))
    q1, q3 = quantiles(size, [0.25, 0.75])
    return {"size_q1": q1, "size_q3": q3, "aspect_median": quantiles(aspect, [0.5])[0]}


def quantiles(x: np.ndarray, qs: list[float]) -> list[float]:
    """np.quantile's (linear) of 1-D `x`, without np.quantile's and np.median's import of
    numpy.ma (12 ms of every pack)."""
    return np.interp(np.asarray(qs) * (len(x) - 1), np.arange(len(x)), np.sort(x)).tolist()


def shape_scores(hw: np.ndarray, ref: Mapping[str, float]) -> np.ndarray:
    """float32 (N, 2) odd_size and odd_aspect scores of (N, 2) sizes against `ref`
    (shape_reference): exp(-distance beyond the quartiles / IQR), and min(r, 1 / r) of the aspect
    r relative to the median aspect."""
    hw = np.asarray(hw, np.float64).reshape(-1, 2)
    size = 0.5 * np.log(np.maximum(hw[:, 0] * hw[:, 1], 1))
    q1, q3 = ref["size_q1"], ref["size_q3"]
    iqr = max(q3 - q1, MIN_IQR)
    beyond = np.maximum(0, np.maximum(size - q3, q1 - size))
    aspect = np.log(np.maximum(hw[:, 1], 1) / np.maximum(hw[:, 0], 1)) - ref["aspect_median"]
    return np.stack([np.exp(-beyond / iqr), np.exp(-np.abs(aspect))], axis=1).astype(np.float32)


def issue_table(
    field: Scores,
    values: np.ndarray,
    hw: np.ndarray | None,
    ref: Mapping[str, float] | None,
    outliers: np.ndarray | None = None,
    fraction: float = OUTLIER_FRACTION,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every issue's name, the (N, K) scores and bool (N, K) flags: the stored scores, the
    shape issues where the sizes and their reference are known, and "outlier" where its
    scores (outlier_scores) are: the top `fraction`."""
    names, scores = list(field.names), np.asarray(values, np.float32).reshape(-1, len(field.names))
    flags = field.flags(scores)
    more: list[tuple[str, np.ndarray, float]] = []
    if hw is not None and ref is not None:
        shape = shape_scores(hw, ref)
        more += [(n, shape[:, j], SHAPE_THRESHOLDS[j]) for j, n in enumerate(SHAPE_ISSUES)]
    if outliers is not None:
        more.append(("outlier", outliers, fraction))
    for name, got, threshold in more:
        names.append(name)
        scores = np.concatenate([scores, got.reshape(-1, 1)], axis=1)
        flags = np.concatenate([flags, got.reshape(-1, 1) < threshold], axis=1)
    return names, scores, flags


def parse_kinds(text: str, have: list[str]) -> list[str]:
    """--kind "blur,dark" -> ["blur", "dark"], each of `have` ("all": all); else ValueError."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if kinds == ["all"]:
        return list(have)
    odd = [k for k in kinds if k not in have]
    if odd or not kinds:
        raise ValueError(f"issue {odd[0] if odd else text!r} is not one of {have} (or all)")
    return kinds


def excluded_by(
    fields: Mapping[str, Field], extra: Mapping[str, Any], values: Any, text: str
) -> np.ndarray:
    """bool (N,): the samples `exclude="issues:blur,dark"` names, `values(array)` reading an
    array's (N, ...) values; ValueError naming the fix if the dataset has no such scores."""
    kinds = text.removeprefix("issues:")
    name = next((n for n, f in fields.items() if isinstance(f, Scores)), None)
    if name is None:
        raise ValueError(
            f"exclude={text!r}: the dataset has no quality scores. HINT: pack it with prep pack "
            "(without --no-quality), or pass exclude= a file of indices"
        )
    field = fields[name]
    assert isinstance(field, Scores)
    ref = extra.get("quality", {}).get("shape")
    hw = values("orig_size") if "orig_size" in fields and ref is not None else None
    outliers = None
    if "outlier" in kinds and "phash" in fields and "colour" in fields:  # only when asked: kNN
        outliers = outlier_scores(embedding(values("phash"), values("colour")))
    names, _, flags = issue_table(field, values(name), hw, ref, outliers)
    chosen = [names.index(k) for k in parse_kinds(kinds, names)]
    return np.asarray(flags[:, chosen].any(axis=1))


def read_indices(path: str) -> np.ndarray:
    """int64 indices from a .npy file, or a text file of one a line (prep issues --indices)."""
    if path.endswith(".npy"):
        got = np.load(path, allow_pickle=False)
    else:
        with open(path, encoding="utf-8") as f:
            got = np.array([int(line) for line in f if line.strip()], np.int64)
    if got.ndim != 1 or got.dtype.kind not in "iu":
        raise ValueError(f"{path}: not a list of sample indices (one a line, or a 1-D .npy)")
    return got.astype(np.int64)


def embedding(phash: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """float32 (N, 70): the 64 pHash bits, and the 6 colour statistics (RGB means and standard
    deviations) as z-scores weighted to spread as much in all as the bits do (16 = 64 / 4)."""
    bits = np.unpackbits(np.asarray(phash, ">u8").view(np.uint8).reshape(-1, 8), axis=1)
    c = np.asarray(colour, np.float32).reshape(-1, 6)
    z = (c - c.mean(axis=0)) / np.maximum(c.std(axis=0), 1e-3)
    return np.concatenate([bits.astype(np.float32), z * np.float32((16 / 6) ** 0.5)], axis=1)


def outlier_scores(emb: np.ndarray, seed: int = 0) -> np.ndarray:
    """float32 (N,) in [0, 1): the rank (over N) of each sample's mean distance to its
    NEIGHBOURS nearest others (among REFERENCES at most, seeded), the most isolated 0: a
    score under a fraction f flags the top f of the samples."""
    n = len(emb)
    if n <= NEIGHBOURS + 1:
        return np.ones(n, np.float32)
    pick = np.random.default_rng(seed).permutation(n)[:REFERENCES] if n > REFERENCES else None
    ref = emb if pick is None else emb[pick]
    at = np.full(n, -1)  # each sample's row among the references, if it is one
    at[np.arange(n) if pick is None else pick] = np.arange(len(ref))
    sq = (ref * ref).sum(axis=1)
    mean_d = np.empty(n, np.float32)
    for a in range(0, n, 2048):
        x = emb[a : a + 2048]
        d = (x * x).sum(axis=1)[:, None] + sq[None, :] - 2 * x @ ref.T
        own = np.flatnonzero(at[a : a + len(x)] >= 0)
        d[own, at[a + own]] = np.inf  # not its own neighbour
        near = np.partition(d, NEIGHBOURS - 1, axis=1)[:, :NEIGHBOURS]
        mean_d[a : a + len(x)] = np.sqrt(np.maximum(near, 0)).mean(axis=1)
    rank = np.empty(n, np.int64)
    rank[np.argsort(-mean_d, kind="stable")] = np.arange(n)
    return (rank / n).astype(np.float32)
