"""loaders.transforms: per-sample augmentation that depends on (seed, epoch, index) alone."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from loaders import ImageShardDataset, Normalize, TokenWindowDataset, make_loader
from loaders import transforms as T
from loaders.augment.random import beta, uniform

CROP = (0.35, 1.0)
RATIO = (3 / 4, 4 / 3)


def pipeline(seed: int = 0) -> T.Compose:
    return T.Compose(
        [
            T.RandomResizedCrop(40, scale=CROP, ratio=RATIO),
            T.RandomHorizontalFlip(0.5),
            T.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
        ],
        seed=seed,
    )


def batch(n: int, size: int = 48, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g).permute(
        0, 3, 1, 2
    )


def test_a_sample_gets_the_same_augmentation_at_batch_1_and_64() -> None:
    images, index = batch(64), torch.arange(1000, 1064)
    aug = pipeline()
    whole = aug(images, index=index)
    for j in (0, 17, 63):
        alone = aug(images[j : j + 1], index=index[j : j + 1])
        assert torch.equal(alone, whole[j : j + 1])
    aug.set_epoch(1)
    assert not torch.equal(aug(images, index=index), whole)  # a new epoch, new draws


def augmented_by_index(packed: Path, batch_size: int, workers: int) -> dict[int, torch.Tensor]:
    ds = ImageShardDataset(packed, size=64, fields=("image", "label", "index"))
    loader = make_loader(ds, batch_size=batch_size, shuffle=True, num_workers=workers, seed=3)
    aug, out = pipeline(seed=7), {}
    for images, labels, index in loader:
        x, _ = aug(images, labels, index=index)
        out.update(zip(index.tolist(), x, strict=True))
    return out


def test_the_same_crop_and_flip_with_0_and_2_workers_and_any_batch(packed: Path) -> None:
    ref = augmented_by_index(packed, batch_size=8, workers=0)
    for batch_size, workers in ((1, 0), (5, 2)):
        got = augmented_by_index(packed, batch_size, workers)
        assert got.keys() == ref.keys() == set(range(24))
        assert all(torch.equal(got[i], ref[i]) for i in ref)


def test_the_index_field_is_the_dataset_index(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("index", "label"))
    index, _ = ds.__getitems__([5, 17, 2]).tensors
    assert index.dtype == torch.int64 and index.tolist() == [5, 17, 2]
    assert int(ds[9][0]) == 9


def test_token_windows_can_return_their_index(tmp_path: Path) -> None:
    from prep.kinds.text.config import TokenizeConfig
    from prep.kinds.text.tokenize import tokenize

    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("the quick brown fox " * 20)
    config = TokenizeConfig(
        src=str(tmp_path / "text"), out=str(tmp_path / "tok"), tokenizer="bytes", jobs=1
    )
    tokenize(config, show_progress=False)
    ds = TokenWindowDataset(tmp_path / "tok", block_size=8, index=True)
    x, _, index = ds.__getitems__([3, 1]).tensors
    assert index.tolist() == [3, 1] and torch.equal(x[0], ds[3][0])
    assert len(TokenWindowDataset(tmp_path / "tok", block_size=8)[0]) == 2


def reference_boxes(n: int, h: int, w: int) -> list[tuple[int, int]]:
    """torchvision's RandomResizedCrop.get_params in plain Python: (box h, box w) of n draws."""
    rng, out = random.Random(0), []
    for _ in range(n):
        for _ in range(10):
            area = h * w * rng.uniform(*CROP)
            aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
            bw, bh = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < bw <= w and 0 < bh <= h:
                out.append((bh, bw))
                break
        else:  # the whole image, cut to the nearest allowed ratio
            if w / h < RATIO[0]:
                out.append((round(w / RATIO[0]), w))
            elif w / h > RATIO[1]:
                out.append((h, round(h * RATIO[1])))
            else:
                out.append((h, w))
    return out


@pytest.mark.parametrize(("h", "w"), [(256, 256), (200, 300)])
def test_crop_statistics_match_scale_and_ratio(h: int, w: int) -> None:
    n = 4000
    boxes = T.RandomResizedCrop(224, scale=CROP, ratio=RATIO).boxes(torch.arange(n), h, w)
    top, left, bh, bw = boxes.double().unbind(1)
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + bh <= h).all() and (left + bw <= w).all()
    scale, aspect = bh * bw / (h * w), bw / bh
    assert scale.min() >= CROP[0] - 0.01 and scale.max() <= 1.0
    assert aspect.min() >= RATIO[0] - 0.01 and aspect.max() <= RATIO[1] + 0.01
    ref = torch.tensor(reference_boxes(n, h, w), dtype=torch.float64)
    ref_scale, ref_aspect = ref[:, 0] * ref[:, 1] / (h * w), ref[:, 1] / ref[:, 0]
    # The whole range is reached (at 200 x 300 no box of ratio <= 4/3 covers more than 0.89).
    assert scale.min() < CROP[0] + 0.01 and scale.max() > ref_scale.max() - 0.01
    for ours, theirs in ((scale, ref_scale), (aspect.log(), ref_aspect.log())):
        assert abs(ours.mean() - theirs.mean()) < 0.015
        assert abs(ours.std() - theirs.std()) < 0.015
        for q in (0.1, 0.5, 0.9):
            assert abs(ours.quantile(q) - theirs.quantile(q)) < 0.03


def square_batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images black but for a white rectangle at rows 12..30, cols 8..22; its mask class 1."""
    images = torch.zeros(n, 3, 48, 48, dtype=torch.uint8)
    images[:, :, 12:30, 8:22] = 255
    return images, (images[:, 0] > 0).to(torch.uint8)


def test_masks_stay_aligned_exactly_through_flips_and_padded_crops() -> None:
    images, mask = square_batch(64)
    aug = T.Compose([T.RandomHorizontalFlip(0.5), T.RandomCrop(40, padding=6)])
    x, m = aug(images, index=torch.arange(64), mask=mask)
    assert x.shape == (64, 3, 40, 40) and m.shape == (64, 40, 40)
    assert torch.equal(x[:, 0] > 127, m == 1)
    assert len({tuple(torch.nonzero(mi)[0].tolist()) for mi in m}) > 10  # boxes moved


def test_masks_follow_resized_crops_to_the_pixel() -> None:
    images, mask = square_batch(64)
    aug = T.Compose([T.RandomResizedCrop(64, scale=(0.4, 1.0)), T.RandomHorizontalFlip(0.5)])
    x, m = aug(images, index=torch.arange(64), mask=mask)
    bright, inside = x[:, 0] > 127, m == 1
    # Nearest and bilinear sampling may differ on the rectangle's edge pixels only.
    differ = (bright != inside).sum((1, 2))
    edge = 2 * (inside.any(1).sum(1) + inside.any(2).sum(1)) + 4
    assert (differ <= edge).all() and inside.sum() > 0


def test_mixup_labels_sum_to_one_and_weigh_the_pixels() -> None:
    n = 32
    images = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 3, 8, 8)
    x, y = T.MixUp(alpha=0.4, num_classes=n)(images, torch.arange(n), index=torch.arange(n))
    assert y.shape == (n, n) and torch.allclose(y.sum(1), torch.ones(n))
    values = torch.arange(n, dtype=torch.float32)
    assert torch.allclose(x[:, 0, 0, 0], y @ values, atol=1e-4)
    assert ((y > 0).sum(1) <= 2).all()


def test_cutmix_labels_are_the_pasted_area() -> None:
    n = 64
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 32, 48)
    x, y = T.CutMix(alpha=1.0, num_classes=n)(images, torch.arange(n), index=torch.arange(n))
    assert torch.allclose(y.sum(1), torch.ones(n))
    partner = torch.arange(n).roll(1)
    pasted = (x[:, 0] == partner.view(n, 1, 1).to(torch.uint8)).double().mean((1, 2))
    assert torch.allclose(y[torch.arange(n), partner].double(), pasted, atol=1e-6)
    assert 0 < pasted.mean() < 1 and (pasted > 0).sum() > n // 2


def test_mixing_leaves_masks_alone() -> None:
    images, mask = square_batch(4)
    out = T.CutMix(1.0, 3)(images, torch.tensor([0, 1, 2, 1]), index=torch.arange(4), mask=mask)
    assert torch.equal(out[2], mask)


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_beta_draws_have_the_beta_mean_and_variance(alpha: float) -> None:
    lam = beta(alpha, uniform(123, torch.arange(10000), 38))
    assert (lam >= 0).all() and (lam <= 1).all()
    assert abs(lam.mean() - 0.5) < 0.01
    assert abs(lam.var() - 1 / (4 * (2 * alpha + 1))) < 0.01


def test_color_jitter_is_torchvisions_formulas_in_one_matrix() -> None:
    images, index = batch(8).float(), torch.arange(8)
    jitter = T.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3)
    got = jitter(images, index=index)
    u = uniform(T.stream_key(0, 0, "ColorJitter"), index, 3)
    b, c, s = (1 + 0.3 * (2 * u - 1)).float().view(8, 3, 1, 1, 1).unbind(1)
    luma = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
    x = images * b
    x = c * x + (1 - c) * (x * luma).sum(1, keepdim=True).mean((2, 3), keepdim=True)
    x = s * x + (1 - s) * (x * luma).sum(1, keepdim=True)
    assert torch.allclose(got, x, atol=1e-3)
    as_uint8 = jitter(images.to(torch.uint8), index=index)
    assert (as_uint8.float() - x.clamp(0, 255)).abs().max() <= 0.5 + 1e-3


def test_a_resized_crop_is_a_bilinear_resize_of_its_box() -> None:
    from loaders.augment.base import Resize, Sample, settle

    x = torch.rand(2, 3, 10, 20)
    boxes = torch.tensor([[0, 0, 10, 20], [2, 4, 5, 10]])
    out = settle(Sample(x, torch.arange(2), pending=Resize(boxes, (10, 20)))).images
    assert torch.allclose(out[0], x[0], atol=1e-6)  # the whole image at its size: itself
    ref = F.interpolate(x[1:, :, 2:7, 4:14], size=(10, 20), mode="bilinear", align_corners=False)
    # Inside, the same samples; on the edge we read the pixels beyond the box, not its border.
    assert torch.allclose(out[1, :, 1:-1, 1:-1], ref[0, :, 1:-1, 1:-1], atol=1e-5)


def test_boxes_alone_are_the_boxes_a_pipeline_crops() -> None:
    from loaders.augment.base import Resize, Sample, settle

    images, index = batch(8), torch.arange(40, 48)
    crop = T.RandomResizedCrop(24, scale=CROP)
    piped = T.Compose([T.RandomHorizontalFlip(0.0), crop], seed=5, epoch=2)(images, index=index)
    boxes = crop.boxes(index, 48, 48, seed=5, epoch=2)  # as a decode-time crop would draw
    assert torch.equal(piped, settle(Sample(images, index, pending=Resize(boxes, (24, 24)))).images)


def test_uint8_and_float_batches_crop_alike() -> None:
    images, index = batch(16), torch.arange(16)
    crop = T.RandomResizedCrop(32)
    as_uint8, as_float = crop(images, index=index), crop(images.float(), index=index)
    assert as_uint8.dtype == torch.uint8 and as_float.dtype == torch.float32
    assert (as_uint8.float() - as_float).abs().max() <= 0.5 + 1e-3


def test_normalize_and_mixing_in_one_pipeline() -> None:
    aug = T.Compose([*pipeline().ops, Normalize([128.0] * 3, [64.0] * 3), T.MixUp(0.2, 10)])
    x, y = aug(batch(6), torch.arange(6) % 10, index=torch.arange(6))
    assert x.dtype == torch.float32 and x.shape == (6, 3, 40, 40) and y.shape == (6, 10)


def test_bad_calls_say_what_is_expected() -> None:
    with pytest.raises(ValueError, match=r"fields=.*index"):
        pipeline()(batch(4), index=torch.arange(3))
    with pytest.raises(ValueError, match="needs the labels"):
        T.MixUp(0.2, 10)(batch(4), index=torch.arange(4))
    with pytest.raises(ValueError, match="non-negative"):
        T.Compose([], seed=-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")
def test_cpu_and_gpu_agree() -> None:
    images, mask = square_batch(32)
    images = images | batch(32).bitwise_and(127)
    labels, index = torch.arange(32) % 5, torch.arange(100, 132)
    aug = T.Compose([*pipeline().ops, T.CutMix(1.0, 5)], seed=1)
    cpu = aug(images, labels, index=index, mask=mask)
    gpu = aug.cuda()(images.cuda(), labels.cuda(), index=index.cuda(), mask=mask.cuda())
    x, y, m = (t.cpu() for t in gpu)
    assert (x.int() - cpu[0].int()).abs().max() <= 1  # within one level
    assert torch.allclose(y, cpu[1]) and torch.equal(m, cpu[2])


def test_a_flip_after_a_crop_is_folded_into_it_exactly() -> None:
    from loaders.augment.base import Resize, Sample, settle

    images, mask = square_batch(32)
    images = images | batch(32).bitwise_and(127)
    index = torch.arange(200, 232)
    crop = T.RandomResizedCrop(40, scale=CROP)
    x, m = T.Compose([crop, T.RandomHorizontalFlip(0.5)])(images, index=index, mask=mask)
    pending = Resize(crop.boxes(index, 48, 48), (40, 40))
    ref = settle(Sample(images, index, mask=mask, pending=pending))
    flips = uniform(T.stream_key(0, 0, "RandomHorizontalFlip"), index, 1)[:, 0] < 0.5
    assert 0 < int(flips.sum()) < 32
    assert torch.equal(x, torch.where(flips.view(-1, 1, 1, 1), ref.images.flip(-1), ref.images))
    assert ref.mask is not None
    assert torch.equal(m, torch.where(flips.view(-1, 1, 1), ref.mask.flip(-1), ref.mask))


def yiq(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) RGB to YIQ (NTSC), for the hue tests."""
    from loaders.augment.color import YIQ

    return torch.einsum("rc,bchw->brhw", torch.tensor(YIQ, dtype=x.dtype), x)


def test_hue_turns_each_pixels_chroma_by_its_samples_draw() -> None:
    images, index = batch(8).double(), torch.arange(8)
    got = T.ColorJitter(hue=0.5)(images, index=index)
    turns = 0.5 * (2 * uniform(T.stream_key(0, 0, "ColorJitter"), index, 4)[:, 3] - 1)
    before, after = yiq(images), yiq(got)
    assert torch.allclose(after[:, 0], before[:, 0], atol=1e-6)  # luma kept
    chroma = [torch.complex(t[:, 1], t[:, 2]) for t in (before, after)]
    turn = torch.polar(torch.ones(8, dtype=torch.float64), 2 * math.pi * turns).view(8, 1, 1)
    assert torch.allclose(chroma[1], chroma[0] * turn, atol=1e-6)  # each turned by its draw
    assert turns.abs().max() > 0.3 and (turns > 0).any() and (turns < 0).any()
    grey = torch.full((8, 3, 4, 4), 77, dtype=torch.uint8)
    assert torch.equal(T.ColorJitter(hue=0.5)(grey, index=index), grey)  # grey stays grey
    with pytest.raises(ValueError, match="hue"):
        T.ColorJitter(hue=0.6)


@pytest.mark.parametrize("channels", [3, 1])
def test_the_cpu_kernel_agrees_with_torchs_batched_ops(
    channels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """loaders.augment.kernel (a uint8 batch on the CPU) against the grid_sample path that CUDA
    and float batches take: within one level, the mask the same, and every op of it used."""
    from loaders.augment import kernel

    images, mask = square_batch(32)
    images = (images | batch(32).bitwise_and(127))[:, :channels].contiguous()  # not channels-last
    index = torch.arange(300, 332)
    jitter = T.ColorJitter(0.3, 0.3, 0.3, hue=0.1 if channels == 3 else 0.0)
    pipes = [
        pipeline(seed=2),
        T.Compose([T.RandomResizedCrop(24, scale=CROP), T.RandomHorizontalFlip(0.5)]),
        T.Compose([T.RandomCrop(40, padding=4), jitter]),  # jitter alone: the whole image
    ]
    assert kernel.fits(images)
    fast = [aug(images, index=index, mask=mask) for aug in pipes]
    monkeypatch.setattr(kernel, "fits", lambda x, color=False: False)
    for aug, (x, m) in zip(pipes, fast, strict=True):
        ref, ref_mask = aug(images, index=index, mask=mask)
        assert x.shape == ref.shape and x.dtype == torch.uint8
        assert (x.int() - ref.int()).abs().max() <= 1
        assert (x != ref).float().mean() < 0.01  # rounding ties only
        assert torch.equal(m, ref_mask)
