"""Opening datasets someone else made (issue 23): every case of the hostile corpus
(tests/hostile.py) opened by each dataset class that reads its kind, read through make_loader,
and run through `prep verify`, `info` and `preview`, as a folder and a file:// URL; one case of
each family also as an s3:// URL (moto's server on loopback) and through two workers. Each
ends in one clear error naming the file, or reads right; none in a traceback, and nothing is
written outside the dataset and the cache."""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile import CASES, KIND, ONE_OF_EACH, OPEN, PREVIEW, VERIFY, Case, build, make_bases
from s3server import BUCKET

from loaders import (
    CenterCrop,
    DocumentDataset,
    ImageShardDataset,
    PatchDataset,
    TableDataset,
    TokenWindowDataset,
    VolumeDataset,
    make_loader,
)
from loaders.format import FormatError
from prep import PrepError
from prep.cli.main import app

Opener = Callable[[str], Any]
CROP = CenterCrop(32, 1.0)
OPENERS: dict[str, list[Opener]] = {
    "images": [lambda r: ImageShardDataset(r, crop=CROP)],
    "tokens": [
        lambda r: TokenWindowDataset(r, block_size=8),
        lambda r: DocumentDataset(r, split="train"),
    ],
    "table": [lambda r: TableDataset(r)],
    "volumes": [lambda r: VolumeDataset(r), lambda r: PatchDataset(r, patch=(4, 4, 4))],
}
CLEAN = (FormatError, PrepError)  # the errors that are one line for the user
FOLDER_ONLY = "prep preview reads a dataset folder, not a URL"


Built = list[tuple[Case, Path, str]]  # (case, its folder, its s3 URL)


def one_of_each(built: Built) -> Built:
    return [b for b in built if b[0].name in ONE_OF_EACH]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Each case built once."""
    root = tmp_path_factory.mktemp("hostile")
    bases = make_bases(root / "bases", root / "raw")
    return [
        (
            case,
            build(case, bases, root / f"case-{i:02d}" / "ds", root / f"case-{i:02d}" / "out"),
            "",
        )
        for i, case in enumerate(CASES)
    ]


@pytest.fixture(scope="module")
def at_s3(corpus: Built, s3: Any) -> Built:
    """One case of each family put on the S3 server too."""
    built = []
    for case, folder, _ in one_of_each(corpus):
        url = f"s3://{BUCKET}/hostile/{folder.parent.name}"
        s3.put(str(folder), url, recursive=True)
        built.append((case, folder, url))
    return built


def where(case: Case, folder: Path, url: str, mode: str) -> str | None:
    if mode != "folder" and not case.url:
        return None  # a FIFO or a link cannot be put at a URL
    return {"folder": str(folder), "file": f"file://{folder}", "s3": url}[mode]


def outcome(fn: Callable[[], object], case: Case) -> str:
    """ok, refused (a clean error naming the file), vague (clean, not naming it), or crash."""
    try:
        fn()
    except Exception as e:
        # torch raises a worker's error again from a local: in a cycle with its traceback, the
        # loader's workers are stopped by gc, 5 s each, after their queues are gone. Not so now.
        e.__traceback__ = None
        if not isinstance(e, CLEAN):  # what the corpus is for: anything else is a traceback
            return f"crash: {type(e).__name__}: {e}"
        return "refused" if re.search(case.names, str(e)) else f"vague: {e}"
    return "ok"


def read_all(make: Opener, root: str, workers: int) -> None:
    ds = make(root)
    for i in range(len(ds) if not workers else 0):  # with workers, they read first
        ds[i]
    if workers or isinstance(ds, ImageShardDataset | TokenWindowDataset | TableDataset):
        ragged = isinstance(ds, DocumentDataset | VolumeDataset)  # samples of their own shapes
        for _ in make_loader(ds, batch_size=1 if ragged else 4, num_workers=workers):
            pass


def cli(args: list[str], case: Case) -> str:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, args)
    text = res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"crash: {type(res.exception).__name__}: {res.exception}"
    if "Traceback" in text or res.exit_code not in (0, 1):
        return f"crash: exit {res.exit_code}: {text[-300:]}"
    if res.exit_code == 0:
        return "ok"
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    if len(errors) != 1:
        return f"crash: not one error line: {text[-300:]}"
    return "refused" if re.search(case.names, text) else f"vague: {text.strip()[-200:]}"


def run_case(case: Case, root: str, scratch: Path, workers: int) -> dict[str, str]:
    """Every reader of the case's kind on `root`: reader -> outcome."""
    kind = KIND[case.base]
    s3 = root.startswith("s3:")  # the readers that fetch files; the rest as at file://
    openers = OPENERS[kind][:1] if workers or s3 else OPENERS[kind]
    got = {
        f"{OPEN}[{k}]": outcome(functools.partial(read_all, make, root, workers), case)
        for k, make in enumerate(openers)
    }
    if workers:
        return got
    got[VERIFY] = cli(["verify", root], case)
    if not s3:
        got["info"] = cli(["info", root], case)
        got[PREVIEW] = cli(["preview", root, "-n", "4", "-o", str(scratch / "sheet.png")], case)
    return got


def judge(case: Case, got: dict[str, str], mode: str) -> list[str]:
    """What is wrong with the outcomes: a crash anywhere, or a reader of `refuse` that did not
    refuse (naming the file)."""
    bad = [f"{r}: {o}" for r, o in got.items() if o.startswith("crash")]
    for reader, o in got.items():
        if reader == PREVIEW and mode != "folder" and FOLDER_ONLY in o:
            continue  # prep preview reads folders: one line saying so
        if reader.split("[")[0] in case.refuse and o != "refused":
            bad.append(f"{reader} should refuse naming /{case.names}/: {o}")
    return bad


def snapshot(root: Path, skip: Path) -> set[str]:
    return {
        os.path.join(d, f)
        for d, dirs, files in os.walk(root)
        if not d.startswith(str(skip))
        for f in files + dirs
    }


def check_corpus(
    corpus: Built, modes: tuple[str, ...], workers: int, tmp: Path
) -> Counter[tuple[str, str]]:
    cache = tmp / "x" / "y" / "z" / "cache"  # a sha256 "../../../../a" would leave it in tmp
    scratch = tmp / "scratch"
    scratch.mkdir()
    cache.mkdir(parents=True)
    top = corpus[0][1].parent.parent
    before = snapshot(top, top / "nothing") | snapshot(tmp, cache)
    failures: list[str] = []
    tally: Counter[tuple[str, str]] = Counter()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREP_CACHE", str(cache))
        for case, folder, url in corpus:
            for mode in modes:
                root = where(case, folder, url, mode)
                if root is None:
                    continue
                bad = judge(case, run_case(case, root, scratch, workers), mode)
                tally["fail" if bad else "pass", mode] += 1
                failures += [f"{case.name} ({case.note or case.base}) as {mode}: {b}" for b in bad]
    after = snapshot(top, top / "nothing") | snapshot(tmp, cache)
    written = sorted(p for p in after - before if not p.startswith(str(scratch)))
    assert not written, f"written outside the datasets and the cache: {written[:5]}"
    print("\n".join(failures))
    counts = ", ".join(
        f"{m}: {tally['pass', m]}/{tally['pass', m] + tally['fail', m]}" for m in modes
    )
    print(f"{len(corpus)} cases; passing {counts}")
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"
    return tally


def test_the_corpus_holds_every_case() -> None:
    assert len({c.name for c in CASES}) == len(CASES) == 24  # the 7th defect: the lock test
    assert {c.note for c in CASES if c.note} == {f"defect {i}" for i in range(1, 7)}
    assert set(ONE_OF_EACH) <= {c.name for c in CASES if c.url}  # cases a bucket can hold


def test_every_hostile_dataset_is_one_clear_error(corpus: Built, tmp_path: Path) -> None:
    check_corpus(corpus, ("folder", "file"), 0, tmp_path)


@pytest.mark.slow
def test_each_family_of_hostile_dataset_at_s3_is_one_clear_error(
    at_s3: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loaders.remote

    monkeypatch.setattr(loaders.remote, "BACKOFF", 0.01)
    check_corpus(at_s3, ("s3",), 0, tmp_path)


@pytest.mark.slow
def test_each_family_of_hostile_dataset_through_two_workers(corpus: Built, tmp_path: Path) -> None:
    """Workers read what the main process did not: a URL's files arrive, and are checked, in
    the worker that reads them first."""
    check_corpus(one_of_each(corpus), ("file",), 2, tmp_path)


def test_a_lock_that_is_a_link_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    """`ln -s victim.txt .OUT.prep-lock; prep pack SRC OUT` truncated victim.txt (defect 7)."""
    from typer.testing import CliRunner

    from prep.demo.images import make_demo

    make_demo(tmp_path / "raw", count=2, seed=0, jobs=1, max_side=64, show_progress=False)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "OUT"
    lock = tmp_path / ".OUT.prep-lock"
    args = ["pack", str(tmp_path / "raw" / "images"), str(out), "--sizes", "16", "-q"]
    for planted in ("link", "hard link", "other text", "fifo"):
        if planted == "link":
            lock.symlink_to(victim)
        elif planted == "hard link":
            os.link(victim, lock)
        elif planted == "other text":
            lock.write_text("not a lock\n")
        else:
            os.mkfifo(lock)
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 1 and "Traceback" not in res.output, (planted, res.output)
        assert res.output.count("\n") == 1 and str(lock) in res.output, res.output
        assert victim.read_text() == "precious\n" and not out.exists()
        lock.unlink()
    stale = f"pid 12 on {os.uname().nodename}\n"  # a run killed before removing its lock
    lock.write_text(stale)
    assert CliRunner().invoke(app, args).exit_code == 0 and not lock.exists()


@pytest.mark.parametrize("planted", ["nested", "fifo"])
def test_an_out_with_a_hostile_manifest_is_one_line(planted: str, tmp_path: Path) -> None:
    """Packing over an OUT reads its manifest to tell prep's files from the user's: a manifest
    nested 100,000 deep was a RecursionError, and a FIFO there blocked the run."""
    from typer.testing import CliRunner

    from prep.demo.images import make_demo

    make_demo(tmp_path / "raw", count=2, seed=0, jobs=1, max_side=64, show_progress=False)
    out = tmp_path / "OUT"
    out.mkdir()
    if planted == "fifo":
        os.mkfifo(out / "manifest.json")
    else:
        (out / "manifest.json").write_text(
            '{"format": "prep", "x": ' + "[" * 10**5 + "]" * 10**5 + "}"
        )
    args = ["pack", str(tmp_path / "raw" / "images"), str(out), "--sizes", "16", "-q"]
    res = CliRunner().invoke(app, [*args, "--overwrite"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "holds files prep did not write (manifest.json)" in res.output
