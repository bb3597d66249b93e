"""`make gpu-check`: everything the GPU runs, measured in one go on the first CUDA machine.

    python3 bench/gpu_check.py                 # CUDA if torch sees it, else the CPU, labelled
    python3 bench/gpu_check.py --device cpu --quick   # the smoke run of make test

It runs every CUDA test (pytest -k "cuda or gpu" over the files that have them), then times on
photo-like JPEGs made on the spot (`prep pack --codec jpeg`): decode="cuda" against the
CPU path on this machine's cores, each transform's ms per batch, and 200 steps of
examples/train_classifier.py with its data wait. It prints one table and writes it to --out.
Where the project's virtualenv is absent it runs on the system's python3: the packages missing
there are installed from wheels/ (`make gpu-wheels`) first. Only the standard library is
imported before that."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NEEDED = {  # module -> its PyPI name: what loaders and prep import on these paths
    "numpy": "numpy",
    "PIL": "pillow",
    "simplejpeg": "simplejpeg",
    "cv2": "opencv-python-headless",
    "typer": "typer",
    "tqdm": "tqdm",
    "joblib": "joblib",
    "psutil": "psutil",
    "pytest": "pytest",
}
CUDA_TESTS = "cuda or gpu"
# Not this script's own smoke test, nor the docs' blocks (they need `make dataset`'s data).
NOT_CUDA_TESTS = ("test_gpu_check.py", "test_readme.py")
SITE = ROOT / "bench" / "out" / "site"  # where wheels/ is installed: no system site touched


def install_missing(wheels: Path, cuda: bool) -> None:
    """pip install into SITE, from wheels/ only, the modules this python lacks (no network);
    torchvision (nvJPEG) where CUDA runs."""
    sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()
    names = [pkg for mod, pkg in NEEDED.items() if importlib.util.find_spec(mod) is None]
    if cuda and importlib.util.find_spec("torchvision") is None:
        names.append("torchvision")
    if not names:
        return
    have = {f.name.split("-")[0].lower() for f in wheels.glob("*.whl")}  # none: no folder
    lacking = [n for n in names if n.replace("-", "_").lower() not in have]
    if lacking:
        extra = " GPU_WHEELS_EXTRA=opencv-python-headless" if NEEDED["cv2"] in lacking else ""
        hint = f"make gpu-wheels{extra}"
        sys.exit(f"gpu-check: this python lacks {', '.join(lacking)}. HINT: {hint}, or pip install")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    subprocess.run([*pip, "--target", str(SITE), *names], check=True)
    importlib.invalidate_caches()


def env() -> dict[str, str]:
    """The environment of the commands run: this tree's code first, as a checkout runs it."""
    parts = [str(ROOT), str(SITE), os.environ.get("PYTHONPATH", "")]
    path = os.pathsep.join(p for p in parts if p)
    return {**os.environ, "PYTHONPATH": path}


def prep(*args: str) -> None:
    cmd = [sys.executable, "-c", "from prep.cli.main import app; app()", *args]
    subprocess.run(cmd, check=True, env=env(), capture_output=True, text=True)


def cuda_tests(device: str) -> tuple[str, str]:
    """(passed/failed/skipped counts, the value column) of every CUDA test; none on the CPU."""
    if device != "cuda":
        return "not run: no CUDA device (they skip here, saying why)", "-"
    found = sorted((ROOT / "tests").glob("test_*.py"))
    files = [str(f) for f in found if "cuda" in f.read_text() and f.name not in NOT_CUDA_TESTS]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", CUDA_TESTS]
    out = subprocess.run([*cmd, *files], env=env(), capture_output=True, text=True, cwd=ROOT)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-200:]
    return last, "ok" if out.returncode == 0 else "FAILED"


def demo(work: Path, count: int, size: int) -> Path:
    """A JPEG-coded pack at `size` px of `count` photo-like JPEGs in two classes, made here
    (not by `prep demo`: its Parquet and tar sources need pyarrow, 40 MB more of wheels)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(size, 2 * size, 2))
        y, x = np.mgrid[0:h, 0:w] / max(h, w)
        base = np.stack([np.sin(5 * x + i), np.cos(4 * y - i), x * y], -1) * 90 + 128
        img = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        (work / "src" / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(work / "src" / f"c{i % 2}" / f"{i}.jpg", quality=92)
    out = work / "packed"
    prep("pack", str(work / "src"), str(out), "--sizes", str(size), "--codec", "jpeg", "-q")
    return out


def best(fn: Callable[[], Any], reps: int, sync: Callable[[], None]) -> float:
    """The median seconds of `reps` calls of fn after one warm-up (sync: wait for the device)."""
    fn()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decode_rows(
    packed: Path, size: int, device: str, reps: int, sync: Callable[[], None]
) -> list[list[str]]:
    """img/s of a batch (64 images at most), a RandomResizedCrop of 7/8 the side: on `device`
    and the CPU."""
    from loaders import ImageShardDataset, RandomResizedCrop
    from loaders.read.device import DeviceDecode

    def rate(decode: object) -> float:
        crop = RandomResizedCrop(size * 7 // 8)
        ds = ImageShardDataset(packed, size=size, fields=("image",), crop=crop, decode=decode)
        n = min(64, len(ds))
        return n / best(lambda: ds.__getitems__(list(range(n))), reps, sync)

    cpu = rate("cpu")
    rows = [["decode, CPU path (img/s)", f"{cpu:,.0f}", f"{os.cpu_count()} cores"]]
    if device == "cuda":
        gpu = rate(DeviceDecode("cuda"))
        rows.append(["decode, nvJPEG path (img/s)", f"{gpu:,.0f}", f"{gpu / cpu:.1f}x the CPU"])
    return rows


def transform_rows(
    device: str, reps: int, sync: Callable[[], None], n: int, side: int
) -> list[list[str]]:
    """ms per batch (n x 3 x side x side uint8) of each op of loaders.transforms, Normalize."""
    import torch

    from loaders import Normalize
    from loaders import transforms as T

    out = side * 7 // 8
    ops: dict[str, torch.nn.Module] = {
        f"RandomResizedCrop({out})": T.RandomResizedCrop(out),
        f"Resize({out})": T.Resize(out),
        f"RandomCrop({out}, padding=8)": T.RandomCrop(out, padding=8),
        f"CenterCrop({out})": T.CenterCrop(out),
        "RandomHorizontalFlip": T.RandomHorizontalFlip(),
        "RandomVerticalFlip": T.RandomVerticalFlip(),
        "ColorJitter(.4, .4, .4, .1)": T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        "MixUp(0.2)": T.MixUp(0.2, 10),
        "CutMix(1.0)": T.CutMix(1.0, 10),
        "Normalize": Normalize([124.0, 116.0, 104.0], [58.0, 57.0, 57.0]),
    }
    ops["crop + flip + jitter, folded"] = T.Compose(
        [T.RandomResizedCrop(out), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1)]
    )
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, side, side, 3), dtype=torch.uint8, generator=g)
    x = x.permute(0, 3, 1, 2).to(device)  # channels-last, as the datasets return it
    labels, index = (torch.arange(n) % 10).to(device), torch.arange(n).to(device)
    rows = []
    for name, op in ops.items():
        pipe = op if isinstance(op, T.Compose) else T.Compose([op])
        ms = 1000 * best(lambda p=pipe: p(x, labels, index=index), reps, sync)
        rows.append([f"transform {name} (ms/batch)", f"{ms:.2f}", f"{n} x 3 x {side}^2 uint8"])
    return rows


def train_rows(packed: Path, device: str, steps: int, workers: int) -> list[list[str]]:
    """examples/train_classifier.py for `steps` steps: samples/s and the data wait it prints."""
    cmd = [sys.executable, str(ROOT / "examples" / "train_classifier.py"), "--data", str(packed)]
    cmd += ["--limit", str(steps), "--device", device, "--batch-size", "32", "--epochs", "1"]
    cmd += ["--workers", str(workers)]
    out = subprocess.run(cmd, env=env(), capture_output=True, text=True, check=True, timeout=300)
    found = re.findall(r"([\d,]+) samples/s, data wait ([\d.]+)%", out.stdout)
    if not found:
        return [[f"train_classifier, {steps} steps (samples/s)", "?", out.stdout[-200:]]]
    rate = statistics.mean(float(r.replace(",", "")) for r, _ in found)  # over its epochs
    wait = statistics.mean(float(w) for _, w in found)
    return [
        [f"train_classifier, {steps} steps (samples/s)", f"{rate:,.0f}", f"data wait {wait:.1f}%"]
    ]


def table(rows: list[list[str]], label: str) -> str:
    head = [f"gpu-check on {label}", "", "| measure | value | note |", "| --- | --- | --- |"]
    return "\n".join(head + [f"| {' | '.join(r)} |" for r in rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda if seen")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "gpu-check.md")
    p.add_argument("--quick", action="store_true", help="a tiny run: 48 images, 3 steps, 1 rep")
    p.add_argument("--wheels", type=Path, default=ROOT / "wheels")
    args = p.parse_args(argv)
    import torch  # the machine's own (a CUDA build there), never from wheels/

    seen = torch.cuda.is_available()
    install_missing(args.wheels, seen and args.device != "cpu")
    sys.path.insert(0, str(ROOT))
    device = args.device or ("cuda" if seen else "cpu")
    if device == "cuda" and not seen:
        print("gpu-check: --device cuda, but torch sees no CUDA device: the CPU numbers follow")
        device = "cpu"
    name = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    label = f"{name}, torch {torch.__version__}" + ("" if seen else ": unmeasured on a GPU")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    # Enough images for a step of 32 an epoch (every 8th is held out), else --limit never ends.
    reps, count, size, steps = (1, 48, 64, 3) if args.quick else (10, 256, 256, 200)
    batch, workers = (8, 0) if args.quick else (64, 2)
    status, verdict = cuda_tests(device)
    rows = [["CUDA tests", verdict, status]]
    with tempfile.TemporaryDirectory() as tmp:
        packed = demo(Path(tmp), count, size)
        rows += decode_rows(packed, size, device, reps, sync)
        rows += transform_rows(device, reps, sync, batch, size)
        rows += train_rows(packed, device, steps, workers)
    text = table(rows, label)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}")
    return 0 if verdict != "FAILED" else 1


if __name__ == "__main__":
    sys.exit(main())
