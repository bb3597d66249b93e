"""Class maps that grow on `--append`: a command's listed classes put after the dataset's (old
ids never change), and the listed ids turned into names the grown map encodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.format import Manifest
from prep.run.grow import grown_classes


def grown_labels(
    fields: Mapping[str, Any], old: Manifest
) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """Each class-named field (Label, Labels) with the dataset's classes first and the listed
    ones' new names after (old ids never change); and, for the fields whose ids move, the
    class names the listed ids stand for (Renamed turns them into names)."""
    out, moved = dict(fields), {}
    for name, f in fields.items():
        was = (old.fields.get(name) or {}).get("classes")
        now = getattr(f, "classes", None)
        if f.kind in ("label", "labels") and isinstance(was, list) and now:
            classes = tuple(grown_classes(was, list(now)))
            if classes != tuple(now):
                out[name], moved[name] = dataclasses.replace(f, classes=classes), tuple(now)
    return out, moved


@dataclass(frozen=True)
class Renamed:
    """A command's sample maker whose class ids (of the classes it listed) are given as names,
    which the grown class map (grown_labels) encodes as the dataset's ids."""

    make: Callable[[Any], Any]
    classes: Mapping[str, tuple[str, ...]]

    def __call__(self, item: Any) -> Any:
        made = self.make(item)
        if made is None:
            return None
        samples = [self.named(s) for s in (made if isinstance(made, list) else [made])]
        return samples if isinstance(made, list) else samples[0]

    def named(self, sample: dict[str, Any]) -> dict[str, Any]:
        out = dict(sample)
        for name, classes in self.classes.items():
            v = out.get(name)
            if isinstance(v, (int, np.integer)) and 0 <= v < len(classes):  # else: as it was
                out[name] = classes[int(v)]
            elif isinstance(v, (list, tuple, np.ndarray)) and not any(
                isinstance(x, str) for x in v
            ):
                ids = np.asarray(v, np.int64).reshape(-1)  # Labels: a sample's objects' ids
                if ids.size and ids.min() >= 0 and ids.max() < len(classes):
                    out[name] = [classes[i] for i in ids.tolist()]
        return out


def named_targets(columns: list[Any], values: Any) -> list[Any]:
    """An input's --targets values, a class column's id as its name (ids move as classes grow)."""
    pairs = zip(columns, values or (), strict=False)
    return [c.classes[int(v)] if getattr(c, "classes", None) else v for c, v in pairs]
