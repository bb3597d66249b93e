"""A batch of a ragged field, by its policy: `pad` (padded to the longest, with `NAME_len`),
`list` (a tensor a sample, as torchvision's detection models take them) or `jagged` (a nested
tensor over the values and their offsets, `torch.nested.nested_tensor_from_jagged`).

>>> out = ragged_batch("b", [np.arange(4.0), np.zeros(0)], (2,), "pad")
>>> out["b"].shape, out["b_len"].tolist()
(torch.Size([2, 2, 2]), [2, 0])
"""

from __future__ import annotations

from typing import Any

import numpy as np


def ragged_batch(
    name: str, pieces: list[np.ndarray], row: tuple[int, ...], policy: str
) -> dict[str, Any]:
    """`pieces`: each sample's flat elements; `row`: the shape of one of its rows."""
    import torch  # here: the field kinds (and so packing) need numpy only

    rows = [p.reshape(-1, *row) for p in pieces]
    if policy == "list":
        return {name: [torch.from_numpy(np.array(r)) for r in rows]}  # copies: maps are read-only
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    dtype = pieces[0].dtype if pieces else np.dtype("float32")
    if policy == "jagged":
        values = np.concatenate(rows) if rows else np.zeros((0, *row), dtype)
        offsets = np.concatenate([[0], np.cumsum(lens)])
        nested = torch.nested.nested_tensor_from_jagged(
            torch.from_numpy(values), torch.from_numpy(offsets)
        )
        return {name: nested}
    out = np.zeros((len(rows), int(lens.max(initial=0)), *row), dtype)
    for j, r in enumerate(rows):
        out[j, : len(r)] = r
    return {name: torch.from_numpy(out), f"{name}_len": torch.from_numpy(lens)}
