"""Opening datasets someone else made (issues 23 and 34): every case of the hostile corpus
(tests/hostile.py: datasets; tests/hostile_sources.py: sources for `prep import`) built once.
Each dataset case is opened by each dataset class that reads its kind, read through
make_loader, and run through `prep verify`, `info`, `preview` and `report`; each source case
through `prep import` (and `prep verify` of what it wrote). As a folder, in one audited
process (tests/hostile_run.py), which also fails on any file opened, listed or written outside
the case's own folders; as a file:// URL in this process; one case of each family also as an
s3:// URL (moto's server on loopback) and through two workers. Each ends in one clear error
naming the file, or reads right; none in a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest
from hostile import AT_URL, CASES, KIND, ONE_OF_EACH, Case, build_corpus
from hostile_base import MANIFEST, edit_manifest
from hostile_run import judge, run_case
from hostile_sources import SOURCES
from s3server import BUCKET

from prep.cli.main import app

Built = list[tuple[Case, Path, str]]  # (case, its folder, its s3 URL)
HERE = Path(__file__).resolve().parent


def one_of_each(built: Built) -> Built:
    return [b for b in built if b[0].name in ONE_OF_EACH]


@pytest.fixture(scope="module")
def top(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus, every case built once (tests/hostile.py's build_corpus)."""
    folder = tmp_path_factory.mktemp("hostile")
    build_corpus(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(top: Path) -> Built:
    return [(case, top / f"case-{i:02d}" / "ds", "") for i, case in enumerate(CASES)]


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
                got = run_case(case, KIND[case.base], root, scratch, workers)
                bad = judge(case, got, mode)
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
    """The corpus cannot shrink unseen: a case removed is a count changed here."""
    names = [c.name for c in CASES] + [s.name for s in SOURCES]
    assert len(set(names)) == len(names)
    # issue 23's; fields, audio and video; every extra and field declaration (version 3's
    # counted totals gone from version 4); the shard index
    assert len(CASES) == 24 + 41 + 76 + 21  # fields: 4 of the quality scores (issue 39)
    assert Counter(s.importer for s in SOURCES) == {
        "coco": 17,
        "hf": 14,
        "webdataset": 12,
        "pairs": 9,
    }
    assert len(AT_URL) == 77  # the cases whose files lie, also opened at a file:// URL (3 quality)
    assert {c.note for c in CASES if c.note} == {f"defect {i}" for i in range(1, 7)}
    assert set(ONE_OF_EACH) <= {c.name for c in CASES if c.url}  # cases a bucket can hold
    kinds = {KIND[c.base] for c in CASES}
    assert kinds == {"images", "tokens", "table", "volumes", "samples", "audio", "clips"}


@pytest.mark.slow  # ~25 s on 2 cores: `make test-slow`, which CI runs after `make test`
def test_every_hostile_case_is_one_clear_error_and_reads_nothing_outside(top: Path) -> None:
    """Every case: a dataset as a folder and (AT_URL) a file:// URL, a source through `prep
    import`; in two processes (half the cases each) whose audit hook records each file touched
    outside the case's folders and the system's (tests/hostile_run.py)."""
    own = top / "sys"
    for sub in ("tmp", "numba"):
        (own / sub).mkdir(parents=True, exist_ok=True)
    path = [str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")]
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(path),
        "TMPDIR": str(own / "tmp"),
        "NUMBA_CACHE_DIR": str(own / "numba"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    script = [sys.executable, str(HERE / "hostile_run.py"), str(top)]
    parts = [
        subprocess.Popen([*script, str(k), "2"], env=env, stdout=PIPE, stderr=PIPE, text=True)
        for k in range(2)
    ]
    results = []
    for p in parts:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ran = sorted((r["case"], r["mode"]) for r in results)
    expected = [(c.name, "folder") for c in CASES] + [(n, "file") for n in AT_URL]
    assert ran == sorted(expected + [(s.name, "import") for s in SOURCES])
    failures = [f"{r['case']} as {r['mode']}: {b}" for r in results for b in r["bad"]]
    print("\n".join(failures))
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"


AUDITED = """
import os, sys
from pathlib import Path
import numpy as np
from hostile_run import Audit
top = Path(sys.argv[1])
ds, out, elsewhere = top / "ds", top / "out", top / "elsewhere"
audit = Audit(top, [sys.prefix, sys.base_prefix, *sys.path], [])
sys.addaudithook(audit)
audit.case([ds], [out])
np.load(ds / "a.npy"), np.save(out / "b.npy", np.zeros(2)), os.listdir(ds)  # allowed
np.load(elsewhere / "a.npy"), np.load(ds / "link.npy"), os.listdir(elsewhere)
(ds / "c.txt").write_text("x"), os.replace(out / "b.npy", elsewhere / "b.npy")
print("\\n".join(audit.seen))
"""


def test_the_audit_sees_each_file_touched_outside(tmp_path: Path) -> None:
    """What a case that reads or writes outside its folders would look like: numpy's opens, a
    link followed, a listing, a write into the dataset and a rename out, each recorded."""
    import numpy as np

    for sub in ("ds", "out", "elsewhere"):
        (tmp_path / sub).mkdir()
        np.save(tmp_path / sub / "a.npy", np.ones(3))
    (tmp_path / "ds" / "link.npy").symlink_to(tmp_path / "elsewhere" / "a.npy")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    run = subprocess.run(
        [sys.executable, "-c", AUDITED, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    ds, elsewhere = (str(tmp_path.resolve() / sub) for sub in ("ds", "elsewhere"))
    assert run.stdout.splitlines() == [
        f"open {elsewhere}/a.npy",
        f"open {elsewhere}/a.npy",  # ds/link.npy, resolved
        f"os.listdir {elsewhere}",
        f"open (write) {ds}/c.txt",
        f"os.rename (write) {elsewhere}/b.npy",
    ]


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
        os.mkfifo(out / MANIFEST)
    else:
        edit_manifest(out, lambda m: '{"format": "prep", "x": ' + "[" * 10**5 + "]" * 10**5 + "}")
    args = ["pack", str(tmp_path / "raw" / "images"), str(out), "--sizes", "16", "-q"]
    res = CliRunner().invoke(app, [*args, "--overwrite"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "holds files prep did not write (manifest.json)" in res.output
