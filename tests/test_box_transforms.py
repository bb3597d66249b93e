"""Box-aware transforms: boxes and keypoints move with the pixels, against torchvision's box
math (its rules for crop, pad, resize, flips and SanitizeBoundingBoxes written out here, as
test_transforms writes out its crop draws), the draws are those of a box-less call, every
ragged form comes back as given, and instance masks stay on their pixels (SampleDataset's
transforms=: tests/test_box_dataset.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from loaders import transforms as T

H, W = 60, 80


# -- torchvision.transforms.v2.functional's box rules, for xyxy boxes (N, 4) -----------------


def tv_clamp(b: torch.Tensor, h: float, w: float) -> torch.Tensor:
    b = b.clone()
    b[:, 0::2] = b[:, 0::2].clamp(0, w)
    b[:, 1::2] = b[:, 1::2].clamp(0, h)
    return b


def tv_crop(b: torch.Tensor, top: float, left: float, h: int, w: int) -> torch.Tensor:
    """crop_bounding_boxes: shift by the crop's corner, clamp to the new canvas (a negative
    top or left is pad_bounding_boxes' shift, the same sum)."""
    return tv_clamp(b - torch.tensor([left, top, left, top], dtype=b.dtype), h, w)


def tv_resize(b: torch.Tensor, old: tuple[int, int], new: tuple[int, int]) -> torch.Tensor:
    rh, rw = new[0] / old[0], new[1] / old[1]
    return b * torch.tensor([rw, rh, rw, rh], dtype=b.dtype)


def tv_hflip(b: torch.Tensor, w: int) -> torch.Tensor:
    return torch.stack([w - b[:, 2], b[:, 1], w - b[:, 0], b[:, 3]], 1)


def tv_vflip(b: torch.Tensor, h: int) -> torch.Tensor:
    return torch.stack([b[:, 0], h - b[:, 3], b[:, 2], h - b[:, 1]], 1)


def tv_center_crop_corner(h: int, w: int, ch: int, cw: int) -> tuple[int, int]:
    """center_crop: pad (crop larger than the image) by (c - n) // 2 before, then the corner
    int(round((n - c) / 2.0)) of the padded image: (top, left) in the unpadded one."""
    pt, pl = ((ch - h) // 2 if ch > h else 0), ((cw - w) // 2 if cw > w else 0)
    ph, pw = max(h, ch), max(w, cw)
    return round((ph - ch) / 2.0) - pt, round((pw - cw) / 2.0) - pl


def tv_sanitize(b: torch.Tensor, h: int, w: int, min_size: float = 1.0) -> torch.Tensor:
    """_get_sanitize_bounding_boxes_mask (min_size, min_area 1), on boxes clamped first."""
    b = tv_clamp(b, h, w)
    ws, hs = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    valid = (ws >= min_size) & (hs >= min_size) & (b >= 0).all(1) & (ws * hs >= 1.0)
    valid &= (b[:, 0] <= w) & (b[:, 2] <= w) & (b[:, 1] <= h) & (b[:, 3] <= h)
    return valid


# -- a batch whose crops and flips can be read off its pixels ----------------------------------


def coded(n: int) -> torch.Tensor:
    """Channel 0: the column, 1: the row, 2: 255 (0 is the padding's fill)."""
    x = torch.zeros(n, 3, H, W, dtype=torch.uint8)
    x[:, 0] = torch.arange(W, dtype=torch.uint8)
    x[:, 1] = torch.arange(H, dtype=torch.uint8)[:, None]
    x[:, 2] = 255
    return x


def random_boxes(n: int, seed: int = 0) -> list[torch.Tensor]:
    """0 to 6 boxes a sample: some crossing the edges, some thin (dropped by most crops)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(0, 7, (), generator=g))
        xy = torch.rand(k, 2, generator=g) * torch.tensor([W + 10.0, H + 10.0]) - 5
        wh = torch.rand(k, 2, generator=g) * torch.tensor([W / 2, H / 2]) + 0.2
        out.append(torch.cat([xy, xy + wh], 1).clamp(min=0).float())
    return out


def corner(out: torch.Tensor, b: int) -> tuple[int, int, bool, bool]:
    """(top, left, flipped left-right, flipped top-bottom) of an unresized crop of `coded`: its
    first pixel inside the image is the corner of a rectangle of at least 2 x 2 such pixels."""
    i, j = (int(v) for v in (out[b, 2] == 255).nonzero()[0])
    row, col = int(out[b, 1, i, j]), int(out[b, 0, i, j])
    lr, tb = bool(out[b, 0, i, j + 1] < col), bool(out[b, 1, i + 1, j] < row)
    sh, sw = out.shape[-2:]
    return row - (sh - 1 - i if tb else i), col - (sw - 1 - j if lr else j), lr, tb


def check(got: list[torch.Tensor], ref: list[torch.Tensor], labels: list[torch.Tensor]) -> None:
    for g, r, lab in zip(got, ref, labels, strict=True):
        assert g.shape == r.shape and g.dtype == torch.float32
        assert torch.allclose(g, r, atol=1e-4), (g, r)
        assert len(lab) == len(g)


def labels_of(boxes: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.arange(len(b)) + 10 * i for i, b in enumerate(boxes)]


def test_crop_and_flips_move_boxes_as_torchvision() -> None:
    n, (sh, sw) = 32, (40, 50)
    boxes, index = random_boxes(n), torch.arange(100, 100 + n)
    aug = T.Compose(
        [T.RandomCrop((sh, sw), padding=8), T.RandomHorizontalFlip(), T.RandomVerticalFlip()]
    )
    labels = labels_of(boxes)
    out, got, kept = aug(coded(n), index=index, boxes=boxes, per_box={"labels": labels})
    ref, ref_labels, flips = [], [], set()
    for b in range(n):
        top, left, lr, tb = corner(out, b)
        r = tv_crop(boxes[b].double(), top, left, sh, sw)
        r = tv_hflip(r, sw) if lr else r
        r = tv_vflip(r, sh) if tb else r
        valid = tv_sanitize(r, sh, sw)
        ref.append(r[valid].float())
        ref_labels.append(labels[b][valid])
        flips.add((lr, tb))
    assert len(flips) == 4  # every combination drawn
    check(got, ref, kept["labels"])
    assert all(torch.equal(a, b) for a, b in zip(kept["labels"], ref_labels, strict=True))
    assert sum(map(len, got)) < sum(map(len, boxes))  # some were dropped


def test_resized_crops_move_boxes_as_torchvision() -> None:
    n, size = 32, (24, 36)
    boxes, index = random_boxes(n, seed=1), torch.arange(n)
    op = T.RandomResizedCrop(size, scale=(0.2, 1.0))
    aug = T.Compose([op, T.RandomHorizontalFlip()], seed=5, epoch=2)
    out, got = aug(coded(n), index=index, boxes=boxes)
    crops = op.boxes(index, H, W, seed=5, epoch=2)
    ref = []
    for b in range(n):
        top, left, h, w = (int(v) for v in crops[b])
        r = tv_resize(tv_crop(boxes[b].double(), top, left, h, w), (h, w), size)
        lr = bool(out[b, 0, 0, 0] > out[b, 0, 0, -1])  # the column ramp runs backwards
        r = tv_hflip(r, size[1]) if lr else r
        ref.append(r[tv_sanitize(r, *size)].float())
    check(got, ref, got)


@pytest.mark.parametrize("crop", [(30, 40), (70, 90), (61, 20)])
def test_center_crop_and_resize_move_boxes_as_torchvision(crop: tuple[int, int]) -> None:
    n = 8
    boxes = random_boxes(n, seed=2)
    aug = T.Compose([T.CenterCrop(crop), T.Resize(32)])
    out, got = aug(coded(n), index=torch.arange(n), boxes=boxes)
    top, left = tv_center_crop_corner(H, W, *crop)
    short, long = sorted(crop)
    new = (32, int(32 * long / short)) if crop[0] <= crop[1] else (int(32 * long / short), 32)
    assert tuple(out.shape[-2:]) == new
    ref = []
    for b in range(n):
        r = tv_resize(tv_crop(boxes[b].double(), top, left, *crop), crop, new)
        ref.append(r[tv_sanitize(r, *new)].float())
    check(got, ref, got)
    exact = T.Compose([T.CenterCrop(crop)])(coded(1), index=torch.arange(1))
    assert corner(exact, 0) == (top, left, False, False)


def test_each_crop_clips_as_torchvision_does() -> None:
    """A box cut by a first crop stays cut when a second, padded one brings the edge back."""
    n = 8
    boxes = random_boxes(n, seed=3)
    _, got = T.Compose([T.CenterCrop(30), T.CenterCrop((44, 50))])(
        coded(n), index=torch.arange(n), boxes=boxes
    )
    (t1, l1), (t2, l2) = tv_center_crop_corner(H, W, 30, 30), tv_center_crop_corner(30, 30, 44, 50)
    ref = []
    for b in range(n):
        r = tv_crop(tv_crop(boxes[b].double(), t1, l1, 30, 30), t2, l2, 44, 50)
        ref.append(r[tv_sanitize(r, 44, 50)].float())
    check(got, ref, got)


def test_boxes_change_no_draw_and_no_pixel() -> None:
    n = 16
    images = torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8)
    for ops in (
        [T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3, 0.3)],
        [T.RandomCrop(40, padding=4), T.RandomVerticalFlip(), T.Resize((20, 30))],
    ):
        aug, index = T.Compose(ops, seed=3), torch.arange(50, 50 + n)
        alone = aug(images, index=index)
        x, boxes = aug(images, index=index, boxes=random_boxes(n))
        assert torch.equal(x, alone)
        one_x, one_boxes = aug(images[5:6], index=index[5:6], boxes=random_boxes(n)[5:6])
        assert torch.equal(one_x, x[5:6]) and torch.equal(one_boxes[0], boxes[5])


def test_boxes_stay_on_their_pixels() -> None:
    """White rectangles on black: after crops and flips (no resize), each kept box is exactly
    the white pixels' extent; after a resized crop, within a pixel. Each instance mask (the
    rectangle's) stays the white pixels exactly."""
    n = 24
    images = torch.zeros(n, 3, H, W, dtype=torch.uint8)
    boxes = []
    for b in range(n):
        x0, y0 = 5 + b, 4 + b % 9
        images[b, :, y0 : y0 + 20, x0 : x0 + 30] = 255
        boxes.append(torch.tensor([[x0, y0, x0 + 30, y0 + 20]], dtype=torch.float32))
    for ops, tol in (
        ([T.RandomCrop(44, padding=6), T.RandomHorizontalFlip(), T.RandomVerticalFlip()], 0.0),
        ([T.RandomResizedCrop(48, scale=(0.5, 1)), T.RandomHorizontalFlip()], 1.0),
    ):
        masks = [images[b, :1] // 255 for b in range(n)]  # (1, H, W) a sample
        out, got, inst = T.Compose(ops, seed=1)(
            images, index=torch.arange(n), boxes=boxes, instances=masks
        )
        for b in range(n):
            ys, xs = (out[b, 0] > 127).nonzero(as_tuple=True)
            assert len(inst[b]) == len(got[b]) and inst[b].shape[1:] == out.shape[2:]
            if tol == 0 and len(got[b]):
                assert torch.equal(inst[b][0], (out[b, 0] // 255))
            if len(got[b]):
                white = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
                assert (got[b][0] - white).abs().max() <= tol, (got[b], white)


def test_every_ragged_form_comes_back_as_given() -> None:
    n = 12
    boxes, images, index = random_boxes(n, seed=4), coded(n), torch.arange(n)
    labels = labels_of(boxes)
    aug = T.Compose([T.RandomResizedCrop(32, scale=(0.1, 0.5)), T.RandomHorizontalFlip()])
    _, ref, ref_pb = aug(images, index=index, boxes=boxes, per_box={"labels": labels})
    lengths = torch.tensor([len(b) for b in boxes])
    pad = torch.nn.utils.rnn.pad_sequence(boxes, batch_first=True)
    pad_labels = torch.nn.utils.rnn.pad_sequence(labels, batch_first=True)
    _, got, lens, pb = aug(
        images, index=index, boxes=pad, lengths=lengths, per_box={"labels": pad_labels}
    )
    assert lens.tolist() == [len(r) for r in ref] and got.shape == (n, max(lens), 4)
    for b in range(n):
        assert torch.equal(got[b, : lens[b]], ref[b]) and not got[b, lens[b] :].any()
        assert torch.equal(pb["labels"][b, : lens[b]], ref_pb["labels"][b])
    offsets = torch.tensor([0, *np.cumsum([len(b) for b in boxes])])
    nested = torch.nested.nested_tensor_from_jagged(torch.cat(boxes), offsets)
    _, jag = aug(images, index=index, boxes=nested)
    assert jag.is_nested and torch.equal(jag.values(), torch.cat(ref))


def test_keypoints_move_with_their_boxes_and_cut_ones_are_zero() -> None:
    boxes = [torch.tensor([[10.0, 10, 30, 30], [70, 50, 80, 60]])]
    points = torch.tensor([[[20.0, 15, 2], [5, 5, 1]], [[75, 55, 2], [0, 0, 0]]])
    aug = T.Compose([T.CenterCrop((40, 60)), T.RandomHorizontalFlip(1.0)])
    _, got, kp = aug(coded(1), index=torch.arange(1), boxes=boxes, keypoints=[points])
    # crop at (10, 10): the first box (0, 0, 20, 20) flipped in 60 px; the second box dropped.
    assert got[0].tolist() == [[40.0, 0.0, 60.0, 20.0]]
    assert kp[0].tolist() == [[[50.0, 5.0, 2.0], [0.0, 0.0, 0.0]]]
    wide = torch.zeros(1, 4, 4)  # padded further than its lengths, keypoints as a list
    wide[0, :2] = boxes[0]
    _, got2, kp2, n = aug(
        coded(1), index=torch.arange(1), boxes=wide, keypoints=[points], lengths=torch.tensor([2])
    )
    assert (
        n.tolist() == [1] and torch.equal(got2[:, :1], got[0][None]) and torch.equal(kp2[0], kp[0])
    )


def test_bad_calls_say_what_is_expected() -> None:
    x, index = coded(2), torch.arange(2)
    aug = T.Compose([T.RandomHorizontalFlip()])
    with pytest.raises(ValueError, match="lengths="):
        aug(x, index=index, boxes=torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="a row per box"):
        aug(x, index=index, boxes=[torch.zeros(1, 4)] * 2, per_box={"labels": [torch.zeros(2)] * 2})
    with pytest.raises(ValueError, match="not \\(4,\\)"):
        aug(x, index=index, boxes=[torch.zeros(1, 5)] * 2)
    with pytest.raises(ValueError, match="boxes would need merging"):
        T.Compose([T.MixUp(0.2, 3)])(x, torch.zeros(2), index=index, boxes=[torch.zeros(0, 4)] * 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_moves_boxes_as_the_cpu() -> None:
    n, boxes = 16, random_boxes(16, seed=6)
    aug = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.RandomVerticalFlip()])
    _, cpu = aug(coded(n), index=torch.arange(n), boxes=boxes)
    _, gpu = aug(coded(n).cuda(), index=torch.arange(n).cuda(), boxes=boxes)
    for c, g in zip(cpu, gpu, strict=True):
        assert g.is_cuda and torch.allclose(c, g.cpu(), atol=1e-4)
