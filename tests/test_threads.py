"""Independent passes on threads: every job runs, in order per lane, and an error reaches the caller."""

from __future__ import annotations

import pytest

from moe_model.threads import Lanes, on_threads


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
