"""`prep labels`: likely label errors by confident learning (Northcutt, Jiang, Chuang, "Confident
Learning", JAIR 2021), as cleanlab's `find_label_issues(labels, pred_probs)` with its defaults
(filter_by="prune_by_noise_rate", a calibrated confident joint, at least one sample kept per
class, none flagged whose predicted class is its given one). `pred_probs` are out-of-sample
(cross-validated) class probabilities, one row per sample; read in blocks of rows, so a memory
map of 1M x 1000 never needs a copy.

>>> p = np.array([[.9, .1], [.8, .2], [.7, .3], [.2, .8], [.1, .9], [.95, .05]])
>>> np.flatnonzero(label_issues(np.array([0, 0, 0, 1, 1, 1]), p)).tolist()
[5]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError

BLOCK = 1 << 14  # rows of pred_probs a pass holds at a time (16384 x 1000 float64: 131 MB)


def _blocks(n: int) -> range:
    return range(0, n, BLOCK)


def confident_joint(labels: np.ndarray, probs: np.ndarray, k: int) -> np.ndarray:
    """(K, K) counts: [given label][true label guessed by the per-class thresholds], calibrated
    so that each row sums to its label's count (cleanlab's compute_confident_joint)."""
    n = len(labels)
    own = np.zeros(n)  # each sample's probability of its given label
    for a in _blocks(n):
        p = np.asarray(probs[a : a + BLOCK])
        own[a : a + len(p)] = p[np.arange(len(p)), labels[a : a + BLOCK]]
    counts = np.bincount(labels, minlength=k)
    thresholds = np.bincount(labels, weights=own, minlength=k) / np.maximum(counts, 1)
    # cleanlab's: a class no sample is labelled with is never confident; the floor is 2e-6
    thresholds = np.where(counts > 0, np.maximum(thresholds, 2e-6), 2.0)
    thresholds = at_least(thresholds - 1e-6, probs.dtype)
    count = np.uint16 if k < 1 << 16 else np.uint32  # per-row counts of confident classes
    flat = np.zeros(k * k, np.int64)
    for a in _blocks(n):
        p = np.asarray(probs[a : a + BLOCK])
        confident = p >= thresholds
        many = confident.view(np.uint8).sum(axis=1, dtype=count)  # 3x count_nonzero's speed
        guess = np.where(many > 1, p.argmax(axis=1), confident.argmax(axis=1))
        some = many > 0
        flat += np.bincount(labels[a : a + BLOCK][some] * k + guess[some], minlength=k * k)
    cj = flat.reshape(k, k)
    np.fill_diagonal(cj, np.maximum(cj.diagonal(), 1))  # every class one sample its own
    calibrated = cj / np.maximum(cj.sum(axis=1, keepdims=True), 1) * counts[:, None]
    calibrated = calibrated / max(calibrated.sum(), 1e-6) * counts.sum()
    return round_rows(calibrated)


def at_least(t: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """The least values of `dtype` >= `t` (float64): `p >= at_least(t)` in p's own dtype is
    `p >= t` compared in float64 (cleanlab's), without a float64 copy of each block."""
    if not np.issubdtype(dtype, np.floating) or np.dtype(dtype).itemsize >= 8:
        return t
    low = t.astype(dtype)
    return np.where(low < t, np.nextafter(low, np.asarray(np.inf, dtype)), low)


def round_rows(m: np.ndarray) -> np.ndarray:
    """Each row rounded to integers summing to its total, rounded (cleanlab's
    round_preserving_row_totals: up the largest residues first, down the smallest)."""
    out = np.round(m)
    for i in range(len(m)):
        want, got = np.round(m[i].sum()), out[i].sum()
        while abs(got - want) > 1e-6:
            step = -1 if want - got < 0 else 1
            changes = min(int(abs(np.round(want - got))), len(m[i]))
            order = np.argsort(m[i] - out[i])[::-step][:changes]
            out[i, order] += step
            got = out[i].sum()
    return out.astype(np.int64)


def prune_counts(cj: np.ndarray, keep: int = 1) -> np.ndarray:
    """How many of each (given, true) cell to flag: the joint with at least `keep` samples left
    per given label, the others lowered evenly (cleanlab's _keep_at_least_n_per_class)."""
    m = cj.T.astype(np.float64)  # [true][given]
    diag = m.diagonal().copy()
    raised = np.maximum(diag, keep)
    per_col = np.maximum(np.count_nonzero(m, axis=0) - 1.0, 1.0)
    m = m - (raised - diag) / per_col
    m[m < 0] = 0
    np.fill_diagonal(m, raised)
    return round_rows(m).T  # [given][true]


def label_issues(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """bool (N,): the samples whose given label confident learning flags."""
    labels = np.asarray(labels, np.int64)
    n, k = probs.shape
    counts = np.bincount(labels, minlength=k)
    prune = prune_counts(confident_joint(labels, probs, k))
    flagged = np.zeros(n, bool)
    by_label = np.argsort(labels, kind="stable")  # each class's samples: one sort, not K scans
    starts = np.concatenate([[0], np.cumsum(counts)])
    off = prune.copy()
    np.fill_diagonal(off, 0)
    for given in np.flatnonzero((counts > 1) & (off.sum(axis=1) > 0)):  # a class of one: kept
        cells = np.flatnonzero(off[given])
        idx = by_label[starts[given] : starts[given + 1]]
        # Only the columns read: the given class's and the cells' (not whole rows of a memmap)
        p = np.asarray(probs[idx[:, None], np.append(cells, given)[None, :]])
        # The prune[given, true] samples of this label most likely `true` instead: those whose
        # margin reaches the prune-th largest of its column
        margin = p[:, :-1] - p[:, -1:]
        c = np.minimum(prune[given, cells], len(idx))
        cut = -np.sort(-margin, axis=0)[c - 1, np.arange(len(cells))]
        flagged[idx[(margin >= cut).any(axis=1)]] = True
    idx = np.flatnonzero(flagged)  # none whose prediction is its given label (ties: given)
    p = np.array(probs[idx])
    p[np.arange(len(idx)), labels[idx]] += 1e-6  # cleanlab's FLOATING_POINT_COMPARISON
    flagged[idx] = p.argmax(axis=1) != labels[idx]
    return flagged


def read_predictions(path: str, n: int, classes: int) -> np.ndarray:
    """`path`'s (n, K >= classes) probabilities, memory-mapped; ValueError naming the fix."""
    try:
        probs = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a .npy array ({e})") from None
    if probs.ndim != 2 or probs.dtype.kind != "f" or len(probs) != n or probs.shape[1] < classes:
        raise ValueError(
            f"{path}: {probs.dtype} {list(probs.shape)}, not float ({n}, {max(classes, 2)}): one "
            "row of class probabilities per sample, in the dataset's order"
        )
    for a in _blocks(n):
        p = np.asarray(probs[a : a + BLOCK])
        if p.min(initial=0) >= 0 and p.max(initial=1) <= 1:  # NaN compares False: looked at
            continue
        bad = np.flatnonzero(~((p >= 0) & (p <= 1)).all(axis=1))
        if len(bad):
            raise ValueError(f"{path}: row {a + bad[0]} holds {p[bad[0]][:4]}..., not in [0, 1]")
    return probs


def label_records(
    root: str | Path, predictions: str, split: str | None = None
) -> list[dict[str, Any]]:
    """One record a likely label error of the dataset at `root` ({"index", "source", "given",
    "suggested", "p_given", "p_suggested"}), the least likely given label first."""
    from loaders.fields import Label
    from prep.inspect.stored import Stored

    if not (Path(root) / "manifest.json").is_file():
        raise PrepError(f"{root} is not a packed dataset. HINT: pass the OUT of a prep command")
    st = Stored(root, split=split)
    name, given = st.labels()
    field = st.fields.get(name or "")
    if given is None or not isinstance(field, Label):
        raise PrepError(
            f"{root} has no label field (one class a sample). HINT: pass a classification dataset"
        )
    names = list(field.classes) if field.classes else None
    probs = read_predictions(
        predictions, len(given), len(names) if names else int(given.max(initial=0)) + 1
    )
    idx = np.flatnonzero(label_issues(given, probs))
    rows = np.asarray(probs[idx], np.float64)
    top = rows.argmax(axis=1) if len(idx) else np.zeros(0, np.int64)
    p_given = rows[np.arange(len(idx)), given[idx]]
    order = np.argsort(p_given, kind="stable")
    paths = st.sources()

    def named(c: int) -> str | int:
        return names[c] if names and 0 <= c < len(names) else c

    return [
        {
            "index": int(idx[j]),
            "source": paths[idx[j]],
            "given": named(int(given[idx[j]])),
            "suggested": named(int(top[j])),
            "p_given": round(float(p_given[j]), 4),
            "p_suggested": round(float(rows[j, top[j]]), 4),
        }
        for j in order.tolist()
    ]
