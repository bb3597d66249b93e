"""The dependency rules of DESIGN.md: the CLI starts without torch; loaders stay light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def modules_after(code: str, whole: bool = False) -> set[str]:
    """The packages `code` leaves imported (their full module names where `whole`)."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split()) if whole else {m.split(".")[0] for m in out.split()}


def test_prep_cli_does_not_import_torch() -> None:
    mods = modules_after("from prep.cli.main import app")
    assert "torch" not in mods and "cv2" not in mods and "tokenizers" not in mods


def test_prep_cli_imports_no_command_work() -> None:
    # start-up counts at every command: duplicate search, the samples registry and the shard
    # store load when a command runs, not when `prep --help` lists it
    mods = modules_after("from prep.cli.main import app", whole=True)
    heavy = {
        "prep.inspect.dupes",
        "prep.media.image.groups",
        "loaders.fields",
        "loaders.read.store",
    }
    assert not mods & heavy, mods & heavy


def test_loaders_import_no_prep_side_libraries() -> None:
    mods = modules_after("import loaders\nfor name in loaders.__all__: getattr(loaders, name)")
    assert "torch" in mods
    assert not mods & {"prep", "cv2", "PIL", "joblib", "typer", "tokenizers", "h5py"}


def test_prep_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from prep.cli.main import app; app()", "--help"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "pack" in out.stdout


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prep", "loaders", "bench")


def import_graph() -> dict[str, set[str]]:
    """Each module of prep, loaders and bench -> the modules of theirs it imports (at the top
    or inside a function: both count)."""
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if "out" in f.relative_to(ROOT).parts:  # bench/out/: what a bench run wrote
                continue
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = f
    graph: dict[str, set[str]] = {}
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found |= {base} | {f"{base}.{a.name}" for a in node.names}
        if name.startswith("bench"):  # bench/ runs as a folder of scripts: `import rows`
            found |= {f"bench.{m}" for m in found}
        graph[name] = {m for m in found if m in mods and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others() -> None:
    assert circles(import_graph()) == []


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph by folder (a package: its modules and its __init__), bench left out."""

    def folder(m: str) -> str:
        return m if any(k.startswith(m + ".") for k in graph) else m.rpartition(".")[0]

    out: dict[str, set[str]] = {}
    for a, deps in graph.items():
        if not a.startswith("bench"):
            out.setdefault(folder(a), set()).update(folder(b) for b in deps)
    return {a: {b for b in deps if b != a and b in out} for a, deps in out.items()}


def test_no_folder_imports_itself_through_others() -> None:
    # every arrow points down (docs/code.md): kinds -> fields, media, sources -> run ->
    # loaders; datasets -> augment, read -> remote, fields -> format
    assert circles(folder_graph(import_graph())) == []


def test_no_kind_imports_another_kind() -> None:
    graph = folder_graph(import_graph())
    kinds = [f for f in graph if f.startswith("prep.kinds.")]
    assert {(a, b) for a in kinds for b in graph[a] if b.startswith("prep.kinds.")} == set()


if __name__ == "__main__":  # `python tests/test_imports.py`: the graph by folder, and circles
    graph = import_graph()
    folders = folder_graph(graph)
    for a, b in sorted((a, b) for a, deps in folders.items() for b in deps):
        print(f"{a}/ -> {b}/")
    print("circles:", circles(graph) or "none", "| folder circles:", circles(folders) or "none")
