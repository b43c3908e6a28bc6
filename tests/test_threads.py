"""Independent passes on threads: every job runs, in order per lane, and an error reaches the caller; a cache that
computes a key once however many threads ask at once."""

from __future__ import annotations

import threading
import time

import pytest

from moe_model.threads import Lanes, cache_once, on_threads


def test_each_lane_runs_its_jobs_in_the_order_they_were_put(monkeypatch):
    monkeypatch.setattr("moe_model.threads.available_cores", lambda: 2)
    seen: dict[int, list[int]] = {0: [], 1: []}
    lanes = Lanes(2, lambda lane, i: seen[lane].append(i))
    for i in range(50):
        lanes.put(i % 2, (i % 2, i))
    lanes.close()
    assert seen == {0: list(range(0, 50, 2)), 1: list(range(1, 50, 2))}


@pytest.mark.parametrize("cores", [1, 2])
def test_an_error_in_a_lane_is_raised_by_close_or_the_next_put(monkeypatch, cores):
    monkeypatch.setattr("moe_model.threads.available_cores", lambda: cores)

    def job(i):
        if i == 3:
            raise ValueError("job 3 failed")

    lanes = Lanes(2, job)
    with pytest.raises(ValueError, match="job 3 failed"):
        for i in range(20):
            lanes.put(i % 2, (i,))
        lanes.close()


def test_on_threads_returns_the_results_in_the_jobs_order(monkeypatch):
    monkeypatch.setattr("moe_model.threads.available_cores", lambda: 2)
    assert on_threads(lambda a, b: a * b, [(i, 2) for i in range(9)]) == [2 * i for i in range(9)]


def test_cache_once_computes_a_key_once_while_the_other_threads_asking_wait_for_it():
    calls, started = [], threading.Barrier(4)

    @cache_once
    def slow(x):
        calls.append(x)
        time.sleep(0.2)  # the others ask while it runs
        return [x]

    def ask(out, i):
        started.wait()
        out[i] = slow(3)

    out = [None] * 4
    threads = [threading.Thread(target=ask, args=(out, i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [3] and all(o is out[0] for o in out)  # one computation, the same object for every caller
    assert slow(4) == [4] and calls == [3, 4]


def test_cache_once_keeps_no_failure_the_next_call_computes_again():
    attempts = []

    @cache_once
    def flaky(x):
        attempts.append(x)
        if len(attempts) == 1:
            raise ValueError("first try fails")
        return x

    with pytest.raises(ValueError):
        flaky(1)
    assert flaky(1) == 1 and flaky(1) == 1 and attempts == [1, 1]


def test_cache_once_a_failure_wakes_the_waiting_threads_and_one_of_them_computes():
    calls, started, release = [], threading.Event(), threading.Event()

    @cache_once
    def first_fails(x):
        calls.append(x)
        if len(calls) == 1:
            started.set()
            release.wait()  # the other threads ask while the first computation runs
            raise ValueError("first try fails")
        return [x]

    out, failed = [None] * 3, []

    def ask(i):
        try:
            out[i] = first_fails(5)
        except ValueError:
            failed.append(i)

    threads = [threading.Thread(target=ask, args=(0,))]
    threads[0].start()
    started.wait()
    threads += [threading.Thread(target=ask, args=(i,)) for i in (1, 2)]
    for t in threads[1:]:
        t.start()
    time.sleep(0.1)  # both are waiting now
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)  # nobody left waiting
    assert failed == [0] and calls == [5, 5] and out[1] is out[2] == [5]  # one retry, its answer shared


def test_a_worker_pools_jobs_see_their_submitters_watch_and_none_starts_once_it_is_stopped(monkeypatch):
    from moe_model.progress import Watch, WorkStoppedError, checkpoint, watching
    from moe_model.threads import worker_pool

    monkeypatch.setattr("moe_model.threads.available_cores", lambda: 2)
    watch = Watch()
    with watching(watch), worker_pool(2) as pool:
        assert pool is not None
        pool.submit(checkpoint, "on the pool", 1, 2).result()
        assert (watch.step, watch.done) == ("on the pool", 1)
        watch.stop.set()
        ran = []
        with pytest.raises(WorkStoppedError):
            pool.submit(ran.append, "a job submitted once its caller stopped").result()
        assert not ran


def test_lanes_told_to_drop_their_queued_jobs_finish_the_running_one_and_run_no_other(monkeypatch):
    monkeypatch.setattr("moe_model.threads.available_cores", lambda: 2)
    running, gate, ran = threading.Event(), threading.Event(), []

    def job(i):
        running.set()
        gate.wait(10)
        ran.append(i)

    lanes = Lanes(2, job)
    lanes.put(0, (0,))
    assert running.wait(10)
    for i in (1, 2, 3):
        lanes.put(0, (i,))
    lanes.drop_queued()  # their producer was stopped (simulate_plans at a checkpoint)
    gate.set()
    lanes.close()
    assert ran == [0]
