"""`decode="cuda"`: a batch of JPEG samples decoded at once by nvJPEG (torchvision, the `gpu`
extra), cropped on the GPU, in the main process (CUDA cannot start in forked workers)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from loaders.format import FormatError
from loaders.read.decode import check_crc


def decode_cuda(
    srcs: Sequence[np.ndarray],
    crcs: np.ndarray | None,
    hw: np.ndarray,
    boxes: np.ndarray,
    out_hw: tuple[int, int],
    channels: int,
    wheres: Sequence[str],
) -> torch.Tensor:
    """uint8 (B, C, oh, ow) on the current CUDA device: each sample's box of its decoded image
    resized to `out_hw` (bilinear, antialiased when it shrinks)."""
    from torch.utils.data import get_worker_info

    if get_worker_info() is not None:
        raise RuntimeError(
            'decode="cuda" decodes in the main process (CUDA cannot start in forked workers). '
            "HINT: make_loader(..., num_workers=0), or decode='cpu' in workers"
        )
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as e:
        raise ImportError(
            "decode='cuda' needs torchvision. HINT: pip install '.[gpu]' (or decode='cpu')"
        ) from e
    for j, src in enumerate(srcs):
        check_crc(src, None if crcs is None else int(crcs[j]), wheres, j)
    data = [torch.from_numpy(np.array(src)) for src in srcs]  # a copy: the maps are read-only
    mode = ImageReadMode.GRAY if channels == 1 else ImageReadMode.RGB
    try:
        images = decode_jpeg(data, mode=mode, device="cuda")
    except RuntimeError as e:
        raise FormatError(
            f"a JPEG sample of {wheres[0]} ... {wheres[-1]} cannot be decoded ({e}). "
            "HINT: run `prep verify`, then repack"
        ) from e
    out = torch.empty((len(srcs), channels, *out_hw), dtype=torch.uint8, device="cuda")
    for j, img in enumerate(images):
        if tuple(img.shape[1:]) != (int(hw[j, 0]), int(hw[j, 1])):
            raise FormatError(f"{wheres[j]}: decoded {tuple(img.shape[1:])}, stored {hw[j]}")
        top, left, h, w = (int(v) for v in boxes[j])
        region = img[:, top : top + h, left : left + w]
        if (h, w) != out_hw:
            shrink = h > out_hw[0] or w > out_hw[1]
            resized = torch.nn.functional.interpolate(
                region[None].float(), size=out_hw, mode="bilinear", antialias=shrink
            )
            region = resized[0].round_().clamp_(0, 255)
        out[j] = region
    return out.contiguous(memory_format=torch.channels_last)
