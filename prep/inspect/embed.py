"""`prep issues --embed MODEL`: outliers by a local model's pooled features instead of the pHash
bits and colour statistics (issue 39). The features are computed after packing, on the loader's
batches of the stored images (SampleDataset at its smallest size, the ImageNet normalisation
torchvision's and timm's checkpoints expect), average-pooled over any spatial axes and scaled to
unit length; loaders.fields.scores.outlier_scores ranks them as it ranks the pHash embedding.

MODEL is a file on this machine, nothing is downloaded:
- a TorchScript module (`torch.jit.save`);
- a whole pickled `nn.Module` (`torch.save(model)`): unpickling runs code from the file, so it
  is loaded only after a warning that says so;
- `torchvision.NAME:FILE` or `timm.NAME:FILE`: a state dict of that architecture (the
  `vision` extra), its classifier head dropped.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)  # ImageNet's, in pixel units (loaders Normalize)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
BATCH = 64
LIBRARIES = ("torchvision", "timm")


def _head_dropped(model: Any) -> Any:
    """A torchvision classifier with its last layer (fc, classifier, heads) an Identity: the
    pooled features before it."""
    import torch.nn as nn

    for attr in ("fc", "classifier", "heads", "head"):
        if isinstance(getattr(model, attr, None), nn.Module):
            setattr(model, attr, nn.Identity())
            return model
    return model


def _architecture(spec: str) -> Any:
    """`torchvision.NAME:FILE` or `timm.NAME:FILE` -> that model with FILE's weights, no head."""

    arch, _, file = spec.partition(":")
    library, _, name = arch.partition(".")
    try:
        lib = __import__(library)
    except ImportError:
        raise PrepError(
            f"--embed {spec}: {library} is not installed. HINT: pip install 'prep[embed]' "
            f"(or {library}), or pass a TorchScript file (torch.jit.save)"
        ) from None
    try:
        if library == "timm":
            model = lib.create_model(name, pretrained=False, num_classes=0)
        else:
            model = _head_dropped(lib.models.get_model(name, weights=None))
    except (KeyError, ValueError, RuntimeError) as e:
        raise PrepError(f"--embed {spec}: no {library} model {name!r} ({e})") from None
    try:
        state = _load(file, spec, weights_only=True)
    except _Pickled:
        state = None  # a whole module, not weights: said below
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]  # a training checkpoint's weights
    if not isinstance(state, dict):
        raise PrepError(
            f"--embed {spec}: {file} holds no state dict. HINT: save the weights with "
            "torch.save(model.state_dict(), FILE)"
        )
    try:
        model.load_state_dict(state, strict=False)  # the head's keys have no place: dropped
    except RuntimeError as e:
        raise PrepError(f"--embed {spec}: {file} is not a {name} checkpoint ({e})") from None
    return model


class _Pickled(Exception):
    """torch.load(weights_only=True) refused the file: it pickles classes (a whole module)."""


def _load(file: str, spec: str, weights_only: bool) -> Any:
    """torch.load of `file` to the CPU; _Pickled where only weights_only=False could load it,
    PrepError naming the fix where it is not a torch file."""
    import pickle

    import torch

    if not Path(file).is_file():
        raise PrepError(f"--embed {spec}: no such file {file}. HINT: pass a local model file")
    try:
        return torch.load(file, map_location="cpu", weights_only=weights_only)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as e:
        said = str(e).splitlines()[0] if str(e) else type(e).__name__
        if weights_only and "Weights only load failed" in str(e) and "GLOBAL" in str(e):
            raise _Pickled(said) from None
        raise PrepError(
            f"--embed {spec}: {file} is not a model torch can load ({said}). HINT: save it with "
            "torch.jit.save or torch.save(model)"
        ) from None


def load_model(spec: str) -> Any:
    """The `nn.Module` (or ScriptModule) --embed names, in eval mode on the CPU."""
    import torch

    if spec.partition(".")[0] in LIBRARIES and ":" in spec:
        model = _architecture(spec)
    elif not Path(spec).is_file():
        raise PrepError(f"--embed {spec}: no such file. HINT: pass a local model file")
    elif zipfile.is_zipfile(spec) and any(
        n.endswith("/constants.pkl") for n in zipfile.ZipFile(spec).namelist()
    ):  # TorchScript's archive: code it compiled, not pickled classes
        model = torch.jit.load(spec, map_location="cpu")
    else:
        try:
            state = _load(spec, spec, weights_only=True)
        except _Pickled:
            print(
                f"warning: --embed {spec} is a pickled module: loading it runs code from the file "
                "(trust it, or save the model with torch.jit.save)",
                file=sys.stderr,
            )
            state = _load(spec, spec, weights_only=False)
        if not isinstance(state, torch.nn.Module):
            raise PrepError(
                f"--embed {spec}: the file holds a {type(state).__name__}, not a model. HINT: "
                "for weights name the architecture, --embed torchvision.resnet18:FILE"
            )
        model = state
    return model.eval()


def features(root: str | Path, spec: str, split: str | None = None) -> np.ndarray:
    """float32 (N, D): each sample's pooled features under model `spec`, of unit length, in
    SampleDataset's order (within `split`)."""
    import torch

    from loaders import CenterCrop, SampleDataset, make_loader
    from loaders.augment.normalize import Normalize
    from loaders.fields import Image

    model = load_model(spec)
    probe = SampleDataset(root, fields=["index"], split=split)
    name = next((n for n, f in probe.declared.items() if isinstance(f, Image)), None)
    if name is None:
        raise PrepError(f"{root} has no image field to embed. HINT: --embed is for images")
    field, size = probe.declared[name], min(probe.sizes)
    crop = CenterCrop(size) if getattr(field, "mode", None) == "keep" else None  # one shape
    ds = SampleDataset(root, fields=[name], size=size, split=split, crop=crop)
    norm = Normalize(MEAN, STD)
    out = []
    with torch.inference_mode():
        for batch in make_loader(ds, batch_size=BATCH):
            x = batch[name]
            x = norm(x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x)  # grey: as RGB
            try:
                y = model(x)
            except Exception as e:  # the user's model: whatever it raises is about its input
                raise PrepError(
                    f"--embed {spec}: the model fails on a batch {list(x.shape)} "
                    f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). HINT: "
                    "it takes (N, 3, H, W) float images, normalised as ImageNet's"
                ) from None
            y = y[0] if isinstance(y, (tuple, list)) else y
            out.append(y.float().flatten(2).mean(dim=2) if y.ndim > 2 else y.float())
    f = torch.cat(out).reshape(len(ds), -1).numpy()
    return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
