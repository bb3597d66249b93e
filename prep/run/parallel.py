"""Running tasks in parallel and showing progress: shared by every long command.

Backends (`--backend`):

- `loky` (default): joblib worker processes on this machine.
- `dask`: a `distributed` cluster, at `--scheduler ADDRESS` or, with no address, a `LocalCluster`
  of `--jobs` worker processes started here for the run. Every task runs on a worker; tasks read
  and write paths that every worker must see (a shared file system) and only their small return
  values travel back. A task whose worker dies is rerun on another worker (dask's
  `distributed.scheduler.allowed-failures`, 3 by default); past that the run stops with a
  PrepError, and the caller's --resume finishes it.

The dask tasks are submitted with `Client.submit`, not through joblib's dask backend, which
(joblib 1.6) waits forever for a task whose worker died when results are returned as a
generator, and runs every task in the client when the cluster has a single worker thread.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prep import PrepError

T = TypeVar("T")

BACKENDS = ("loky", "dask")
DASK_HINT = "HINT: pip install 'prep[dask]' (dask[distributed]) on the client and every worker"
CONNECT_TIMEOUT_S = 30  # an unreachable scheduler: retry connecting this long, then fail
WAIT_FOR_WORKERS_S = 60  # a scheduler with no worker yet: wait this long, then fail


def check_backend(backend: str, scheduler: str | None) -> None:
    """Fail before any work starts on a backend that cannot run; imports dask only for dask."""
    if backend not in BACKENDS:
        raise PrepError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if scheduler and backend != "dask":
        raise PrepError(f"--scheduler {scheduler} needs the dask backend. HINT: add --backend dask")
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
    """Run `fn(*a)` for each a on `backend`, yielding results as they finish (in any order).

    With loky and one job (or one task) everything runs in this process: no pickling, easy to
    debug. With dask every task runs on the cluster, even one: the client only plans and gathers.
    """
    check_backend(backend, scheduler)
    if not args:
        return
    if backend == "dask":
        yield from _run_dask(fn, args, n_jobs, scheduler)
        return
    from joblib import Parallel, delayed

    if n_jobs == 1 or len(args) <= 1:
        yield from (fn(*a) for a in args)
        return
    parallel = Parallel(
        n_jobs=min(n_jobs, len(args)), backend=backend, return_as="generator_unordered"
    )
    yield from parallel(delayed(fn)(*a) for a in args)


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


def progress(total: int, unit: str, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total, unit=unit, desc=desc, dynamic_ncols=True, leave=False, disable=None
    )  # None: off when stderr is not a terminal


class ShardProgress:
    """One bar for a run of shard tasks: items with rate and ETA, and shards done as a postfix."""

    def __init__(self, items: int, shards: int, unit: str, desc: str) -> None:
        self.bar = progress(items, unit, desc)
        self.shards, self.done = shards, 0
        self.bar.set_postfix_str(f"0/{shards} shards")

    def shard_done(self, items: int) -> None:
        """One more shard finished, holding `items` inputs (packed or rejected)."""
        self.done += 1
        self.bar.set_postfix_str(f"{self.done}/{self.shards} shards", refresh=False)
        self.bar.update(items)

    def close(self) -> None:
        self.bar.close()
