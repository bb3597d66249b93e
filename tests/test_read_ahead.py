"""prep tokenize reads the next batch on a thread (prep.kinds.text.shard.read_ahead): the
batches in order, a reading error raised in the caller after the batches before it, and a
caller that stops early leaving no thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from prep.kinds.text.shard import read_ahead


def numbered(n: int, fail_at: int | None = None) -> Iterator[tuple[list[str], list[str]]]:
    for i in range(n):
        if i == fail_at:
            raise OSError(f"cannot read batch {i}")
        yield [f"text {i}"], [f"file{i}.txt"]


def test_batches_in_order_and_errors_after_the_batches_before() -> None:
    assert [texts for texts, _ in read_ahead(numbered(50))] == [[f"text {i}"] for i in range(50)]
    seen = []
    with pytest.raises(OSError, match="batch 3"):
        for texts, _ in read_ahead(numbered(10, fail_at=3)):
            seen.append(texts[0])
    assert seen == ["text 0", "text 1", "text 2"]


def test_a_caller_that_stops_early_stops_the_thread() -> None:
    before = threading.active_count()
    batches = read_ahead(numbered(1000))
    assert next(batches)[0] == ["text 0"]
    batches.close()  # what a failed encode does: the generator is closed
    assert threading.active_count() == before
