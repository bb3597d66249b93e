"""Running shard tasks on a backend (`--backend`: threads, loky processes, dask; docs/machines.md),
with a progress bar. dask tasks go through `Client.submit`: joblib's dask backend (1.6) waits
forever on a task whose worker died."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import queue
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prep.run.errors import PrepError

T = TypeVar("T")

BACKENDS = ("auto", "threads", "loky", "dask")
DASK_HINT = "HINT: pip install 'prep[dask]' (dask[distributed]) on the client and every worker"
CONNECT_TIMEOUT_S = 30  # an unreachable scheduler: retry connecting this long, then fail
WAIT_FOR_WORKERS_S = 60  # a scheduler with no worker yet: wait this long, then fail


def check_backend(backend: str) -> None:
    """Fail before any work starts on --backend dask without dask[distributed]."""
    if backend == "dask":
        try:
            import distributed  # noqa: F401
        except ImportError as e:
            raise PrepError(f"--backend dask needs dask[distributed] ({e}). {DASK_HINT}") from e


def run_tasks(
    fn: Callable[..., T],
    args: list[tuple[Any, ...]],
    n_jobs: int,
    backend: str = "loky",
    scheduler: str | None = None,
) -> Iterator[T]:
    """`fn(*a)` for each a on `backend`, yielded as they finish; one job or task: here (not
    on dask)."""
    check_backend(backend)
    if not args:
        return
    if backend == "dask":
        yield from _run_dask(fn, args, n_jobs, scheduler)
    elif n_jobs == 1 or len(args) <= 1:
        yield from (fn(*a) for a in args)
    elif backend == "threads":
        yield from _run_threads(fn, args, n_jobs)
    else:
        from joblib import Parallel, delayed

        jobs = min(n_jobs, len(args))
        yield from Parallel(n_jobs=jobs, backend=backend, return_as="generator_unordered")(
            delayed(fn)(*a) for a in args
        )


class _Stop(BaseException):
    """Raised inside a task thread to end it: the run stopped (Ctrl-C, another task failed)."""


_core = threading.local()  # in a task thread of _run_threads: `slots`, the cores it may run on


@contextlib.contextmanager
def core_lent() -> Iterator[None]:
    """Around a task's wait on the disk (a shard's fsyncs): on the threads backend another task
    runs on its core meanwhile, and it takes one back after; elsewhere nothing. At 180 photos
    and -j 2 a pack's 12 shards waited 0.16-0.43 s in all, of runs of 1.9-2.8 s."""
    slots = getattr(_core, "slots", None)
    if slots is None:
        yield
        return
    slots.release()
    try:
        yield
    finally:
        slots.acquire()


def _run_threads(fn: Callable[..., T], args: list[tuple[Any, ...]], n_jobs: int) -> Iterator[T]:
    """Tasks in order on threads, `n_jobs` of them running at once and as many waiting on the
    disk (core_lent). When the caller stops, each running task gets `_Stop` raised at its next
    Python line, so that its cleanup runs; all end before return."""
    todo = collections.deque(args)  # popleft() is atomic: each task is taken once
    done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    stopping = threading.Event()
    busy: dict[int, bool] = {}  # thread id -> running a task (a dict item set is atomic)
    slots = threading.Semaphore(n_jobs)

    def work() -> None:
        me = threading.get_ident()
        busy[me], _core.slots = False, slots
        try:
            while not stopping.is_set():
                with slots:
                    if stopping.is_set():
                        return
                    try:
                        a = todo.popleft()
                    except IndexError:
                        return
                    busy[me] = True
                    try:
                        done.put((True, fn(*a)))
                    except BaseException as e:  # handed to the caller, raised there
                        stopping.set()  # before the core is free: no thread takes a task
                        done.put((False, e))
                        return
                    busy[me] = False
        except _Stop:  # between two tasks
            return

    n = min(2 * n_jobs, len(args))
    threads = [threading.Thread(target=work, name=f"prep-task-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        for _ in args:
            ok, value = done.get()
            if not ok:
                raise value
            yield value
    finally:
        stopping.set()
        slots.release(n)  # the threads waiting for a core see the stop
        for ident, running in list(busy.items()):
            if running:
                stop = ctypes.py_object(_Stop)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), stop)
        for t in threads:
            t.join()


def _run_dask(
    fn: Callable[..., T], args: list[tuple[Any, ...]], n_jobs: int, scheduler: str | None
) -> Iterator[T]:
    from distributed import Client, KilledWorker, LocalCluster, as_completed

    run = uuid.uuid4().hex[:8]  # keys must be unique on a long-lived scheduler
    with contextlib.ExitStack() as stack:
        if scheduler:
            try:
                client = stack.enter_context(
                    Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
                )
            except OSError as e:  # refused, unreachable, timed out
                raise PrepError(
                    f"cannot reach the dask scheduler {scheduler}: {e}. HINT: start one with "
                    "`dask scheduler` and pass the tcp://HOST:PORT it prints, or drop "
                    "--scheduler to start a LocalCluster here"
                ) from e
        else:
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=max(1, min(n_jobs, len(args))),
                    threads_per_worker=1,  # one task per core, as loky
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,  # no dashboard; its health routes on a free port:
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                )
            )
            client = stack.enter_context(Client(cluster, set_as_default=False))
        try:
            client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
        except TimeoutError as e:
            raise PrepError(
                f"no dask worker joined {scheduler} in {WAIT_FOR_WORKERS_S} s. HINT: start "
                f"workers with `dask worker {scheduler}` on machines that see the same paths"
            ) from e
        futures = [
            client.submit(fn, *a, key=f"prep-{run}-{i:05d}", pure=False) for i, a in enumerate(args)
        ]
        try:
            for future in as_completed(futures, loop=client.loop):
                try:
                    result = future.result()
                except KilledWorker as e:
                    raise PrepError(
                        f"the workers running {future.key} kept dying (killed, or out of "
                        f"memory): {e} Finished tasks are kept. HINT: check the workers' logs "
                        "and memory, then rerun the same command with --resume"
                    ) from e
                future.release()
                yield result
        finally:
            client.cancel(futures)  # when stopped early: drop what has not started


class _NoBar:
    """What a progress bar that shows nothing does (tqdm and multiprocessing not imported)."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def progress(total: int, unit: str, desc: str, show: bool = True) -> Any:
    """A tqdm bar on stderr where it is a terminal and `show`; else one that shows nothing
    (tqdm's import is 20 ms of a one-image pack: issue 40)."""
    if not show or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, dynamic_ncols=True, leave=False)
