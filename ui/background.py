"""A page's long work (Explore's curve, best setting and policy comparison; Shopping's cards) off the script thread:
the page draws its answer first and then waits for the rest with a progress bar, so a control changed meanwhile
reruns at once. The work is shared by every session asking for the same key (its result goes to ui.cached's STORE)
and stopped, at its next moe_model.progress checkpoint, once no session wants it: each session wants one key per slot
(a new -np replaces the old curve), a session that goes to another page wants none of its pages' work, and a closed
session nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from moe_model.limits import APP_PAGE_WORKERS, APP_PROGRESS_S, APP_SESSION_LOOK_S
from moe_model.progress import Watch, WorkStoppedError, checkpoint, watching
from ui.cached import STORE, wait_for_kernels

_POOL = ThreadPoolExecutor(APP_PAGE_WORKERS, thread_name_prefix="page-work")


@dataclass(eq=False)
class Job:
    """One key being computed: who wants it, and what it has done so far (its Watch)."""

    key: tuple
    future: Future
    watch: Watch = field(default_factory=Watch)
    owners: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)


_JOBS: dict[tuple, Job] = {}
_WANTED: dict[str, dict[str, tuple]] = {}  # session id -> slot -> the key it wants there
_PAGE: dict[str, str] = {}  # session id -> the page of its last run
_LOCK = threading.Lock()  # guards the three dictionaries, never a computation
_LOOKING = threading.Event()


def _session_id() -> str | None:
    ctx = get_script_run_ctx(suppress_warning=True)
    return None if ctx is None else ctx.session_id


def on_page(page: str) -> None:
    """Each run, before its page (app.py): a session now on another page stops wanting its last page's work."""
    sid = _session_id()
    if sid is None:
        return
    with _LOCK:
        if _PAGE.get(sid) != page:
            _PAGE[sid] = page
            for slot in list(_WANTED.get(sid, {})):
                _release(sid, slot)


def keep_only(prefix: str, wanted: Mapping[str, tuple] | None = None) -> None:
    """Of its session's slots under `prefix`, this run wants only `wanted`'s, each at its key (an app_cached key_of):
    the others are released at once, before the page waits for any (a card taken off the list or asked at another
    request, a block switched off), so that no work it will not wait for goes on."""
    sid, wanted = _session_id() or "-", wanted or {}
    with _LOCK:
        mine = _WANTED.get(sid, {})
        for slot in [s for s, key in mine.items() if s.startswith(prefix) and wanted.get(s) != key]:
            _release(sid, slot)


def _release(sid: str, slot: str) -> None:
    """The session no longer wants its slot's key; work nobody wants is stopped (lock held)."""
    job = _JOBS.get(_WANTED.get(sid, {}).pop(slot, None))
    if job is None:
        return
    job.owners.discard(sid)
    if not job.owners:
        job.watch.stop.set()
        del _JOBS[job.key]


def _forget_closed_sessions(is_active: Callable[[str], bool]) -> None:
    with _LOCK:
        for sid in [s for s in _WANTED if not is_active(s)]:
            for slot in list(_WANTED[sid]):
                _release(sid, slot)
            _WANTED.pop(sid, None)
            _PAGE.pop(sid, None)


def _look_for_closed_sessions() -> None:
    from streamlit.runtime import Runtime

    while True:
        time.sleep(APP_SESSION_LOOK_S)
        if Runtime.exists():
            _forget_closed_sessions(Runtime.instance().is_active_session)


def _run(job: Job, compute: Callable[[], object]) -> object:
    try:
        with watching(job.watch):
            checkpoint("starting")  # released while it was queued: it never starts
            value, _kept = STORE.get_or_compute(job.key, compute)
        return value
    finally:
        with _LOCK:
            if _JOBS.get(job.key) is job:
                del _JOBS[job.key]


def start(slot: str, cached: Callable, *args, **kwargs) -> Job:
    """The work of an app_cached function for this session's `slot` (found in the store, joined, or started on the
    page-work threads); the session's earlier key in that slot is released."""
    key = cached.key_of(*args, **kwargs)
    found, value = STORE.lookup(key)
    if not found:
        wait_for_kernels()  # a fresh install's compilation, said on the page, before any kernel is asked for
    sid = _session_id() or "-"
    with _LOCK:
        if _WANTED.setdefault(sid, {}).get(slot) != key:
            _release(sid, slot)
            _WANTED[sid][slot] = key
        if found:
            done: Future = Future()
            done.set_result(value)
            return Job(key, done)
        job = _JOBS.get(key)
        if job is None:
            job = _JOBS[key] = Job(key, Future())
            job.future = _POOL.submit(_run, job, lambda: cached.compute(*args, **kwargs))
        job.owners.add(sid)
        if not _LOOKING.is_set():
            _LOOKING.set()
            threading.Thread(target=_look_for_closed_sessions, daemon=True, name="page-work-sessions").start()
    return job


def awaited(job: Job, label: str, box=None):
    """The job's result, drawing its progress in `box` (default: the page) while it runs; each redraw is a point
    where a control changed meanwhile ends this run (Streamlit reruns at its next element)."""
    if job.future.done():
        return job.future.result()
    shown = (box or st).empty()
    try:
        while True:
            try:
                return job.future.result(timeout=APP_PROGRESS_S)
            except FutureTimeout:
                w = job.watch
                waiting = "starting" if job.future.running() else "queued behind other sessions' work"
                step = f"{w.step}, {100 * w.fraction:.0f} %" if w.total else w.step or waiting
                shown.progress(w.fraction, text=f"{label} ({step}; {time.monotonic() - job.started:.0f} s)")
            except WorkStoppedError:  # stopped as this run asked for it (its session's own later run released it)
                st.rerun()
    finally:
        shown.empty()
