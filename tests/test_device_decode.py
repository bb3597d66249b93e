"""decode="cuda"'s dispatch (bytes gathered, refused JPEGs to the CPU, the padded batch and
its whole-batch crop) run on CPU tensors, with a stand-in for nvJPEG that keeps its contract
and its refusals, checked against simplejpeg."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from loaders import CenterCrop, FormatError, ImageShardDataset, RandomResizedCrop
from loaders.read.decode import Pixels
from loaders.read.device import DeviceDecode, refused
from tests.conftest import run_pack


class StandIn:
    """nvJPEG's contract: 1-D uint8 byte tensors in, (C, H, W) uint8 out, each JPEG's own
    channels. Like it, it fails a whole call (RuntimeError) on a progressive, CMYK or (here)
    any JPEG with the comment REFUSE; it decodes with libjpeg-turbo (simplejpeg, accurate)."""

    def __init__(self) -> None:
        self.calls: list[int] = []  # how many JPEGs each call was given

    def __call__(self, data: list[torch.Tensor]) -> list[torch.Tensor]:
        self.calls.append(len(data))
        out = []
        for d in data:
            b = d.numpy().tobytes()
            try:
                with Image.open(io.BytesIO(b)) as im:
                    refuses = im.mode == "CMYK" or im.info.get("progressive") or b"REFUSE" in b
                    mode = "GRAY" if im.mode == "L" else "RGB"
                img = simplejpeg.decode_jpeg(b, mode, fastdct=False, fastupsample=False)
            except (OSError, ValueError) as e:
                raise RuntimeError(f"nvjpegDecode: {e}") from e
            if refuses:
                raise RuntimeError("nvjpegDecode: unsupported JPEG")
            out.append(torch.from_numpy(img.reshape(*img.shape[:2], -1)).permute(2, 0, 1))
        return out


def picture(h: int, w: int, seed: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    base = np.stack([x * 200 / w, y * 200 / h, (x + y) * 100 / (h + w)], -1) + 30
    return np.clip(base + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)


def jpeg(img: np.ndarray, mode: str = "RGB", **save: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).convert(mode).save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


def pixels(streams: list[bytes], boxes: list[list[int]]) -> Pixels:
    """A batch of these JPEGs (each box as its stored size: a cut-off stream's its own)."""
    hw = [box[2:] for box in boxes]
    srcs = [np.frombuffer(s, np.uint8) for s in streams]
    places = [f"sample {j}" for j in range(len(streams))]
    return Pixels(srcs, places, True, np.array(hw), np.array(boxes))


def reference(stream: bytes) -> np.ndarray:
    """(h, w, 3): simplejpeg's RGB (the accurate IDCT and upsampling, as the CPU path's); Pillow's
    conversion for CMYK, as prep's."""
    if Image.open(io.BytesIO(stream)).mode == "CMYK":
        return np.asarray(Image.open(io.BytesIO(stream)).convert("RGB"))
    return simplejpeg.decode_jpeg(stream, "RGB", fastdct=False, fastupsample=False)


def test_refused_jpegs_go_to_the_cpu_and_all_match_simplejpeg() -> None:
    imgs = [picture(40 + 7 * j, 64 - 5 * j, j) for j in range(6)]
    streams = [
        jpeg(imgs[0]),
        jpeg(imgs[1], progressive=True),
        jpeg(imgs[2], "CMYK"),
        jpeg(imgs[3], "L"),
        jpeg(imgs[4], comment=b"REFUSE"),  # one the decoder fails on: the batch is retried
        jpeg(imgs[5]),
    ]
    assert [refused(s) for s in streams] == [None, "progressive", "CMYK", None, None, None]
    stand_in = StandIn()
    p = pixels(streams, [[0, 0, *im.shape[:2]] for im in imgs])
    x, hw = DeviceDecode("cpu", stand_in).decode(p, 3)
    assert hw.tolist() == [list(im.shape[:2]) for im in imgs]
    assert x.shape == (6, 3, int(hw[:, 0].max()), int(hw[:, 1].max())) and x.dtype == torch.uint8
    for j, s in enumerate(streams):
        h, w = hw[j].tolist()
        assert np.array_equal(x[j, :, :h, :w].permute(1, 2, 0).numpy(), reference(s))
        assert not x[j, :, h:].any() and not x[j, :, :, w:].any()  # zeros past its own size
    # Never given the progressive and CMYK ones; the failed call retried one by one.
    assert stand_in.calls == [4, 1, 1, 1, 1]


def test_the_bytes_are_staged_in_one_buffer() -> None:
    streams = [jpeg(picture(16, 16, j)) for j in range(3)]
    views = DeviceDecode("cpu", StandIn()).gather(pixels(streams, [[0, 0, 16, 16]] * 3))
    assert [v.numpy().tobytes() for v in views] == streams
    base = views[0].untyped_storage().data_ptr()
    assert all(v.untyped_storage().data_ptr() == base for v in views)


def test_a_jpeg_neither_decoder_takes_is_an_error_naming_it() -> None:
    good = jpeg(picture(20, 20, 0))
    cut = good[: len(good) // 2] + b"\xff\xd9"  # ends early: the stand-in and simplejpeg fail
    with pytest.raises(FormatError, match=r"sample 1: the JPEG sample cannot be decoded"):
        DeviceDecode("cpu", StandIn()).decode(pixels([good, cut], [[0, 0, 20, 20]] * 2), 3)


@pytest.fixture(scope="module")
def keep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JPEG shards of images of their own shapes (mode keep: ragged) at 48 px."""
    root = tmp_path_factory.mktemp("device")
    for c in ("a", "b"):
        (root / "src" / c).mkdir(parents=True)
        for i in range(4):
            img = picture(50 + 13 * i, 120 - 19 * i, i + (c == "b") * 10)
            Image.fromarray(img).save(root / "src" / c / f"{i}.png")
    run_pack(root / "src", root / "ds", sizes=[48], codec="jpeg", mode="keep")
    return root / "ds"


@pytest.mark.parametrize("crop", [CenterCrop(32), RandomResizedCrop(40, seed=3)])
def test_the_device_path_of_a_dataset_agrees_with_the_cpu_path(keep: Path, crop: object) -> None:
    def images(decode: object) -> torch.Tensor:
        ds = ImageShardDataset(keep, size=48, fields=("image",), crop=crop, decode=decode)
        return ds.__getitems__(list(range(8))).tensors[0]

    cpu, stand_in = images("cpu"), StandIn()
    device = images(DeviceDecode("cpu", stand_in))
    assert device.shape == cpu.shape and device.dtype == torch.uint8 and stand_in.calls == [8]
    if isinstance(crop, CenterCrop):
        # Boxes of images narrower than 32 px are resized: OpenCV's fixed-point bilinear on the
        # CPU, grid_sample's float one here; a level apart at most, and rarely.
        assert (device.int() - cpu.int()).abs().max() <= 1
        assert (device != cpu).float().mean() < 0.06
    else:  # bilinear over roi_align's sub-samples, against OpenCV's area and linear resizes
        assert (device.float() - cpu.float()).abs().mean() < 2


def test_decode_cuda_without_a_gpu_says_so(keep: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(ValueError, match=r"no CUDA device\. HINT: decode='cpu'"):
        ImageShardDataset(keep, size=48, fields=("image",), decode="cuda")


def prep_cli(*args: str) -> tuple[int, str]:
    """`prep ARGS`: its exit code and all it printed."""
    from typer.testing import CliRunner

    from prep.cli.main import app

    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_pack_decode_cuda_without_a_gpu_is_one_clear_line(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: tests/test_gpu.py packs with it")
    (tmp_path / "src" / "a").mkdir(parents=True)
    Image.fromarray(picture(20, 30, 0)).save(tmp_path / "src" / "a" / "0.jpg")
    code, said = prep_cli("pack", str(tmp_path / "src"), str(tmp_path / "out"), "--decode", "cuda")
    assert code != 0 and "Traceback" not in said
    lines = [line for line in said.splitlines() if "--decode cuda" in line]
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "HINT: --decode cpu" in lines[0]
    assert not (tmp_path / "out" / "manifest.json").exists()
    code, said = prep_cli("pack", str(tmp_path / "src"), str(tmp_path / "out"), "--decode", "gpu")
    assert code != 0 and "--decode 'gpu' must be one of cpu, cuda" in said
