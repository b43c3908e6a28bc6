"""A page's long work off the script thread (ui/background.py): shared by the sessions asking for it, kept in the
store once done, and stopped once no session wants it (another key in its slot, another page, a closed session)."""

from __future__ import annotations

import threading
import time

import pytest

from moe_model.progress import WorkStoppedError, checkpoint
from ui import background
from ui.cached import app_cached


@app_cached()
def _square(x: int, _gate: threading.Event) -> int:
    checkpoint("waiting for the gate", 0, 1)
    _gate.wait(10)
    return x * x


@app_cached()
def _until_stopped(x: int, _started: threading.Event) -> int:
    _started.set()
    while True:  # only a stop ends it
        checkpoint("spinning")
        time.sleep(0.01)


@pytest.fixture
def sessions(monkeypatch):
    """Fresh registries and the asking session's id, set by the test."""
    for name in ("_JOBS", "_WANTED", "_PAGE"):
        monkeypatch.setattr(background, name, {})
    asking = ["a"]
    monkeypatch.setattr(background, "_session_id", lambda: asking[0])
    return asking


def test_work_runs_off_the_asking_thread_and_is_then_found_in_the_store(sessions):
    gate = threading.Event()
    job = background.start("slot", _square, 3, gate)
    assert not job.future.done()
    gate.set()
    assert background.awaited(job, "squaring") == 9
    assert background.start("slot", _square, 3, gate).future.result(timeout=0) == 9
    assert not background._JOBS


def test_work_is_shared_and_stopped_only_once_no_session_wants_it(sessions):
    started = threading.Event()
    first = background.start("curve", _until_stopped, 1, started)
    sessions[0] = "b"
    assert background.start("curve", _until_stopped, 1, started) is first and started.wait(10)
    sessions[0] = "a"
    background.on_page("logs")  # a goes to another page: b still wants it
    time.sleep(0.1)
    assert not first.future.done() and first.owners == {"b"}
    sessions[0] = "b"
    second = background.start("curve", _until_stopped, 2, threading.Event())  # b's slot now wants another key
    with pytest.raises(WorkStoppedError):
        first.future.result(timeout=10)
    assert not _until_stopped.is_cached(1, started)
    background._forget_closed_sessions(lambda sid: sid != "b")  # b's tab closed
    with pytest.raises(WorkStoppedError):
        second.future.result(timeout=10)
    assert not background._JOBS and "b" not in background._WANTED


_RAN: list[int] = []


@app_cached()
def _noted(x: int) -> int:
    _RAN.append(x)
    return x


def test_work_released_while_queued_never_starts(sessions):
    gates = [threading.Event(), threading.Event()]
    busy = [background.start(f"busy{i}", _square, 10 + i, gate) for i, gate in enumerate(gates)]  # every worker
    queued = background.start("queued", _noted, 7)
    background.keep_only("queued")  # the page no longer asks for it
    for gate in gates:
        gate.set()
    assert [job.future.result(timeout=10) for job in busy] == [100, 121]
    with pytest.raises(WorkStoppedError):
        queued.future.result(timeout=10)
    assert 7 not in _RAN


def test_keep_only_releases_the_slots_a_run_no_longer_asks_for_or_asks_at_another_key(sessions):
    started = threading.Event()
    kept, other_key, dropped = (background.start(f"page:{i}", _until_stopped, i, started) for i in range(3))
    background.start("elsewhere", _until_stopped, 9, started)
    wanted = {"page:0": _until_stopped.key_of(0, started), "page:1": _until_stopped.key_of(5, started)}
    background.keep_only("page:", wanted)
    for job in (other_key, dropped):
        with pytest.raises(WorkStoppedError):
            job.future.result(timeout=10)
    assert not kept.future.done() and set(background._WANTED["a"]) == {"page:0", "elsewhere"}
    background.on_page("learn")
