"""Boxes and keypoints moved with their pixels by the geometric ops, with torchvision.transforms
v2's rules (docs/loading.md, "Augmentation on the batch"). They travel padded, (B, N, ...) with
`valid` (B, N), and go back in the caller's form, less the boxes `sanitize` drops.

>>> boxes = torch.tensor([[[10.0, 0, 30, 8]], [[0, 0, 5, 5]]])
>>> t = Targets.of(2, boxes, None, torch.tensor([1, 1]))
>>> t = t.flipped(torch.tensor([True, False]), 40, 0).moved(0, 0, 1.0, 0.5, (8, 20))
>>> sanitize(t, (8, 20), 1.0).boxes.tolist()
[[[5.0, 0.0, 15.0, 8.0]], [[0.0, 0.0, 2.5, 5.0]]]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

Ragged = Any  # list[Tensor] | a jagged nested tensor | a padded (B, N, ...) tensor
Number = float | torch.Tensor  # one value for the batch, or (B,)


@dataclass
class Targets:
    """The instances of a batch, padded (see the module's docstring)."""

    boxes: torch.Tensor | None  # (B, N, 4) float64
    points: torch.Tensor | None  # (B, N, K, 3) float64
    valid: torch.Tensor  # (B, N) bool
    rows: torch.Tensor  # (B,) int64: the instances given a sample

    @staticmethod
    def of(batch: int, boxes: Ragged, keypoints: Ragged, lengths: torch.Tensor | None) -> Targets:
        """The caller's boxes and keypoints (each a list, nested or padded tensor, or None)."""
        b, nb = padded(boxes, lengths, batch, "boxes", (4,))
        p, np_ = padded(keypoints, lengths, batch, "keypoints", None)
        b, p = (None if v is None else v.to(torch.float64) for v in (b, p))
        if b is not None and p is not None and not torch.equal(nb, np_):
            raise ValueError(
                f"boxes count {nb.tolist()} and keypoints {np_.tolist()} instances a sample: "
                "keypoints are per box (N, K, 3)"
            )
        if p is not None and (p.dim() != 4 or p.shape[-1] != 3):
            raise ValueError(f"keypoints {tuple(p.shape)} are not (B, N, K, 3): x, y, visibility")
        counts = nb if b is not None else np_
        n = (b if b is not None else p).shape[1]  # type: ignore[union-attr]
        valid = torch.arange(n, device=counts.device) < counts[:, None]
        p = None if p is None else _cut(_width(p.to(valid.device), n), valid[..., None])
        return Targets(b, p, valid, counts)

    def to(self, device: torch.device) -> Targets:
        b, p = (None if v is None else v.to(device) for v in (self.boxes, self.points))
        return Targets(b, p, self.valid.to(device), self.rows.to(device))

    def moved(
        self, top: Number, left: Number, sy: Number, sx: Number, out_hw: tuple[int, int]
    ) -> Targets:
        """Into the crop at (top, left), scaled by (sy, sx), of an output image of out_hw."""
        t, le, y, x = (  # (B, 1) or (1, 1): to broadcast over N
            torch.as_tensor(v, dtype=torch.float64, device=self.valid.device).reshape(-1, 1)
            for v in (top, left, sy, sx)
        )
        H, W = out_hw
        boxes = points = None
        if self.boxes is not None:
            b = self.boxes
            xs = ((b[..., 0::2] - le[..., None]) * x[..., None]).clamp(0, W)
            ys = ((b[..., 1::2] - t[..., None]) * y[..., None]).clamp(0, H)
            boxes = torch.stack([xs[..., 0], ys[..., 0], xs[..., 1], ys[..., 1]], -1)
        if self.points is not None:
            p = self.points
            px = (p[..., 0] - le[..., None]) * x[..., None]
            py = (p[..., 1] - t[..., None]) * y[..., None]
            inside = (p[..., 2] > 0) & (px >= 0) & (py >= 0) & (px <= W) & (py <= H)
            points = _cut(torch.stack([px, py, p[..., 2]], -1), inside)
        return replace(self, boxes=boxes, points=points)

    def flipped(self, flip: torch.Tensor, side: int, axis: int) -> Targets:
        """Mirrored along `axis` (0: x, 1: y) of an image `side` px long where flip (bool (B,))."""
        f = flip.to(self.valid.device).reshape(-1, 1)
        boxes = points = None
        if self.boxes is not None:
            b = self.boxes
            mirrored = b.clone()
            mirrored[..., axis], mirrored[..., axis + 2] = (
                side - b[..., axis + 2],
                side - b[..., axis],
            )
            boxes = torch.where(f[..., None], mirrored, b)
        if self.points is not None:
            p = self.points
            mirrored = p.clone()
            mirrored[..., axis] = side - p[..., axis]
            points = _cut(torch.where(f[..., None, None], mirrored, p), p[..., 2] > 0)
        return replace(self, boxes=boxes, points=points)


def _cut(points: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Points (B, N, K, 3) with those not `keep` (B, N, K) set to (0, 0, 0)."""
    return torch.where(keep[..., None], points, torch.zeros((), dtype=points.dtype))


def sanitize(t: Targets, hw: tuple[int, int], min_size: float) -> Targets:
    """SanitizeBoundingBoxes(min_size) on boxes clipped to hw, NaN included: `valid` loses them."""
    if t.boxes is None:
        return t
    H, W = hw
    hi = torch.tensor([W, H, W, H], dtype=t.boxes.dtype, device=t.boxes.device)
    b = torch.minimum(t.boxes.clamp_min(0), hi)
    big = (b[..., 2] - b[..., 0] >= min_size) & (b[..., 3] - b[..., 1] >= min_size)
    return replace(t, boxes=b, valid=t.valid & big)


def padded(
    x: Ragged, lengths: torch.Tensor | None, batch: int, name: str, row: tuple[int, ...] | None
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """x as (B, N, *row), in its dtype, and its rows a sample (B,) int64; row None: any shape."""
    if x is None:
        return None, torch.zeros(0, dtype=torch.int64)
    if isinstance(x, (list, tuple)):
        if len(x) != batch:
            raise ValueError(f"{name}: {len(x)} tensors for a batch of {batch}")
        if batch == 0:
            return torch.zeros(0, 0, *(row or ())), torch.zeros(0, dtype=torch.int64)
        rows = [torch.as_tensor(v) for v in x]
        shapes = {tuple(r.shape[1:]) for r in rows}
        if len(shapes) > 1 or rows[0].dim() < 1:
            raise ValueError(f"{name}: samples of rows {sorted(shapes)}: one row shape for all")
        _shape(rows[0].shape[1:], row, name)
        sizes = [r.shape[0] for r in rows]  # not len(): torch's __len__ is a Python call
        counts = torch.tensor(sizes, dtype=torch.int64, device=rows[0].device)
        return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True), counts
    elif isinstance(x, torch.Tensor) and x.is_nested:
        values, counts = x.values(), x.offsets().diff().to(torch.int64)  # type: ignore[attr-defined]
        if len(counts) != batch:
            raise ValueError(f"{name}: {len(counts)} samples for a batch of {batch}")
    elif isinstance(x, torch.Tensor):
        if lengths is None or lengths.shape != (batch,) or x.dim() < 2 or len(x) != batch:
            raise ValueError(
                f"{name} {tuple(x.shape)}: a padded (B, N, ...) batch needs lengths= (B,), the "
                f"rows of each sample (the dataset's {name}_len)"
            )
        _shape(x.shape[2:], row, name)
        return x, lengths.to(device=x.device, dtype=torch.int64)
    else:
        raise TypeError(f"{name}: a list of tensors, a nested or a padded tensor, not {type(x)}")
    _shape(values.shape[1:], row, name)
    return scatter(values, counts), counts


def _shape(got: tuple[int, ...] | torch.Size, row: tuple[int, ...] | None, name: str) -> None:
    if row is not None and tuple(got) != row:
        raise ValueError(f"{name}: rows of shape {tuple(got)}, not {row}")


def scatter(values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Rows `values` (M, ...) of samples with `counts` (B,) rows each, padded: (B, N, ...).

    >>> scatter(torch.tensor([1, 2, 3]), torch.tensor([2, 0, 1])).tolist()
    [[1, 2], [0, 0], [3, 0]]
    """
    B, n = len(counts), int(counts.max()) if len(counts) else 0
    out = values.new_zeros((B, n, *values.shape[1:]))
    sample = torch.repeat_interleave(torch.arange(B, device=values.device), counts)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(len(values), device=values.device) - starts[sample]
    out[sample, pos] = values
    return out


def back(x: torch.Tensor, like: Ragged, valid: torch.Tensor) -> Ragged:
    """x (B, N, ...)'s rows `valid` (B, N), in the form and dtype of the caller's `like`."""
    dtype = like.dtype if isinstance(like, torch.Tensor) else like[0].dtype if like else x.dtype
    x, counts = x[:, : valid.shape[1]].to(dtype), valid.sum(1)
    if isinstance(like, (list, tuple)):
        return list(torch.split(x[valid], counts.tolist()))  # one gather, then views
    if like.is_nested:
        offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        return torch.nested.nested_tensor_from_jagged(x[valid], offsets)
    # The kept rows first, in order (a stable sort of each sample's flags), the rest zeroed.
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    wide = [len(x), x.shape[1], *([1] * (x.dim() - 2))]
    x = x.gather(1, order.view(wide).expand_as(x))
    kept = torch.arange(x.shape[1], device=x.device) < counts[:, None]
    n = int(counts.max()) if len(counts) else 0
    return torch.where(kept.view(wide), x, torch.zeros((), dtype=x.dtype))[:, :n]


def outputs(
    t: Targets,
    hw: tuple[int, int],
    min_size: float,
    given: dict[str, Ragged],
    lengths: torch.Tensor | None,
    instances: torch.Tensor | None,
) -> list[Any]:
    """What a pipeline returns of its instances (masks (B, H, W, N)), sanitized, as Compose."""
    t = sanitize(t, hw, min_size)
    valid, out = t.valid, []
    stack = None if instances is None else instances.permute(0, 3, 1, 2)
    for name, x in (("boxes", t.boxes), ("keypoints", t.points), ("instances", stack)):
        if given.get(name) is not None:
            out.append(back(x, given[name], valid))  # type: ignore[arg-type]
    if lengths is not None:
        out.append(valid.sum(1))
    fields = given.get("per_box")
    if fields is not None:
        rows = {k: per_box(v, lengths, t, f"per_box[{k!r}]") for k, v in fields.items()}
        out.append({k: back(rows[k], v, valid) for k, v in fields.items()})
    return out


def per_box(x: Ragged, lengths: torch.Tensor | None, t: Targets, name: str) -> torch.Tensor:
    """A per-box field (labels, areas...) padded like the boxes (B, N, ...), in its dtype."""
    p, counts = padded(x, lengths, len(t.rows), name, None)
    assert p is not None
    p, counts = p.to(t.valid.device), counts.to(t.valid.device)
    if not torch.equal(counts, t.rows):
        raise ValueError(
            f"{name} has {counts.tolist()} rows a sample, the boxes "
            f"{t.rows.tolist()}: a per-box field has a row per box"
        )
    return _width(p, t.valid.shape[1])


def _width(p: torch.Tensor, n: int) -> torch.Tensor:
    """Padded rows p (B, M, ...) as (B, n, ...): forms padded apart, to other lengths, agree."""
    if p.shape[1] < n:
        p = torch.cat([p, p.new_zeros((len(p), n - p.shape[1], *p.shape[2:]))], 1)
    return p[:, :n]
