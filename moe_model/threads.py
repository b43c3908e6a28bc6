"""Independent compiled passes on every core: the kernels release the GIL (numba nogil), so threads run
them at once (the groups of a model, the budgets of a policy). One core, or one job: run inline."""

from __future__ import annotations

import contextvars
import functools
import queue
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager

from moe_model.limits import LANE_QUEUE_JOBS, available_cores
from moe_model.progress import checkpoint


class _CallersContext(ThreadPoolExecutor):
    """Each job runs in a copy of its submitter's context: a watched caller's checkpoints (moe_model.progress) reach
    the work it hands to the pool, so a stopped page stops its replays too, and a job not started by then never
    starts."""

    def submit(self, fn: Callable, /, *args, **kwargs):
        return super().submit(contextvars.copy_context().run, _checked, fn, *args, **kwargs)


def _checked(fn: Callable, *args, **kwargs):
    checkpoint()
    return fn(*args, **kwargs)


@contextmanager
def worker_pool(n_jobs: int) -> Iterator[Executor | None]:
    """A pool of min(n_jobs, cores) threads (each job in its submitter's context), or None where that is one."""
    n = min(n_jobs, available_cores())
    if n < 2:
        yield None
        return
    with _CallersContext(n) as pool:
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


class Lanes:
    """One thread per lane running fn(*job) on the jobs put to that lane, in order, each lane at its own pace:
    a lane holds at most LANE_QUEUE_JOBS jobs (put waits), so the producer runs ahead by that much and no lane
    waits for another (independent kernel passes fed the same chunks). With one lane or one core, put runs
    the job at once. `close()` waits for every lane and raises the first error a job raised."""

    def __init__(self, n_lanes: int, fn: Callable) -> None:
        self.fn, self.errors, self.dropping = fn, [], False
        threaded = n_lanes > 1 and available_cores() > 1
        self.queues = [queue.Queue(LANE_QUEUE_JOBS) for _ in range(n_lanes)] if threaded else []
        self.threads = [threading.Thread(target=self._run, args=(q,), daemon=True) for q in self.queues]
        for t in self.threads:
            t.start()

    def _run(self, jobs: queue.Queue) -> None:
        while (job := jobs.get()) is not None:
            if not self.errors and not self.dropping:  # after an error (or drop_queued) the rest is drained, not run
                try:
                    self.fn(*job)
                except BaseException as err:  # noqa: BLE001 - handed to the producer by close()
                    self.errors.append(err)

    def put(self, lane: int, job: tuple) -> None:
        if self.errors:
            self.close()
        if self.queues:
            self.queues[lane].put(job)
        else:
            self.fn(*job)

    def drop_queued(self) -> None:
        """The jobs still queued are drained, not run (their producer stopped: nobody waits for what they make)."""
        self.dropping = True

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for t in self.threads:
            t.join()
        self.queues, self.threads = [], []
        if self.errors:
            raise self.errors[0]


class SingleFlight:
    """Per key, one computation at a time: a caller that finds one running waits for it and then looks again (the
    value kept by then is its answer; after a failure, or a value not kept, one of the waiters computes). Sessions
    asking for the same first answer at once would otherwise each compute it, fighting over the GIL."""

    def __init__(self) -> None:
        self._running: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()  # held around a lookup and the running set, never around a computation

    def get(self, key: Hashable, lookup: Callable[[], tuple[bool, object]], compute: Callable[[], object]) -> object:
        """lookup() -> (found, value); compute() computes and keeps the value (or not) before returning it."""
        while True:
            with self._lock:
                found, value = lookup()
                if found:
                    return value
                running = self._running.get(key)
                if running is None:
                    running = self._running[key] = threading.Event()
                    break
            running.wait()
        try:
            return compute()
        finally:
            with self._lock:
                del self._running[key]
            running.set()


def cache_once(fn: Callable) -> Callable:
    """functools.cache whose key is computed once when several threads ask for it at the same time (SingleFlight:
    five first calls of a 1 s routing curve took 7.5 s with functools.cache). A failure is not kept.
    Not reentrant: `fn` asking for its own key would wait for itself."""
    results: dict[tuple, object] = {}
    flights = SingleFlight()

    def computed(args: tuple) -> object:
        results[args] = value = fn(*args)
        return value

    @functools.wraps(fn)
    def cached(*args):
        return flights.get(args, lambda: (args in results, results.get(args)), lambda: computed(args))

    return cached
