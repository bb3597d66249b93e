"""The C path of CSV blocks (prep/_csv.c) against pyarrow's on generated blocks: the same
table (types, nulls, values bit for bit, dictionaries) wherever it takes a block, pyarrow's
wherever it does not, and the same packed bytes either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from prep.kinds.table.config import TableConfig
from prep.kinds.table.pack import pack_table
from prep.sources import table
from prep.sources.table import Block, read_block

pytestmark = pytest.mark.skipif(table.fast_parse is None, reason="prep._csv is not built")

CODED = pa.dictionary(pa.int32(), pa.binary())
ODD = b'true FALSE inf -Inf nan +5 .5 5. 1e400 2020-01-01 12:30:00 0x10 1_0 "7" "-1.5"'.split()
ODD += [b" 1", b"2 ", b"12345678901234567890"]  # spaces around, past int64


def _number(rng: np.random.Generator) -> bytes:
    """A decimal as files hold them: short, long, exponents, leading zeros, signs."""
    pick = rng.integers(0, 8)
    sign = b"-" if rng.random() < 0.5 else b""
    whole = str(rng.integers(0, 10 ** rng.integers(1, 9))).encode()
    frac = str(rng.integers(0, 10 ** rng.integers(1, 9))).zfill(int(rng.integers(1, 9))).encode()
    if pick == 0:
        return sign + whole + b"e" + str(rng.integers(-30, 30)).encode()
    if pick == 1:
        return sign + b"0." + b"0" * int(rng.integers(0, 5)) + frac
    if pick == 2:
        return sign + str(rng.integers(1, 10**17)).encode() + b"." + frac  # strtod's
    if pick == 3:
        return repr(float(rng.normal(0, 10.0 ** rng.integers(-5, 5)))).encode()
    return sign + whole + b"." + frac


def _cell(kind: str, rng: np.random.Generator, na: list[bytes]) -> bytes:
    if kind == "int":
        return str(rng.integers(-(10 ** rng.integers(1, 19)), 10 ** rng.integers(1, 19))).encode()
    if kind == "float":
        return _number(rng)
    if kind == "text":
        word = rng.choice(
            ["v", "naïve", "日本", "x y", "a,b", "é😀", "N/A", "Z", "same first 8 ", "long"]
        )
        text = f"{word}{rng.integers(0, 30)}".encode()
        return b'"' + text + b'"' if rng.random() < 0.5 or b"," in text else text
    if kind == "na":
        return rng.choice([b"", b'""', *na]) if na else b""
    return bytes(rng.choice(ODD))


def _block(rng: np.random.Generator, sep: bytes, na: list[bytes]) -> tuple[list[str], bytes]:
    """A header's names and rows: columns of one kind, some with others mixed in."""
    ncols, nrows = int(rng.integers(1, 7)), int(rng.integers(1, 80))
    kinds = [str(rng.choice(["int", "float", "text", "na"])) for _ in range(ncols)]
    mix = {
        0: (),
        1: ("na",),
        2: ("float",),  # int then float
        3: ("text",),  # numbers then text
        4: ("odd",),
    }
    others = [mix[int(rng.choice(5, p=[0.4, 0.3, 0.1, 0.1, 0.1]))] for _ in range(ncols)]
    late = int(rng.integers(0, nrows))  # where a column's mixed-in cells start
    rows = []
    for r in range(nrows):
        cells = []
        for kind, other in zip(kinds, others, strict=True):
            pick = other[0] if other and r >= late and rng.random() < 0.3 else kind
            cells.append(_cell(pick, rng, na))
        if rng.random() < 0.01:  # a row of another field count
            cells = cells[:-1] if len(cells) > 1 else cells * 2
        rows.append(sep.join(cells))
    if ncols == 1:  # one column: an empty cell would be an empty line
        rows = [r or b"z" for r in rows]
    end = b"\r\n" if rng.random() < 0.2 else b"\n"
    data = end.join(rows) + (end if rng.random() < 0.9 else b"")
    return [f"c{j}" for j in range(ncols)], data


def _read(path: Path, names: list[str], data: bytes, sep: bytes, **kw: Any) -> tuple[Any, ...]:
    head = sep.join(n.encode() for n in names) + b"\n"
    path.write_bytes(head + data)
    block = Block(str(path), "t.csv", "csv", len(head), len(head) + len(data))
    rejects: list[dict[str, Any]] = []
    got = read_block(block, kw["na"], rejects, kw["types"], sep.decode())
    return got, rejects


def _same(fast: pa.Table, slow: pa.Table) -> None:
    assert fast.schema == slow.schema
    for name in slow.column_names:
        a, b = fast.column(name).combine_chunks(), slow.column(name).combine_chunks()
        if pa.types.is_floating(a.type):  # bit for bit: -0.0, nan, the last bit of rounding
            assert a.is_null().equals(b.is_null()), name
            bits_a, bits_b = (np.asarray(x.fill_null(0.0)).view(np.uint64) for x in (a, b))
            assert np.array_equal(bits_a, bits_b), name
        else:
            assert a.equals(b), name


def test_the_c_path_reads_blocks_as_pyarrow(tmp_path: Path, monkeypatch: Any) -> None:
    rng = np.random.default_rng(40)
    taken = 0
    for i in range(600):
        sep = bytes(rng.choice([b",", b"\t", b";"]))
        na = [b"N/A", b"-"] if rng.random() < 0.3 else []
        names, data = _block(rng, sep, na)
        coded = {n: CODED for n in names if rng.random() < 0.15}
        na_text = [v.decode() for v in na]
        kw = {"na": na_text, "types": coded}
        path = tmp_path / f"{i}.csv"
        direct = table._fast_csv(data, names, sep.decode(), na_text, coded)
        fast, fast_rejects = _read(path, names, data, sep, **kw)
        with monkeypatch.context() as m:
            m.setattr(table, "fast_parse", None)
            try:
                slow, slow_rejects = _read(path, names, data, sep, **kw)
            except Exception:  # pyarrow refuses the block: so must the C path
                assert direct is None, data
                continue
        _same(fast, slow)
        assert fast_rejects == slow_rejects
        taken += direct is not None
    assert taken > 200  # the common blocks do take the C path


def test_what_the_c_path_leaves_to_pyarrow() -> None:
    parse = table._fast_csv
    assert parse(b"1,2\n3,4\n", ["a", "b"], ",", [], {}) is not None
    assert parse(b'"x",2\r\n"y",4', ["a", "b"], ",", [], {}) is not None
    for data in (b"1,2\n3\n", b"1,2\n\n3,4\n", b"1,2\r3,4\n", b'"a""b",1\n', b'"a\nb",1\n',
                 b"1,true\n", b"1, 2\n", b"1,inf\n", b"a,\xff\n", b"1,2,3\n"):  # fmt: skip
        assert parse(data, ["a", "b"], ",", [], {}) is None, data
    assert parse(b"1,\xff\n", ["a", "b"], ",", [], {"b": CODED}) is not None  # bytes kept
    got = parse(b"1,x\n2,inf\n-0,\n", ["a", "b"], ",", [], {})  # inf: text beside x
    assert got is not None and got.column("b").to_pylist() == ["x", "inf", None]


def test_packed_bytes_are_the_same_without_the_c_path(tmp_path: Path, monkeypatch: Any) -> None:
    rng = np.random.default_rng(1)
    n = 3000
    rows = [b"id,price,city,code,y"]
    for i in range(n):
        price = b"N/A" if i % 11 == 0 else _number(rng)
        city = rng.choice([b'"oslo"', b"rome", b"", b'"l\xc3\xadma"'])
        rows.append(b"%d,%s,%s,%d,%d" % (i, price, city, rng.integers(0, 50), i % 3))
    (tmp_path / "t.csv").write_bytes(b"\n".join(rows) + b"\n")
    outs = []
    for name, fast in (("fast", table.fast_parse), ("slow", None)):
        monkeypatch.setattr(table, "fast_parse", fast)
        out = tmp_path / name
        cfg = TableConfig(src=str(tmp_path / "t.csv"), out=str(out), jobs=2, target="y")
        cfg.na_values, cfg.categorical, cfg.val_fraction, cfg.shard_rows = "N/A", "code", 0.2, 1000
        pack_table(cfg, show_progress=False)
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir())
    assert len(names) > 5 and names == sorted(p.name for p in outs[1].iterdir())
    for name in names:
        a, b = ((o / name).read_bytes() for o in outs)
        assert a.replace(b"/fast", b"/o") == b.replace(b"/slow", b"/o"), name


def test_blocks_end_at_line_ends_outside_quotes(tmp_path: Path, monkeypatch: Any) -> None:
    """The cuts, with the C quote count and without: each block ends at a line end outside
    quotes, and the blocks tile the rows."""
    rng = np.random.default_rng(2)
    rows = [b"a,b"]
    for i in range(400):
        text = b'"line\nbreak, ""q"""' if rng.random() < 0.2 else b"plain"
        rows.append(b"%d,%s" % (i, text))
    path = tmp_path / "q.csv"
    path.write_bytes(b"\n".join(rows) + b"\n")
    got = []
    for count in (table.count_quotes, None):
        monkeypatch.setattr(table, "count_quotes", count)
        got.append([(b.start, b.end) for b in table.blocks("q.csv", path, block_bytes=300)])
    data = path.read_bytes()
    assert got[0] == got[1] and len(got[0]) > 10
    assert got[0][0][0] == len(rows[0]) + 1 and got[0][-1][1] == len(data)
    for (_, end), (start, _) in zip(got[0], got[0][1:], strict=False):
        assert end == start and data[end - 1 : end] == b"\n" and data.count(b'"', 0, end) % 2 == 0


def test_quote_count_across_its_runs_of_bytes() -> None:
    """The C count of '"' (runs of 255 x 64 bytes on byte-wide counters, then the tail) equals
    bytes.count at lengths around a run, from unaligned starts, and where every byte is one."""
    rng = np.random.default_rng(5)
    run = 255 * 64
    for n in (0, 1, 63, 64, run - 1, run, run + 1, 2 * run + 17, 100_003):
        data = rng.choice(np.frombuffer(b'ab,"\n', np.uint8), n).tobytes()
        for at in (0, 1, 7):
            assert table.count_quotes(memoryview(data)[at:]) == data[at:].count(b'"'), (n, at)
    assert table.count_quotes(b'"' * (3 * run + 5)) == 3 * run + 5  # no counter wraps


def test_values_alike_in_their_first_8_bytes_stay_apart() -> None:
    values = [b"prefix__%06d" % i for i in np.random.default_rng(3).permutation(3000)]
    data = b"".join(b"%s,%d\n" % (v, i) for i, v in enumerate(values * 2))
    got = table._fast_csv(data, ["t", "i"], ",", [], {})
    assert got is not None and got.column("t").to_pylist() == [v.decode() for v in values * 2]
    assert len(got.column("t").chunk(0).dictionary) == 3000
