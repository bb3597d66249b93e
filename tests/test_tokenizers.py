"""Tokenizer files and options: saved atomically (temp, fsync, rename) by every tokenizer, a
full disk is an OSError naming the file, and --vocab-size is bounded before any training."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prep import UsageError
from prep.cli.main import app
from prep.media.text.tokenizers import (
    MAX_VOCAB,
    HFTokenizer,
    Tokenizer,
    check_tokenizer,
    fit_tokenizer,
)

CORPUS = ["alpha béta gamma", "东京 🙂 alpha", "delta\r\nepsilon", ""] * 5

needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


def _user_json(tmp_path: Path) -> Path:
    """A tokenizer.json as a user brings it: CRLF line ends, to check the copy is exact."""
    trained = fit_tokenizer("bpe", lambda: iter(CORPUS), 300)
    assert isinstance(trained, HFTokenizer)
    path = tmp_path / "user" / "my-tokenizer.json"
    path.parent.mkdir()
    path.write_bytes(trained._tok.to_str(pretty=True).replace("\n", "\r\n").encode())
    return path


def _tokenizer(spec: str, tmp_path: Path) -> Tokenizer:
    if spec == "json":
        spec = str(_user_json(tmp_path))
    return fit_tokenizer(spec, lambda: iter(CORPUS), 300)


def _fsynced(monkeypatch: pytest.MonkeyPatch, fail: str | None = None) -> list[str]:
    """The names of the files os.fsync is called on; with `fail`, fsync of a file whose name
    holds it raises ENOSPC, as on a full disk."""
    names: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        names.append(name)
        if fail is not None and fail in Path(name).name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return names


@needs_proc
@pytest.mark.parametrize("spec", ["bpe", "json", "char"])
def test_save_writes_a_temp_fsyncs_and_renames(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tok = _tokenizer(spec, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    names = _fsynced(monkeypatch)
    tok.save(out)
    monkeypatch.undo()
    final = out / str(tok.file)
    temps = [n for n in names if Path(n).name.startswith(f".{tok.file}.")]
    assert temps and all(n.endswith(".tmp") for n in temps)  # its content reached the disk
    assert str(out) in names  # and so did the rename, in the folder
    assert sorted(p.name for p in out.iterdir()) == [tok.file]
    if spec == "json":  # the user's file, byte for byte
        assert final.read_bytes() == (tmp_path / "user" / "my-tokenizer.json").read_bytes()
    if spec == "bpe":
        again = HFTokenizer.load(final, "bpe")
        assert again.encode(CORPUS)[0].tolist() == tok.encode(CORPUS)[0].tolist()


@needs_proc
@pytest.mark.parametrize("spec", ["bpe", "json", "char"])
def test_full_disk_is_an_oserror_naming_the_file(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the run engine turns into one line: an OSError with the file's name, and nothing
    left under the final name nor any temp file."""
    tok = _tokenizer(spec, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    _fsynced(monkeypatch, fail=str(tok.file))
    with pytest.raises(OSError) as info:
        tok.save(out)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert str(tok.file) in str(info.value.filename) and str(out) in str(info.value.filename)
    assert list(out.iterdir()) == []


def test_bytes_tokenizer_saves_nothing(tmp_path: Path) -> None:
    tok = fit_tokenizer("bytes", lambda: iter(CORPUS), 300)
    tok.save(tmp_path)
    assert tok.file is None and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("vocab", [256, 0, -5, MAX_VOCAB + 1, 100_000_000_000])
def test_vocab_size_out_of_bounds_is_a_usage_error(vocab: int) -> None:
    with pytest.raises(UsageError, match=rf"--vocab-size {vocab} .*HINT: ") as info:
        check_tokenizer("bpe", vocab)
    assert info.value.exit_code == 2 and len(str(info.value).splitlines()) == 1
    with pytest.raises(UsageError):  # checked before the corpus is read
        fit_tokenizer("bpe", lambda: pytest.fail("the corpus was read"), vocab)
    check_tokenizer("char", vocab)  # only bpe reads --vocab-size


def test_vocab_size_bounds_themselves_are_fine() -> None:
    check_tokenizer("bpe", 257)
    check_tokenizer("bpe", MAX_VOCAB)
    assert MAX_VOCAB >= 1 << 20  # above every vocabulary in use (the largest are ~256k)


def test_bpe_at_the_bound_takes_little_memory() -> None:
    """The trainer reserves memory for the vocabulary it is asked for (about 2 bytes an id):
    at MAX_VOCAB that is tens of MB; 10**11 would have asked for terabytes."""
    code = (
        "import resource\n"
        "from prep.media.text.tokenizers import MAX_VOCAB, fit_tokenizer\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "fit_tokenizer('bpe', lambda: iter(['alpha beta gamma alpha'] * 20), MAX_VOCAB)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) < 200 * 1024, f"{int(res.stdout) / 1024:.0f} MB"  # ru_maxrss: KiB


def test_cli_refuses_a_huge_vocab_size_in_one_line(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello world\n")
    args = ["tokenize", str(src), str(tmp_path / "out"), "--tokenizer", "bpe"]
    res = CliRunner().invoke(app, [*args, "--vocab-size", "100000000000", "-q"])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)  # a one-line error, not a traceback
    assert "--vocab-size 100000000000" in res.output and "HINT" in res.output
    assert not (tmp_path / "out").exists()
