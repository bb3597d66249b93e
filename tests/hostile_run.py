"""Running the hostile corpus (tests/hostile.py, tests/hostile_sources.py): every reader of a
case's kind and `prep verify`, `info`, `preview` and `report` on each dataset case, `prep import`
on each source case, each outcome judged (ok, refused naming the file, vague, or crash).

Run as a script (`python tests/hostile_run.py TOP PART PARTS`, on a corpus built in TOP by
tests/hostile.py's build_corpus), it runs every PARTS-th case in one process under an audit
hook (`sys.addaudithook`) that records each file opened, listed, written, renamed or removed
outside the case's own folders (the dataset or source, its OUT, scratch and cache) and the
system's (Python, its packages, /usr, /proc...), and prints one JSON line a case. Files that C
libraries open themselves (HDF5, libsndfile, FFmpeg) raise no audit event: their paths come
from prep's checked ones.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_base import INFO, OPEN, PREVIEW, REPORT, VERIFY, Case

Opener = Callable[[str], Any]
FOLDER_ONLY = "prep preview reads a dataset folder, not a URL"
IMAGES_ONLY = "preview shows image datasets"


def openers(kind: str) -> list[Opener]:
    """The dataset classes that read a dataset of `kind`, each with what it needs to read
    every sample (a crop for images of their own shapes)."""
    from loaders import (
        AudioDataset,
        CenterCrop,
        ClipDataset,
        DocumentDataset,
        ImageShardDataset,
        PatchDataset,
        SampleDataset,
        TableDataset,
        TokenWindowDataset,
        VolumeDataset,
    )

    crop = CenterCrop(32, 1.0)
    small = CenterCrop(16, 1.0)
    return {
        "images": [lambda r: ImageShardDataset(r, crop=crop)],
        "tokens": [
            lambda r: TokenWindowDataset(r, block_size=8),
            lambda r: DocumentDataset(r, split="train"),
        ],
        "table": [lambda r: TableDataset(r)],
        "volumes": [lambda r: VolumeDataset(r), lambda r: PatchDataset(r, patch=(4, 4, 4))],
        "samples": [lambda r: SampleDataset(r, crop=small)],
        "audio": [lambda r: AudioDataset(r, seconds=0.1), lambda r: SampleDataset(r)],
        "clips": [
            lambda r: ClipDataset(r, frames=2, crop=small),
            lambda r: SampleDataset(r, crop=small),
        ],
    }[kind]


def clean() -> tuple[type[Exception], ...]:
    """The errors that are one line for the user."""
    from loaders.format import FormatError
    from prep import PrepError

    return (FormatError, PrepError)


def outcome(fn: Callable[[], object], names: str) -> str:
    """ok, refused (a clean error naming the file), vague (clean, not naming it), or crash."""
    try:
        fn()
    except Exception as e:
        # torch raises a worker's error again from a local: in a cycle with its traceback, the
        # loader's workers are stopped by gc, 5 s each, after their queues are gone. Not so now.
        e.__traceback__ = None
        if not isinstance(e, clean()):  # what the corpus is for: anything else is a traceback
            return f"crash: {type(e).__name__}: {e}"
        return "refused" if re.search(names, str(e)) else f"vague: {e}"
    return "ok"


def read_all(make: Opener, root: str, workers: int) -> None:
    """Every sample of the dataset, then its batches through make_loader."""
    from loaders import DocumentDataset, VolumeDataset, make_loader

    ds = make(root)
    for i in range(len(ds) if not workers else 0):  # with workers, they read first
        ds[i]
    ragged = isinstance(ds, DocumentDataset | VolumeDataset)  # samples of their own shapes
    for _ in make_loader(ds, batch_size=1 if ragged else 4, num_workers=workers):
        pass


def cli(args: list[str], names: str) -> str:
    """`prep ARGS` in this process: ok (exit 0), refused (exit 1 or 2 with one `error:` line
    matching `names`), vague (one line, not matching) or crash (a traceback, another exit
    code, more or fewer error lines)."""
    from typer.testing import CliRunner

    from prep.cli.main import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    text = res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        res.exception.__traceback__ = None
        return f"crash: {type(res.exception).__name__}: {res.exception}"
    if "Traceback" in text or res.exit_code not in (0, 1, 2):
        return f"crash: exit {res.exit_code}: {text[-300:]}"
    if res.exit_code == 0:
        return "ok"
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    if len(errors) != 1:
        return f"crash: not one error line: {text[-300:]}"
    return "refused" if re.search(names, text) else f"vague: {text.strip()[-200:]}"


def run_case(case: Case, kind: str, root: str, scratch: Path, workers: int = 0) -> dict[str, str]:
    """Every reader of `kind` and the commands that look at a dataset, on `root`:
    reader -> outcome. A URL gets the readers and verify (with workers: the first reader)."""
    url = "://" in root
    makers = openers(kind)[:1] if workers or root.startswith("s3:") else openers(kind)
    got = {
        f"{OPEN}[{k}]": outcome(functools.partial(read_all, make, root, workers), case.names)
        for k, make in enumerate(makers)
    }
    if workers:
        return got
    got[VERIFY] = cli(["verify", root], case.names)
    if not root.startswith("s3:"):
        got[INFO] = cli(["info", root], case.names)
        got[PREVIEW] = cli(["preview", root, "-n", "4", "-o", scratch / "sheet.png"], case.names)
    if not url:
        report = ["report", root, "-n", "2", "-q", "--out", scratch / "report.html"]
        got[REPORT] = cli(report, case.names)
    return got


def judge(case: Case, got: dict[str, str], mode: str) -> list[str]:
    """What is wrong with the outcomes: a crash anywhere, or a reader of `case.refuse` that
    did not refuse (naming the file)."""
    bad = [f"{r}: {o}" for r, o in got.items() if o.startswith("crash")]
    for reader, o in got.items():
        if reader == PREVIEW and ((mode != "folder" and FOLDER_ONLY in o) or IMAGES_ONLY in o):
            continue  # prep preview shows image folders: one line saying so
        if reader.split("[")[0] in case.refuse and o != "refused":
            bad.append(f"{reader} should refuse naming /{case.names}/: {o}")
    return bad


# ----------------------------------------------------------------- the audited run


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# The audit events that change a path: event -> (the positions of its paths, of their dir_fd)
WRITES: dict[str, tuple[tuple[int, ...], int | None]] = {
    "os.remove": ((0,), 1),
    "os.rmdir": ((0,), 1),
    "os.mkdir": ((0,), 2),
    "os.rename": ((0, 1), 2),
    "os.symlink": ((1,), 2),
    "os.link": ((0, 1), 2),
    "os.truncate": ((0,), None),
    "os.chmod": ((0,), 2),
    "os.chown": ((0,), 3),
    "os.utime": ((0,), 3),
    "shutil.rmtree": ((0,), 1),
}


class Audit:
    """The paths a run touches outside its allowed folders: `reads` (also the system's),
    `writes` (the case's OUT, scratch and cache, and this run's own temp folder), `exact`
    (folders that may be opened or made themselves: OUT's parent, for its rename). Paths are
    resolved (links followed, a `dir_fd` made a path) before they are judged."""

    def __init__(self, top: Path, system: list[str], writes: list[str]):
        self.top = os.path.realpath(top)
        self.system = [os.path.realpath(p) for p in system]
        self.always = [os.path.realpath(p) for p in writes]
        self.reads: list[str] = []
        self.writes: list[str] = []
        self.exact: list[str] = []
        self.seen: list[str] = []
        self.busy = False

    def case(self, reads: list[Path], writes: list[Path], exact: tuple[Path, ...] = ()) -> None:
        self.writes = [os.path.realpath(p) for p in writes] + self.always
        self.reads = [os.path.realpath(p) for p in reads] + self.writes
        self.exact = [os.path.realpath(p) for p in exact]
        self.seen = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.busy or not (event in ("open", "os.listdir") or event in WRITES):
            return
        self.busy = True  # realpath itself is not audited, but stay out of our own way
        try:
            if event == "open":
                mode, flags = args[1] or "", args[2] or 0
                write = any(c in mode for c in "wax+") or bool(flags & WRITE_FLAGS)
                self._check(args[0], None, write, event)
            elif event == "os.listdir":
                self._check(args[0], None, False, event)
            else:
                at, fd = WRITES[event]
                for k in at:
                    dir_fd = args[fd] if fd is not None and len(args) > fd else None
                    self._check(args[k], dir_fd, True, event)
        finally:
            self.busy = False

    def _check(self, path: Any, dir_fd: Any, write: bool, event: str) -> None:
        if not isinstance(path, str | bytes | os.PathLike):
            return  # a file descriptor: opened (and checked) before
        path = os.fsdecode(path)
        if isinstance(dir_fd, int) and not os.path.isabs(path):  # shutil.rmtree's unlinks
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        p = os.path.realpath(path)
        inside = functools.partial(_under, p)
        if p in self.exact or any(map(inside, self.writes if write else self.reads)):
            return
        if not write and not inside(self.top) and any(map(inside, self.system)):
            return
        self.seen.append(f"{event}{' (write)' if write else ''} {p}")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def system_roots(repo: Path) -> tuple[list[str], list[str]]:
    """What any run may read (Python, its packages and their editable install's folders, the
    code, the OS) and write (/dev/null, matplotlib's cache)."""
    import matplotlib

    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, str(repo)]
    roots += [p for p in sys.path if p and os.path.isdir(p)]
    for name, module in list(sys.modules.items()):  # setuptools' editable finders
        if name.startswith("__editable__"):
            roots += [str(p) for p in getattr(module, "MAPPING", {}).values()]
    roots += ["/usr", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev", "/opt"]
    return roots, ["/dev/null", matplotlib.get_cachedir(), matplotlib.get_configdir()]


def _clock() -> Callable[[], float]:
    """Seconds since the last call: what each case took."""
    import time

    last = [time.perf_counter()]

    def tick() -> float:
        now = time.perf_counter()
        took, last[0] = now - last[0], now
        return round(took, 3)

    return tick


def main(top: Path, part: int, parts: int) -> None:
    """Every `parts`-th case of the corpus built in `top` (tests/hostile.py's build_corpus),
    from case `part`, audited: a dataset as a folder and (those of hostile.AT_URL) a file://
    URL, a source through `prep import`. One JSON line each: {"case", "mode", "got",
    "bad", "s"}."""
    from hostile import AT_URL, CASES, KIND
    from hostile_sources import SOURCES, run_source, source_judge

    own = top / "sys"  # this run's TMPDIR and caches
    system, writes = system_roots(Path(__file__).resolve().parent.parent)
    audit = Audit(top, system, [*writes, str(own)])
    sys.addaudithook(audit)
    clock = _clock()

    def report(name: str, mode: str, got: dict[str, str], bad: list[str]) -> None:
        bad += [f"outside: {p}" for p in audit.seen[:5]]
        line = {"case": name, "mode": mode, "got": got, "bad": bad, "s": clock()}
        print(json.dumps(line), flush=True)

    for i in range(part, len(CASES), parts):
        case, folder = CASES[i], top / f"case-{i:02d}"
        scratch, cache, ds = folder / "scratch", folder / "cache", folder / "ds"
        os.environ["PREP_CACHE"] = str(cache)
        for mode, root in (("folder", str(ds)), ("file", f"file://{ds}")):
            if mode == "file" and case.name not in AT_URL:
                continue  # a FIFO or a link cannot be put at a URL; a manifest is read alike
            audit.case([ds], [scratch, cache])
            got = run_case(case, KIND[case.base], root, scratch)
            report(case.name, mode, got, judge(case, got, mode))
    for i in range(part, len(SOURCES), parts):
        source, folder = SOURCES[i], top / f"source-{i:02d}"
        out, scratch, cache = folder / "OUT", folder / "scratch", folder / "cache"
        args = json.loads((folder / "args.json").read_text())
        os.environ["PREP_CACHE"] = str(cache)
        beside = [out.with_name("OUT.partial"), out.with_name(".OUT.prep-lock")]
        audit.case([folder / "src", top / "raw"], [out, *beside, scratch, cache], (folder,))
        got = run_source(source, args, out)
        report(source.name, "import", got, source_judge(source, got, out))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
