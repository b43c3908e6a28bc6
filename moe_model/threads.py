"""Independent compiled passes on every core: the kernels release the GIL (numba nogil), so threads run
them at once (the groups of a model, the budgets of a policy). One core, or one job: run inline."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager

from moe_model.limits import available_cores


@contextmanager
def worker_pool(n_jobs: int) -> Iterator[Executor | None]:
    """A pool of min(n_jobs, cores) threads, or None where that is one."""
    n = min(n_jobs, available_cores())
    if n < 2:
        yield None
        return
    with ThreadPoolExecutor(n) as pool:
        yield pool


def run_all(pool: Executor | None, fn: Callable, jobs: Sequence[tuple]) -> list:
    """fn(*job) for every job, on the pool's threads when there is one; results in the jobs' order."""
    if pool is None or len(jobs) < 2:
        return [fn(*job) for job in jobs]
    return [f.result() for f in [pool.submit(fn, *job) for job in jobs]]


def on_threads(fn: Callable, jobs: Sequence[tuple]) -> list:
    """run_all on a pool made for these jobs alone."""
    with worker_pool(len(jobs)) as pool:
        return run_all(pool, fn, jobs)
