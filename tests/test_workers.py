"""Workers send a batch's small tensors (a ragged field's tensor a sample, padded boxes, lengths,
labels) in one reused shared buffer: batches equal those of 0 workers, epoch after epoch."""

from __future__ import annotations

import collections
import gc
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

from loaders import SampleDataset, make_loader
from loaders.read.ring import HEADER, SPARE, spare_limit
from loaders.read.workers import pack
from prep.kinds.importers.coco import import_coco
from prep.kinds.importers.config import CocoConfig

FIELDS = ("image", "boxes", "labels", "index")


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve 32 x 32 images with 0 to 5 boxes each (image i: i % 6 boxes)."""
    root = tmp_path_factory.mktemp("workers")
    images, anns = [], []
    for i in range(12):
        pixels = np.full((32, 32, 3), 20 * i, np.uint8)
        for k in range(i % 6):
            x, y, w, h = 2 + 4 * k, 3 + k, 5, 6 + (i % 3)
            pixels[y : y + h, x : x + w] = 255
            ann = {"id": 100 * i + k, "image_id": i, "category_id": 1 + k % 2, "bbox": [x, y, w, h]}
            anns.append(ann | {"area": w * h, "iscrowd": 0})
        PILImage.fromarray(pixels).save(root / f"{i}.png")
        images.append({"id": i, "file_name": f"{i}.png", "width": 32, "height": 32})
    cats = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    src = root / "coco.json"
    src.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    out = root / "packed"
    cfg = CocoConfig(src=str(src), images=str(root), out=str(out), sizes=[32], jobs=1)
    import_coco(cfg, show_progress=False)
    return out


def equal(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            equal(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            equal(x, y)
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("ragged", ["list", "pad"])
def test_worker_batches_equal_those_of_no_workers(coco: Path, ragged: str) -> None:
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged=ragged)
    plain = make_loader(ds, batch_size=5, shuffle=True, seed=3)
    loader = make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)
    for _epoch in range(3):  # the rings' segments reused: still the same values (a new order)
        want, got = list(plain), list(loader)
        equal(want, got)
    if ragged == "list":  # 0 to 5 boxes a sample, each sample's tensor (n, 4)
        sizes = [len(b) for batch in got for b in batch["boxes"]]
        assert sorted(sizes) == sorted(i % 6 for i in range(12))
        # one buffer a batch: the samples' tensors are views of one storage, not 5 files
        batch = got[0]["boxes"]
        assert len({t.untyped_storage().data_ptr() for t in batch}) == 1


def test_pack_keeps_what_it_cannot_move() -> None:
    """Values in plain containers are moved (views of one buffer); others kept as they are."""
    got: list[torch.Tensor] = []

    def alloc(key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        got.append(torch.zeros(shape, dtype=dtype))
        return got[-1]

    data = {
        "boxes": [torch.arange(8.0).view(2, 4), torch.zeros(0, 4), torch.ones(1, 4)],
        "lens": torch.tensor([2, 0, 1]),
        "flags": torch.tensor([True, False]),
        "text": ["a", "b"],
        "t": torch.arange(6).view(2, 3).t(),  # not contiguous
        "mixed": [torch.zeros(2, 3), torch.ones(1, 4)],  # not one field's: a tensor each
    }
    packed = pack(data, alloc, lambda t: False)
    # One buffer (a power of two) of 6 tensors: the boxes end to end as one (3, 4) tensor
    # (issue 40: a ragged field one flat tensor and its lengths), then lens, flags, t, mixed.
    assert len(got) == 1 and got[0].numel() >= 6 * 64
    assert [dims for _, _, dims in packed.where] == [(3, 4), (3,), (2,), (3, 2), (2, 3), (1, 4)]
    out = packed.unpack(packed.buf)
    equal(data, out)
    assert out["boxes"][2].data_ptr() - out["boxes"][0].data_ptr() == 2 * 4 * 4  # end to end
    assert pack({"text": ["a"]}, alloc, lambda t: False) == {"text": ["a"]}


def test_workers_capped_by_the_cores_this_process_may_use(coco: Path) -> None:
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged="list")
    cores = len(os.sched_getaffinity(0))
    with pytest.warns(UserWarning, match=rf"num_workers={cores + 3} on the {cores} cores") as said:
        loader = make_loader(ds, batch_size=5, num_workers=cores + 3)
    assert loader.num_workers == cores
    assert len(said) == 1 and said[0].filename == __file__  # the line names the caller's call
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as many workers as cores: nothing said
        assert make_loader(ds, batch_size=5, num_workers=cores).num_workers == cores


def test_workers_persistent_unless_said(coco: Path) -> None:
    ds = SampleDataset(coco, fields=FIELDS, size=32)
    assert make_loader(ds, batch_size=5, num_workers=1).persistent_workers
    said = make_loader(ds, batch_size=5, num_workers=1, persistent_workers=False)
    assert not said.persistent_workers
    assert not make_loader(ds, batch_size=5).persistent_workers  # no workers to keep


def shared(batch: Any) -> list[torch.Tensor]:
    """The tensors of `batch` in shared memory (a worker's segment, not copied out)."""
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in shared(v)]
    if isinstance(batch, list | tuple):
        return [t for v in batch for t in shared(v)]
    return [batch] if torch.is_tensor(batch) and batch.is_shared() else []


def segment(t: torch.Tensor) -> int:
    """Which shared-memory file `t` lies in (the main process may map one file twice)."""
    return os.fstat(t.untyped_storage()._share_fd_cpu_()[0]).st_ino


def segments(loader: Any) -> set[int]:
    return {s.data_ptr() for s in loader.seen}


def test_ragged_batches_held_keep_their_values(coco: Path) -> None:
    """A batch with a ragged field's list (its small tensors packed): handed out in the
    workers' segments, never written again while held; let go, each worker reuses its few."""
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged="list")
    plain = make_loader(ds, batch_size=2, shuffle=True)
    want = [list(plain) for _ in range(6)]
    loader = make_loader(ds, batch_size=2, shuffle=True, num_workers=2)
    held = list(loader)  # epoch 0, held while epochs 1 and 2 are read
    for epoch in (1, 2):
        equal(want[epoch], list(loader))
    equal(want[0], held)
    del held
    pixels = set()
    for epoch in (3, 4, 5):
        for k, batch in enumerate(loader):
            equal(want[epoch][k], batch)
            pixels.add(segment(batch["image"]))
    assert shared(batch)  # handed out as the workers made them
    assert len(pixels) <= 2 * 4  # 18 batches from rings of 4 in 2 workers


def test_a_batch_sent_to_another_process_is_never_written_again(coco: Path) -> None:
    """The receiving process's hold cannot be counted here: a segment sent on is theirs."""
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged="pad")
    loader = make_loader(ds, batch_size=2, shuffle=True, num_workers=2)
    context = torch.multiprocessing.get_context("fork")
    queue, done, back = context.SimpleQueue(), context.Event(), context.SimpleQueue()
    child = context.Process(target=_hold, args=(queue, done, back))
    child.start()
    batch = next(iter(loader))
    sent, want = batch["image"], batch["image"].clone()
    queue.put(sent)
    del batch, sent
    for _epoch in range(2):  # its worker makes other batches meanwhile
        for _batch in loader:
            pass
    done.set()
    assert np.array_equal(back.get(), want.numpy())
    child.join(timeout=30)


def _hold(queue: Any, done: Any, back: Any) -> None:
    image = queue.get()
    done.wait(timeout=60)
    back.put(image.numpy().copy())  # an array: a tensor would be sent by its shared memory


PIXELS = (HEADER + 5 * 32 * 32 * 3, HEADER + 2 * 32 * 32 * 3)


def test_fresh_loaders_reuse_the_segments_of_workers_gone(coco: Path) -> None:
    """Workers shut down leave their segments to the next loader's workers: the same memory,
    the same batches; never the segments of workers still running."""
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged="list")
    plain = make_loader(ds, batch_size=5, shuffle=True, seed=3)
    want, then = list(plain), list(plain)  # epochs 0 and 1
    running = make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)
    equal(want, list(running))
    before: set[int] = set()
    for _loader in range(3):
        fresh = make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)
        equal(want, list(fresh))
        assert not segments(fresh) & segments(running)  # a running worker's: never lent
        # Each worker's pixels (batches of 5, 5, 2: worker 0 makes 0 and 2) in the segments of
        # the worker of its id before (how many of the packed rest: as the copies kept pace).
        now = {s.data_ptr() for s in fresh.seen if s.nbytes() in PIXELS}
        assert len(now) == 3 and (not before or now == before)
        before = now
        del fresh
        gc.collect()  # its workers shut down: their segments spare
    equal(then, list(running))
    early = make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)
    next(iter(early))  # left with batches in flight: their segments let go
    del early
    gc.collect()
    equal(want, list(make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)))


def test_a_last_batch_held_past_its_loader_is_lent_once_let_go(coco: Path) -> None:
    """A loader's workers shut down while the caller holds its last batch: the next loader's
    workers never write that batch's segments; once it is let go, the loader after reuses
    them (a new segment costs its pages made and zeroed, issue 40)."""
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged="list")
    gc.collect()
    SPARE.lend(1)  # the spare segments of the tests before, of the same sizes: dropped

    def fresh() -> Any:
        return make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)

    want = list(make_loader(ds, batch_size=5, shuffle=True, seed=3))
    first = fresh()
    batch = collections.deque(first, maxlen=1).pop()  # the last, held
    kept = batch["image"].clone()
    held = batch["image"].untyped_storage().data_ptr()
    del first
    gc.collect()  # its workers shut down: the caller holds their last batch
    second = fresh()
    equal(want, list(second))
    assert held not in segments(second)
    equal(kept, batch["image"])  # never written while held
    del second, batch
    gc.collect()  # let go
    third = fresh()
    equal(want, list(third))
    assert held in segments(third)


def test_a_last_batch_held_past_its_loader_then_sent_on_is_never_lent(coco: Path) -> None:
    """Its segment kept spare, then sent to another process: theirs, never lent again."""
    ds = SampleDataset(coco, fields=FIELDS, size=32, ragged="list")
    context = torch.multiprocessing.get_context("fork")
    queue, done, back = context.SimpleQueue(), context.Event(), context.SimpleQueue()
    child = context.Process(target=_hold, args=(queue, done, back))
    child.start()
    first = make_loader(ds, batch_size=5, shuffle=True, seed=3, num_workers=2)
    batch = collections.deque(first, maxlen=1).pop()
    del first
    gc.collect()  # kept spare, held by the caller
    sent, want = batch["image"], batch["image"].clone()
    queue.put(sent)
    del batch, sent
    for seed in (4, 5):  # other batches, in what is free meanwhile
        list(make_loader(ds, batch_size=5, shuffle=True, seed=seed, num_workers=2))
        gc.collect()
    done.set()
    assert np.array_equal(back.get(), want.numpy())
    child.join(timeout=30)


def test_spare_segments_keep_at_most_a_quarter_of_shared_memory(tmp_path: Path) -> None:
    """SPARE's limit: its `most`, or a quarter of the filesystem it lives in where that is less
    (a container's 64 MB /dev/shm keeps no 48 MB batch), none where there is no such folder."""
    st = os.statvfs(tmp_path)
    quarter = st.f_blocks * st.f_frsize // 4
    assert spare_limit(most=10, path=str(tmp_path)) == 10
    assert spare_limit(most=quarter * 8, path=str(tmp_path)) == quarter
    assert spare_limit(path=str(tmp_path / "no-such-folder")) == 0
