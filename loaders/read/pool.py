"""Pool: the few threads of one process that decode a batch (loaders.read.decode, loaders.augment):
libjpeg-turbo, OpenCV and the augment kernels release the GIL, so two threads use two cores."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")  # what a pool's threads are given: jobs, or ranges of a batch


class Pool:
    """A few decode threads of one process, made on first use (never pickled, and made again
    in a forked child: threads do not survive a fork). Inside a DataLoader worker the worker
    decodes alone: the workers are the parallelism there."""

    def __init__(self, threads: int):
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()  # loader threads may share one dataset

    def map(self, fn: Callable[[Sequence[T]], None], jobs: Sequence[T]) -> None:
        from torch.utils.data import get_worker_info

        n = min(self.threads, len(jobs))
        if n <= 1 or get_worker_info() is not None:
            fn(jobs)
            return
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="prep-decode")
                self._pid = os.getpid()
        step = -(-len(jobs) // n)  # one contiguous chunk a thread: few futures a batch
        futures = [self._pool.submit(fn, jobs[i : i + step]) for i in range(0, len(jobs), step)]
        for fut in futures:
            fut.result()  # re-raises a FormatError of any sample

    def __getstate__(self) -> dict[str, object]:
        return {"threads": self.threads, "_pool": None, "_pid": 0}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())
