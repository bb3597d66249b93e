"""decode="cuda": a batch's JPEGs decoded at once on the GPU by nvJPEG (torchvision.io's
decode_jpeg), in the main process. Around the decoder: the bytes gathered into one pinned host
buffer, the JPEGs nvJPEG refuses (progressive, CMYK, lossless, arithmetic, or any it fails on)
decoded on the CPU instead, and the work queued on one side stream, so that the next batch
decodes while the model trains on this one (read-ahead). Any decoder that keeps nvJPEG's
contract (a list of 1-D uint8 byte tensors in, a list of (C, H, W) uint8 tensors out) can stand
in for it: on the CPU, tests check the dispatch against simplejpeg with one."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import get_worker_info

from loaders.fields.image import decode_jpeg
from loaders.read.decode import Pixels

Decoder = Callable[[list[torch.Tensor]], list[torch.Tensor]]

# Start-of-frame markers: baseline and extended Huffman nvJPEG decodes; the rest it refuses.
TAKEN = (0xC0, 0xC1)
REFUSED = {0xC2: "progressive", 0xC3: "lossless", 0xC5: "hierarchical", 0xC6: "hierarchical"}
REFUSED |= {m: "arithmetic-coded" for m in (0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)}
REFUSED |= {0xC7: "lossless", 0xC8: "reserved"}


def refused(data: bytes) -> str | None:
    """Why nvJPEG would not take this JPEG ('progressive', 'CMYK', ...), None where it would.

    >>> refused(bytes.fromhex("ffd8 ffc2 000b 08 0010 0010 01 011100"))
    'progressive'
    """
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker = data[i + 1]
        if marker == 0xFF:  # fill bytes before a marker
            i += 1
            continue
        if marker in REFUSED:
            return REFUSED[marker]
        if marker in TAKEN:
            parts = data[i + 9] if i + 9 < len(data) else 0
            return None if parts in (1, 3) else ("CMYK" if parts == 4 else f"{parts} components")
        if marker == 0xDA:  # scan data before any frame header
            break
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return "no frame header"


def nvjpeg(device: torch.device) -> Decoder:
    """torchvision.io.decode_jpeg on `device`: each JPEG's own channels (1 or 3)."""
    try:
        from torchvision.io import ImageReadMode
        from torchvision.io import decode_jpeg as tv_decode
    except ImportError as e:
        raise ImportError(
            "decode='cuda' needs torchvision. HINT: pip install '.[gpu]' (or decode='cpu')"
        ) from e

    def run(data: list[torch.Tensor]) -> list[torch.Tensor]:
        out = tv_decode(data, mode=ImageReadMode.UNCHANGED, device=device)
        return list(out) if isinstance(out, list) else [out]

    return run


def cpu_decode(data: np.ndarray, hw: tuple[int, int], channels: int) -> np.ndarray:
    """(h, w, C) pixels by libjpeg-turbo (simplejpeg); a CMYK JPEG by Pillow, whose conversion
    prep packs with (libjpeg-turbo's differs by a level). ValueError or OSError: bad bytes."""
    if refused(data[:65536].tobytes()) != "CMYK":
        return decode_jpeg(data, hw, 1, channels).copy()  # a copy: decode_jpeg's scratch buffer
    from PIL import Image

    with Image.open(io.BytesIO(data.tobytes())) as im:
        img = np.array(im.convert("L" if channels == 1 else "RGB"))  # writable: torch's
    return img.reshape(img.shape[0], img.shape[1], channels)


@dataclass
class DeviceDecode:
    """A dataset's decode= on a device: `decoder` (None: nvJPEG) gives each JPEG's pixels there.
    `DeviceDecode("cpu", decoder)` runs the whole dispatch on CPU tensors."""

    device: str = "cuda"
    decoder: Decoder | None = None
    on: torch.device = field(init=False, repr=False)  # torch.device(device)
    _stream: torch.cuda.Stream | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.on = torch.device(self.device)
        if self.on.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                "decode='cuda' but torch sees no CUDA device. HINT: decode='cpu' on this machine"
            )

    def run(self, work: Callable[[], torch.Tensor]) -> torch.Tensor:
        """work()'s tensor, its ops queued on one side stream (CUDA) that the caller's stream
        then waits for: the next batch decodes while the model trains on this one."""
        if self.on.type != "cuda":
            return work()
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.on)
        caller = torch.cuda.current_stream(self.on)
        with torch.cuda.stream(self._stream):
            out = work()
        caller.wait_stream(self._stream)
        out.record_stream(caller)  # its memory is not reused before the caller is done with it
        return out

    def gather(self, p: Pixels) -> list[torch.Tensor]:
        """The JPEGs' bytes, CRCs checked, copied into one host buffer (pinned for a GPU, so the
        decoder's copies to it are direct): a 1-D uint8 view of it each."""
        sizes = [len(s) for s in p.srcs]
        for j in range(len(p.srcs)):
            p.check_crc(j)
        staged = torch.empty(sum(sizes), dtype=torch.uint8, pin_memory=self.on.type == "cuda")
        flat, at, views = staged.numpy(), 0, []
        for src, n in zip(p.srcs, sizes, strict=True):
            flat[at : at + n] = np.asarray(src).reshape(-1)
            views.append(staged[at : at + n])
            at += n
        return views

    def decode(self, p: Pixels, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's images, uint8 (B, C, H, W) on the device, each in the top-left corner
        (zeros beyond), and their sizes hw (B, 2). Call it inside run()."""
        if get_worker_info() is not None and self.on.type == "cuda":
            raise RuntimeError(
                'decode="cuda" decodes in the main process (CUDA cannot start in forked workers). '
                "HINT: make_loader(..., num_workers=0), or decode='cpu' in workers"
            )
        data = self.gather(p)
        why = [refused(bytes(d[:65536].numpy())) for d in data]
        taken = [j for j, w in enumerate(why) if w is None]
        images: dict[int, torch.Tensor] = {}
        if taken:
            images = self._device_decode(p, data, taken)
        for j in range(len(data)):
            img = images.get(j)
            if img is not None and img.shape[0] == 3 and channels == 1:
                img = None  # luma as the CPU computes it
            if img is None:
                img = self._cpu(p, j, channels)
            images[j] = img.expand(channels, -1, -1) if img.shape[0] != channels else img
        return self._padded(p, [images[j] for j in range(len(data))], channels)

    def _device_decode(
        self, p: Pixels, data: list[torch.Tensor], taken: list[int]
    ) -> dict[int, torch.Tensor]:
        """The decoder's pixels of samples `taken`: all at once; where that fails, one by one,
        and the ones it fails on are left to the CPU."""
        decoder = self.decoder or nvjpeg(self.on)
        try:
            return dict(zip(taken, decoder([data[j] for j in taken]), strict=True))
        except RuntimeError:
            out = {}
            for j in taken:
                with contextlib.suppress(RuntimeError):
                    out[j] = decoder([data[j]])[0]
            return out

    def _cpu(self, p: Pixels, j: int, channels: int) -> torch.Tensor:
        hw = (int(p.hw[j, 0]), int(p.hw[j, 1]))
        try:
            img = cpu_decode(np.asarray(p.srcs[j]), hw, channels)
        except (ValueError, OSError, SyntaxError) as e:
            p.fail(j, f"the JPEG sample cannot be decoded ({e})")
        pixels = torch.from_numpy(img).permute(2, 0, 1)
        pinned = pixels.pin_memory() if self.on.type == "cuda" else pixels
        return pinned.to(self.on, non_blocking=True)

    def _padded(
        self, p: Pixels, images: list[torch.Tensor], channels: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hw = torch.as_tensor(np.asarray(p.hw, dtype=np.int64).reshape(-1, 2))
        for j, img in enumerate(images):
            if tuple(img.shape[1:]) != tuple(hw[j].tolist()):
                p.fail(j, f"decoded {tuple(img.shape[1:])} px, stored {tuple(hw[j].tolist())}")
        top = hw.max(0).values.tolist() if len(images) else [1, 1]
        out = torch.zeros((len(images), channels, *top), dtype=torch.uint8, device=self.on)
        for j, img in enumerate(images):
            out[j, :, : img.shape[1], : img.shape[2]] = img
        return out, hw.to(self.on)
