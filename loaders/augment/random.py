"""Per-sample randomness as a pure function of (seed, epoch, op, sample index): a hash in integer
tensor operations, the same bits on every device, batch and worker (a torch.Generator's stream
differs between CPU and CUDA and advances with the batch size).

>>> key = stream_key(0, 0, "RandomHorizontalFlip")
>>> a = uniform(key, torch.tensor([5, 7]), 3)
>>> b = uniform(key, torch.tensor([7]), 3)
>>> bool((a[1] == b[0]).all()), a.shape, a.dtype
(True, torch.Size([2, 3]), torch.float64)
"""

from __future__ import annotations

import math
import zlib
from typing import TypeVar

import torch

M32 = 0xFFFFFFFF
N = TypeVar("N", int, torch.Tensor)  # the same hash serves Python ints (keys) and tensors


def _mul32(x: N, c: int) -> N:
    """x * c mod 2**32 for 0 <= x < 2**32, in two 16-bit halves of c: every product stays
    under 2**48, so int64 tensors never overflow (signed overflow is not defined in C++)."""
    return ((((x * (c >> 16)) & 0xFFFF) << 16) + x * (c & 0xFFFF)) & M32


def mix32(x: N) -> N:
    """A 32-bit integer hash with good avalanche (Chris Wellons' "lowbias32")."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def stream_key(seed: int, epoch: int, name: str) -> int:
    """The key of one op's draws in one epoch; `name` tells ops apart ("RandomResizedCrop#1").

    Examples:
        >>> from loaders.transforms import stream_key
        >>> stream_key(0, 1, "RandomResizedCrop#1") == stream_key(0, 1, "RandomResizedCrop#1")
        True
        >>> stream_key(0, 1, "RandomResizedCrop#1") == stream_key(0, 2, "RandomResizedCrop#1")
        False
    """
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed {seed} and epoch {epoch} must be non-negative integers")
    key = mix32(zlib.crc32(name.encode()))
    for value in (seed, epoch):
        for part in (value & M32, (value >> 32) & M32):
            key = mix32(key ^ part)
    return key


def uniform(key: int, index: torch.Tensor, k: int) -> torch.Tensor:
    """k uniform draws in [0, 1) (32 bits: exact) per dataset index (N,): float64 (N, k).

    Examples:
        >>> import torch
        >>> from loaders.transforms import stream_key, uniform
        >>> u = uniform(stream_key(0, 0, "MyOp#1"), torch.arange(4), 2)
        >>> u.shape, u.dtype, bool(((u >= 0) & (u < 1)).all())
        (torch.Size([4, 2]), torch.float64, True)
    """
    idx = index.reshape(-1).to(torch.int64)
    if idx.numel() and int(idx.min()) < 0:
        raise ValueError("sample indices must be non-negative dataset indices")
    h = mix32(mix32((idx & M32) ^ key) ^ ((idx >> 32) & M32))
    j = torch.arange(k, dtype=torch.int64, device=idx.device)
    h = mix32(mix32(h[:, None] ^ _mul32(j + 1, 0x9E3779B9)[None, :]))
    return h.to(torch.float64) * 2.0**-32


GAMMA_TRIES = 6  # Marsaglia-Tsang accepts >= 95% of tries: 6 miss one draw in ~1e8


def gamma(shape: float, u: torch.Tensor) -> torch.Tensor:
    """Gamma(shape, 1) draws (N,) from uniforms u (N, 3 * GAMMA_TRIES + 1): Marsaglia and
    Tsang's, all tries at once, the first accepted kept; shape < 1 boosted by U ** (1 / shape)."""
    a = shape + 1.0 if shape < 1 else shape
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    t = GAMMA_TRIES
    z = torch.sqrt(-2.0 * torch.log1p(-u[:, :t])) * torch.cos(2.0 * math.pi * u[:, t : 2 * t])
    v = (1.0 + c * z) ** 3
    log_v = torch.log(v.clamp_min(1e-300))
    accept = (v > 0) & (torch.log(u[:, 2 * t : 3 * t]) < 0.5 * z * z + d - d * v + d * log_v)
    first = accept.to(torch.int8).argmax(1, keepdim=True)
    g = torch.where(accept.any(1), d * v.gather(1, first).squeeze(1), d)
    if shape < 1:
        g = g * u[:, 3 * t].clamp_min(1e-300) ** (1.0 / shape)
    return g


BETA_DRAWS = 2 * (3 * GAMMA_TRIES + 1)


def beta(alpha: float, u: torch.Tensor) -> torch.Tensor:
    """Beta(alpha, alpha) draws (N,) from uniforms u (N, BETA_DRAWS), as X / (X + Y)."""
    half = BETA_DRAWS // 2
    x, y = gamma(alpha, u[:, :half]), gamma(alpha, u[:, half:])
    return x / (x + y).clamp_min(1e-300)
