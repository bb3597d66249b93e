"""The writer's side of the video field: a video's frames stored raw or one JPEG file a frame
(JPEG needs libjpeg-turbo: prep.media.image.encode)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loaders import fields as kinds
from loaders.fields.base import FieldError


class Video(kinds.Video):
    """Frames of one video (a sequence of (h, w, 3) uint8 arrays of one shape, as
    prep.media.video decodes them), stored back to back: their bytes, their (h, w) and where
    each frame's bytes end."""

    def encode(self, value: Sequence[np.ndarray] | Any) -> dict[str, np.ndarray]:
        frames = list(value)
        if not frames:
            raise FieldError("field_shape", "a video of no frames")
        if self.codec == "jpeg":
            from prep.media.image.encode import encode_jpeg

            parts = [encode_jpeg(f, self.quality) for f in frames]
        else:
            parts = [f.reshape(-1) for f in frames]
        s = self.size
        return {
            f"_{s}": np.concatenate(parts),
            f"_hw_{s}": np.asarray(frames[0].shape[:2], np.uint16),
            f"_ends_{s}": np.cumsum([len(p) for p in parts], dtype=np.int64),
        }
