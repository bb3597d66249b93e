"""`prep issues --embed MODEL` (issue 39): outliers by a local model's pooled features, the model
a TorchScript file, a pickled nn.Module (after a warning), or a torchvision/timm checkpoint; the
flagged samples checked against the features and kNN distances computed here, independently."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from test_quality import _odd_one, _photo
from typer.testing import CliRunner

from loaders import SampleDataset
from prep.cli.main import app

ODD = {7: "stripes", 30: "checker"}  # sample number -> its odd pattern among the photos
COUNT = 40


def tiny_net() -> torch.nn.Module:
    """A random conv net (seeded): its pooled features tell flat photos from saturated
    patterns."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2),
        torch.nn.ReLU(),
    ).eval()


@pytest.fixture(scope="module")
def odd_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """COUNT demo photos, two of them replaced by the ODD patterns, packed at 32 px."""
    from conftest import run_pack

    top = tmp_path_factory.mktemp("embed")
    photos = (p for i in range(1000) if (p := _photo(i)).std(axis=2).mean() > 5)
    for n in range(COUNT):
        img = _odd_one(ODD[n]) if n in ODD else next(photos)
        (top / "src" / "a").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(top / "src" / "a" / f"{n:03d}.jpg", quality=92)
    run_pack(top / "src", top / "ds", sizes=[32])
    return top / "ds"


def _by_hand(root: Path, model: torch.nn.Module, fraction: float) -> list[int]:
    """The outliers worked out here: ImageNet-normalised float images, the model, its output's
    spatial mean scaled to length 1, each sample's mean distance to its 5 nearest others, the
    farthest ceil(fraction * N) first."""
    images = SampleDataset(root, fields=["image"]).__getitems__(list(range(COUNT)))["image"]
    x = images.float() / 255
    x = (x - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]
    ).view(1, 3, 1, 1)
    with torch.no_grad():
        f = model(x).mean(dim=(2, 3)).numpy().astype(np.float64)
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    d = np.sqrt(((f[:, None] - f[None]) ** 2).sum(axis=2))
    np.fill_diagonal(d, np.inf)
    far = np.sort(d, axis=1)[:, :5].mean(axis=1)
    return np.argsort(-far, kind="stable")[: int(np.ceil(fraction * COUNT))].tolist()


def _outliers(root: Path, model_file: str, fraction: float) -> tuple[list[int], str]:
    args = ["issues", str(root), "--kind", "outlier", "--outliers", str(fraction), "--json"]
    res = CliRunner().invoke(app, [*args, "--embed", model_file])
    assert res.exit_code == 0, res.output
    lines = [x for x in res.output.splitlines() if x.startswith("{")]
    return [json.loads(x)["index"] for x in lines], res.output


def test_torchscript_model_flags_what_its_features_isolate(odd_set: Path, tmp_path: Path) -> None:
    model = tiny_net()
    torch.jit.save(torch.jit.script(model), tmp_path / "net.pt")
    got, out = _outliers(odd_set, str(tmp_path / "net.pt"), 0.05)
    assert got == _by_hand(odd_set, model, 0.05)  # 2 of 40, the farthest first
    assert set(got) == set(ODD), got
    assert "warning" not in out  # TorchScript runs no code from the file


def test_pickled_module_loads_after_a_warning(odd_set: Path, tmp_path: Path) -> None:
    model = tiny_net()
    torch.save(model, tmp_path / "net.pkl")
    got, out = _outliers(odd_set, str(tmp_path / "net.pkl"), 0.05)
    warned = [x for x in out.splitlines() if x.startswith("warning")]
    assert len(warned) == 1 and "runs code from the file" in warned[0], out
    assert got == _by_hand(odd_set, model, 0.05)


@pytest.mark.parametrize("case", ["text", "weights", "missing", "wrong_input"])
def test_bad_models_are_one_line_with_a_hint(odd_set: Path, tmp_path: Path, case: str) -> None:
    path = tmp_path / "model.pt"
    if case == "text":
        path.write_text("not a model\n")
    elif case == "weights":  # a state dict names no architecture
        torch.save(tiny_net().state_dict(), path)
    elif case == "wrong_input":  # a model for one-channel images
        torch.jit.save(torch.jit.script(torch.nn.Conv2d(1, 4, 3)), path)
    res = CliRunner().invoke(app, ["issues", str(odd_set), "--embed", str(path)])
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    said = [x for x in res.output.splitlines() if "--embed" in x]
    assert said and "HINT" in said[-1], res.output
    assert "warning" not in res.output  # none of them is a pickled module


def test_library_checkpoint_without_the_library_says_what_to_install(
    odd_set: Path, tmp_path: Path
) -> None:
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: test_torchvision_checkpoint covers it")
    torch.save(tiny_net().state_dict(), tmp_path / "w.pth")
    res = CliRunner().invoke(
        app, ["issues", str(odd_set), "--embed", f"torchvision.resnet18:{tmp_path / 'w.pth'}"]
    )
    assert res.exit_code != 0 and "pip install" in res.output and "Traceback" not in res.output


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is None,
    reason="torchvision is not installed (the vision extra): no checkpoint to build",
)
def test_torchvision_checkpoint(odd_set: Path, tmp_path: Path) -> None:
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None)
    torch.save(net.state_dict(), tmp_path / "r18.pth")
    got, _ = _outliers(odd_set, f"torchvision.resnet18:{tmp_path / 'r18.pth'}", 0.05)
    net.fc = torch.nn.Identity()
    assert got == _by_hand(
        odd_set, torch.nn.Sequential(net.eval(), torch.nn.Unflatten(1, (-1, 1, 1))), 0.05
    )
