"""`prep demo --audio DIR`: class folders of synthesised tones, chirps and noise at several rates
and channel counts, in WAV, FLAC, OGG/Vorbis and MP3 (libsndfile). The same seed gives the same
bytes: libsndfile numbers each Ogg stream at random, so the .ogg files get a fixed serial after."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

RATES = (8000, 22050, 44100, 48000)
# (extension, libsndfile format, subtype): MP3 only where this libsndfile can write it.
FORMATS = (("wav", "WAV", "PCM_16"), ("flac", "FLAC", "PCM_16"), ("ogg", "OGG", "VORBIS"))
MP3 = ("mp3", "MP3", "MPEG_LAYER_III")
OGG_SERIAL = 0x70726570  # b"prep": any fixed number does; one logical stream a file


_BIT_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def set_ogg_serial(path: Path, serial: int = OGG_SERIAL) -> None:
    """Give every page of the Ogg file `path` stream serial `serial` (4 bytes at 14), its
    checksum (at 22) redone; byte 26 counts the segment sizes that follow, then the body."""
    data = bytearray(path.read_bytes())
    at = 0
    while at < len(data):
        if data[at : at + 4] != b"OggS":
            raise ValueError(f"{path}: no Ogg page at byte {at}")
        nseg = data[at + 26]
        end = at + 27 + nseg + sum(data[at + 27 : at + 27 + nseg])
        data[at + 14 : at + 18] = serial.to_bytes(4, "little")
        data[at + 22 : at + 26] = bytes(4)
        # Ogg's CRC-32 (0x04C11DB7, MSB first, 0 in and out) from zlib's (LSB first, ~0 in
        # and out): the bits reversed around it and the ~0s undone
        page = bytes(data[at:end]).translate(_BIT_REVERSED)
        crc = int(f"{zlib.crc32(page, 0xFFFFFFFF) ^ 0xFFFFFFFF:032b}"[::-1], 2)
        data[at + 22 : at + 26] = crc.to_bytes(4, "little")
        at = end
    path.write_bytes(bytes(data))


def synth(kind: str, rate: int, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """float32 (n,) at full scale below 0.5: a tone, a rising chirp or band-limited noise."""
    t = np.arange(round(seconds * rate)) / rate
    if kind == "tone":
        x = np.sin(2 * np.pi * rng.uniform(220, 880) * t)
    elif kind == "chirp":
        f0, f1 = rng.uniform(200, 500), rng.uniform(1500, min(3500, rate / 2.5))
        x = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * seconds)))
    else:
        x = np.convolve(rng.standard_normal(len(t)), np.ones(4) / 4, mode="same")
    fade = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.01)  # 10 ms ramps: no clicks
    return (rng.uniform(0.2, 0.45) * x * fade).astype(np.float32)


def make_audio_demo(out: Path, per_class: int = 12, seed: int = 0) -> list[Path]:
    """Write `per_class` files into each of out/{tone,chirp,noise}; the paths written."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    kinds, written = ("tone", "chirp", "noise"), []
    fmts = (*FORMATS, MP3) if MP3[2] in sf.available_subtypes(MP3[1]) else FORMATS
    for c, kind in enumerate(kinds):
        (out / kind).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            ext, fmt, subtype = fmts[(i + c) % len(fmts)]
            rate = RATES[(i * 3 + c) % len(RATES)]
            x = synth(kind, rate, float(rng.uniform(0.6, 2.5)), rng)
            if i % 4 == 3:  # some stereo files, channels a little apart
                x = np.stack([x, np.roll(x, 7)], axis=1)
            path = out / kind / f"{kind}_{i:03d}.{ext}"
            sf.write(path, x, rate, format=fmt, subtype=subtype)
            if fmt == "OGG":
                set_ogg_serial(path)
            written.append(path)
    return written
