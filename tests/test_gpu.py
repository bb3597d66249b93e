"""On a CUDA machine: nvJPEG and the transforms on the GPU against the CPU (make gpu-check
runs these); here they skip, saying why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from loaders import CenterCrop, ImageShardDataset
from loaders.read.device import DeviceDecode
from tests.test_device_decode import StandIn, jpeg, picture, pixels, reference
from tests.test_device_parity import LEVEL, noisy, ops, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("name", list(ops()))
def test_each_transform_on_cuda_is_the_cpu_within_one_level(name: str) -> None:
    op, x, index = ops()[name], noisy(24), torch.arange(500, 524)
    cpu = run(op, x, index)
    gpu = run(op.cuda(), x.cuda(), index.cuda())
    assert gpu.is_cuda and gpu.dtype == cpu.dtype and gpu.shape == cpu.shape
    tolerance = LEVEL[cpu.dtype]
    assert (gpu.cpu().double() - cpu.double()).abs().max() <= tolerance


def test_nvjpeg_and_its_fallbacks_match_simplejpeg() -> None:
    pytest.importorskip("torchvision", reason="decode='cuda' needs the gpu extra (torchvision)")
    imgs = [picture(40 + 7 * j, 64 - 5 * j, j) for j in range(4)]
    streams = [jpeg(imgs[0]), jpeg(imgs[1], progressive=True), jpeg(imgs[2], "CMYK")]
    streams.append(jpeg(imgs[3], "L"))
    p = pixels(streams, [[0, 0, *im.shape[:2]] for im in imgs])
    x, hw = DeviceDecode("cuda").decode(p, 3)
    assert x.is_cuda
    for j, s in enumerate(streams):
        h, w = hw[j].tolist()
        got = x[j, :, :h, :w].permute(1, 2, 0).cpu().numpy().astype(int)
        assert np.abs(got - reference(s)).mean() < 1.5  # nvJPEG's IDCT is not libjpeg-turbo's


def test_decode_cuda_reads_ahead_on_one_stream_and_matches_the_stand_in(tmp_path: Path) -> None:
    pytest.importorskip("torchvision", reason="decode='cuda' needs the gpu extra (torchvision)")
    from tests.conftest import run_pack

    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    for i in range(12):
        Image.fromarray(picture(60 + 5 * i, 90 - 3 * i, i)).save(src / f"{i}.png")
    run_pack(tmp_path / "src", tmp_path / "ds", sizes=[48], codec="jpeg", mode="keep")

    def ds(decode: object) -> ImageShardDataset:
        return ImageShardDataset(
            tmp_path / "ds", size=48, fields=("image",), crop=CenterCrop(32), decode=decode
        )

    gpu, ref = ds("cuda"), ds(DeviceDecode("cpu", StandIn()))
    batches = [gpu.__getitems__(list(range(k, k + 6))).tensors[0] for k in (0, 6)]
    stream = gpu._device._stream
    assert stream is not None and gpu.__getitems__([0]).tensors[0].is_cuda
    assert gpu._device._stream is stream  # one side stream, batch after batch
    for k, b in zip((0, 6), batches, strict=True):
        want = ref.__getitems__(list(range(k, k + 6))).tensors[0].float()
        assert (b.float().cpu() - want).abs().mean() < 1.5


def test_pack_decode_cuda_records_its_difference_from_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torchvision", reason="--decode cuda needs the gpu extra (torchvision)")
    from loaders.format import read_manifest
    from tests.conftest import run_pack

    (tmp_path / "src" / "a").mkdir(parents=True)
    for i in range(6):
        img = Image.fromarray(picture(80 + 9 * i, 120 - 7 * i, i))
        img.save(tmp_path / "src" / "a" / f"{i}.jpg")
    run_pack(tmp_path / "src", tmp_path / "gpu", sizes=[32], decode="cuda")
    run_pack(tmp_path / "src", tmp_path / "cpu", sizes=[32])
    found = read_manifest(tmp_path / "gpu").extra["decode"]
    assert found["device"] == "cuda" and found["jpegs"] == 6 and 0 <= found["max_diff"] <= 255
    a, b = (
        ImageShardDataset(tmp_path / d, size=32, fields=("image",)).__getitems__(list(range(6)))
        for d in ("gpu", "cpu")
    )
    assert (a.tensors[0].float() - b.tensors[0].float()).abs().mean() < 3
