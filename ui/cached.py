"""The library calls the pages make, cached on their real inputs: a content digest of every model, workload
and machine (never a hand-built name). One store for every session, bounded in bytes and age
(moe_model.limits.APP_CACHE_*): a result is shared, not copied per session as st.cache_data does, computed once
while others asking for it wait, and one too large for the store stays in its session's own state (released with
the session). Uploads are size-checked from their declared sizes before any array is built."""

from __future__ import annotations

import functools
import gc
import hashlib
import inspect
import io
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path

import numpy as np
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

from moe_model.answers.explore import EXPLORE_TOKENS, Answer, ExploreCurve, explore_answer, explore_curve
from moe_model.answers.policy_compare import Comparison, compare_priced, policy_workload
from moe_model.errors import WorkloadError
from moe_model.fits.calibration import TimeModel
from moe_model.limits import (
    APP_CACHE_BYTES,
    APP_CACHE_ENTRY_BYTES,
    APP_CACHE_TTL_S,
    APP_COMPILE_POLL_S,
    APP_COMPILE_WAIT_S,
    APP_IDLE_RELEASE_S,
    APP_LOG_BYTES,
    APP_MAX_LOOKUPS,
    APP_UPLOAD_PEAK_BYTES,
)
from moe_model.llama.batching import workload_from
from moe_model.numba_cache import COMPILE_TIME
from moe_model.pricing.curve import BudgetAxis, ReplayMemo
from moe_model.pricing.workloads import batched_synthetic, drafting, synthetic_trace, workload_scenario
from moe_model.readers.logs import LogRun, parse_log
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.sources import SourcePolicy, check_path, check_url
from moe_model.readers.traces import ReplayCap, declared_lookups, load_any, load_trace, read_peak_bytes, save_npz
from moe_model.resources import data_path
from moe_model.routing.logged import LogRouting
from moe_model.routing.synthetic import PRESETS_PATH
from moe_model.speed.hardware import Hardware
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.scenario import Scenario
from moe_model.warmup import is_compiled
from moe_model.workload import TokenTrace, Workload
from ui.byte_cache import ByteBudgetCache, release_freed_memory


def content_key(data: bytes) -> str:
    """A short digest naming uploaded content in cache keys (two uploads may share a file name)."""
    return hashlib.sha1(data).hexdigest()[:12]


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # immutable objects: digest each once


def fingerprint(obj) -> str:
    """A content digest of a model, workload or machine, for cache keys: every input, not a hand-built name."""
    if (known := _FINGERPRINTS.get(obj)) is not None:
        return known
    digest = hashlib.sha1(type(obj).__name__.encode())
    if isinstance(obj, Workload):
        digest.update(repr((obj.n_layer, obj.n_expert, obj.k, obj.decode_tokens, obj.label)).encode())
        for array in (obj.rec_ubatch, obj.rec_layer, obj.rec_ntok, obj.rec_off, obj.rec_phase, obj.ids):
            digest.update(np.ascontiguousarray(array).data)
    else:
        digest.update(repr(obj).encode())  # frozen dataclasses of plain values: repr names every field
    _FINGERPRINTS[obj] = digest.hexdigest()
    return _FINGERPRINTS[obj]


def file_key(path: Path) -> str:
    """A file's content digest (a preset file edited under a running app must not be served stale)."""
    return content_key(path.read_bytes()) if path.is_file() else "missing"


def routing_key(routing: LogRouting) -> str:
    """A routing fitted to logs, by its repr (its dict fields make it unhashable, so fingerprint cannot memo it)."""
    return content_key(repr(routing).encode())


@dataclass(frozen=True)
class Inputs:
    """What Explore's predictions are computed from: the model, the workload replayed, the machine and its time
    model (each keyed by its content: key_part)."""

    model: ModelSpec
    work: Workload
    hw: Hardware
    tm: TimeModel


def key_part(value) -> str:
    """One argument in a cache key: models, workloads and machines by content, Inputs by their parts, routings
    fitted to logs by routing_key, bytes by digest, the rest (a time model, a scenario) by repr."""
    if isinstance(value, (ModelSpec, Workload, Hardware)):
        return fingerprint(value)
    if isinstance(value, Inputs):
        return "|".join(key_part(getattr(value, f.name)) for f in fields(value))
    if isinstance(value, LogRouting):
        return "routing:" + routing_key(value)
    if isinstance(value, (bytes, bytearray)):
        return "bytes:" + hashlib.sha1(value).hexdigest()
    return repr(value)


STORE = ByteBudgetCache(APP_CACHE_BYTES, APP_CACHE_ENTRY_BYTES, APP_CACHE_TTL_S)


class IdleRelease:
    """Once no session has been connected for `idle_s`, the shared results and every session's large ones are dropped
    and the freed memory handed back: they serve visitors asking together (a session that reconnects computes its
    own again), and a server nobody visits kept hundreds of MiB (issue 39)."""

    def __init__(self, store: ByteBudgetCache, idle_s: float = APP_IDLE_RELEASE_S) -> None:
        self.store, self.idle_s, self.since = store, idle_s, None

    def step(self, now: float, connected: bool | None) -> bool:
        """One look at the server (monotonic seconds, whether any session is connected); True when it released.
        Outside a server (connected None: connected_sessions) there is no idle time, and nothing is released."""
        if connected is None or connected:
            self.since = None
            return False
        self.since = now if self.since is None else self.since
        held = len(self.store) or any(_ALL_SESSION_RESULTS.values()) or any(d.work is not None for d in _DEFERRED)
        if now - self.since < self.idle_s or not held:
            return False
        self.store.clear()  # hands freed memory back (malloc_trim) after the collection below
        for results in list(_ALL_SESSION_RESULTS.values()):  # closed sessions' too (kept for a reconnect): a cache
            results.clear()
        for deferred in list(_DEFERRED):  # closed sessions' download buttons, and the workloads they hold
            deferred.release()
        _drop_uploaded_files()
        gc.collect()
        release_freed_memory()
        return True


def _drop_uploaded_files() -> None:
    """Streamlit's copies of every session's uploaded files, once none is connected: it drops a closed session's
    only when that session is shut down, which a session that outlives its reconnect time never is. A session
    that reconnects keeps its uploads in its own store (ui.uploads)."""
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return
    files = Runtime.instance().uploaded_file_mgr
    for session_id in list(getattr(files, "file_storage", {})):  # the in-memory manager's; other managers keep theirs
        files.remove_session_files(session_id)


def connected_sessions() -> bool | None:
    """Whether any session is connected to this process's server; None outside a server, where no session ever
    connects: bare mode (a script calling these functions), or an AppTest, whose stand-in runtime (a mock) has no
    state of its own."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.runtime import RuntimeState

    state = Runtime.instance().state if Runtime.exists() else None
    return state is RuntimeState.ONE_OR_MORE_SESSIONS_CONNECTED if isinstance(state, RuntimeState) else None


def watch_idle(idle: IdleRelease, look_s: float) -> None:
    """A daemon thread's loop: look every `look_s` whether the server has been left alone (IdleRelease)."""
    while True:
        time.sleep(look_s)
        idle.step(time.monotonic(), connected_sessions())


def release_when_idle() -> None:
    """Start the idle watch once per process (ui.startup.prepare_process)."""
    idle = IdleRelease(STORE)
    threading.Thread(target=watch_idle, args=(idle, idle.idle_s / 3), daemon=True, name="idle-release").start()


SESSION_KEY = "_large_results"  # per session: the last result of each function too large for the shared store


def app_cached(spinner: str | None = None, *, kernels: bool = False):
    """Cache a function's results in the shared byte-bounded STORE, keyed by its name and every argument whose
    name does not start with _ (key_part). kernels: wait for the kernels' first compilation before computing."""

    def wrap(function):
        signature, name = inspect.signature(function), function.__qualname__

        @functools.wraps(function)
        def cached_call(*args, **kwargs):
            key = key_of(*args, **kwargs)
            large = _session_results()
            if large is not None and large.get(name, (None,))[0] == key:
                return large[name][1]
            hit, value = STORE.lookup(key)
            if hit:
                return value
            with _shown_while_computing(spinner, kernels):
                value, kept = STORE.get_or_compute(key, partial(_computing, function, args, kwargs))
                if not kept and large is not None:
                    large[name] = (key, value)
            return value

        def key_of(*args, **kwargs) -> tuple:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return (name, *(key_part(v) for k, v in bound.arguments.items() if not k.startswith("_")))

        cached_call.key_of = key_of  # ui.background runs it off the script thread under the same key
        cached_call.compute = lambda *args, **kwargs: _computing(function, args, kwargs)
        cached_call.clear = partial(STORE.clear, name)
        cached_call.is_cached = lambda *args, **kwargs: STORE.lookup(key_of(*args, **kwargs))[0]
        cached_call.put = lambda value, *args, **kwargs: STORE.get_or_compute(key_of(*args, **kwargs), lambda: value)
        return cached_call

    return wrap


_COMPUTING = threading.local()  # depth: how many shared computations this thread is inside


def _computing(function: Callable, args: tuple, kwargs: dict):
    """function(*args, **kwargs) as a shared computation: the cached calls it makes show nothing."""
    _COMPUTING.depth = getattr(_COMPUTING, "depth", 0) + 1
    try:
        return function(*args, **kwargs)
    finally:
        _COMPUTING.depth -= 1


@contextmanager
def _shown_while_computing(spinner: str | None, kernels: bool) -> Iterator[None]:
    """What a session sees while a result it asked for is computed or awaited: the kernels' first compilation, then
    the spinner. Never inside a shared computation: a Streamlit call of a session that has rerun or closed raises
    there (StopException), which threw away the finished result that other sessions were waiting for."""
    if getattr(_COMPUTING, "depth", 0):
        yield
        return
    if kernels:
        wait_for_kernels()
    if spinner is None:
        yield
        return
    with st.spinner(spinner):
        yield


def _session_results() -> dict | None:
    """This session's own large results (None outside a script run: nothing to keep them in)."""
    if get_script_run_ctx(suppress_warning=True) is None:
        return None
    return st.session_state.setdefault(SESSION_KEY, _new_session_results())


class _SessionResults(dict):
    """A session's large results (a dict that can be weakly referenced: the idle release empties every one)."""


_ALL_SESSION_RESULTS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> a session's (a closed
# one's too, until Streamlit drops it): weak, so a session that goes takes its own along


def _new_session_results() -> _SessionResults:
    results = _SessionResults()
    _ALL_SESSION_RESULTS[id(results)] = results
    return results


def session_stopped() -> Callable[[], bool]:
    """Whether the session asking has stopped (its tab closed, or its run stopped): a reader polls it between blocks
    and ends there. A rerun does not stop it: the run after it wants the same upload, found kept. Outside a script
    run nothing stops it."""
    ctx = get_script_run_ctx(suppress_warning=True)
    requests = getattr(ctx, "script_requests", None)
    if requests is None:
        return lambda: False
    return lambda: getattr(requests, "_state", None) is ScriptRequestType.STOP  # Streamlit has no public getter


APP_REPLAY = ReplayCap(APP_MAX_LOOKUPS, "the app", "run the CLI for more (`python -m moe_model simulate --trace`)")


def check_upload_peak(data: bytes, name: str, should_stop: Callable[[], bool] | None = None) -> int:
    """An uploaded trace's estimated peak bytes, from its cheap facts and declared sizes, before any array is built;
    one line refusing it above the app's limits, in expert ids (work) or in bytes (the CLI streams what the app
    refuses). `should_stop`: the asking session's (a CSV's lines are counted a block at a time)."""
    APP_REPLAY.check(declared_lookups(data, name, should_stop))
    peak = read_peak_bytes(data, name)
    if peak > APP_UPLOAD_PEAK_BYTES:
        raise WorkloadError(
            f"reading this trace would take about {peak / 2**20:,.0f} MiB of server memory, above the app's limit "
            f"of {APP_UPLOAD_PEAK_BYTES / 2**20:,.0f} MiB per upload: `python -m moe_model simulate --trace` "
            "reads it on your machine"
        )
    return peak


_COMPILER: dict[str, object] = {}  # the one warm-up subprocess of this server and when it started
_COMPILER_LOCK = threading.Lock()


def warm_kernels_in_background() -> None:
    """Compile the numba kernels once per install in a subprocess (the compiler holds the GIL for seconds: in
    the server it would hold every session); numba caches them on disk for this process to load."""
    with _COMPILER_LOCK:
        if "process" in _COMPILER or is_compiled():
            return
        command = [sys.executable, "-m", "moe_model.warmup"]
        _COMPILER["process"] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _COMPILER["started"] = time.monotonic()


def wait_for_kernels() -> None:
    """Before a simulation on a fresh install: wait for the warm-up subprocess, saying so and for how long."""
    process = _COMPILER.get("process")
    if process is None or process.poll() is not None:
        return
    started, note = _COMPILER["started"], st.empty()
    deadline = time.monotonic() + APP_COMPILE_WAIT_S
    while process.poll() is None:  # the time so far, not a promise: 64 s was seen on a busy machine (issue 38)
        if time.monotonic() > deadline:  # a stuck compiler: this process compiles what it needs itself
            note.warning(
                f"The kernels' compilation has run {time.monotonic() - started:.0f} s: this page stops waiting and "
                "compiles what it needs itself."
            )
            return
        note.info(
            f"Compiling the simulation kernels, once after install: {time.monotonic() - started:.0f} s so far "
            f"({COMPILE_TIME})..."
        )
        time.sleep(APP_COMPILE_POLL_S)
    note.empty()
    st.toast(f"Compiled the simulation kernels in {time.monotonic() - started:.0f} s (once per install).")


@app_cached("Reading the GGUF header...")
def cached_model(source: str | bytes, policy: SourcePolicy | None = None) -> ModelSpec:
    """A model read under `policy` (every shard too); None for the bundled models and uploads: public URLs only."""
    if policy is None:
        return load_model(source, check_url=check_url)
    return load_model(
        source,
        check_url=partial(check_url, private_hosts=policy.private_hosts),
        check_path=partial(check_path, policy=policy),
    )


def cached_synthetic(
    model: ModelSpec, sc: Scenario, prompt_tokens: int = 0, n_tokens: int = EXPLORE_TOKENS
) -> Workload:
    """The model's synthetic preset, batched as the request `sc` is; prompt_tokens > 0 adds each sequence's first
    prompt_tokens of prompt ubatches."""
    batching = workload_scenario(sc, prompt_tokens)
    return cached_batched_synthetic(model, batching, prompt_tokens > 0, n_tokens, file_key(PRESETS_PATH))


@app_cached("Generating routing...")
def cached_batched_synthetic(
    model: ModelSpec, batching: Scenario, prompts: bool, n_tokens: int, presets_key: str
) -> Workload:
    """The preset's routing batched as `batching` (workload_scenario's), shared by Explore and the recommender."""
    return batched_synthetic(model, batching, synthetic_tokens(model, n_tokens, presets_key), prompts=prompts)


@app_cached("Generating routing...")
def synthetic_tokens(model: ModelSpec, n_tokens: int, presets_key: str) -> TokenTrace:
    """The preset's token routing, generated once for Explore and the recommender (they batch it their ways)."""
    return synthetic_trace(model, n_tokens=n_tokens)


def cached_log_workload(model: ModelSpec, routing: LogRouting, sc: Scenario) -> Workload:
    """A run like the session's logs with the routing fitted to them, batched as the request `sc` is."""
    return _cached_log_workload(model, routing, workload_scenario(sc))


@app_cached("Generating routing...")
def _cached_log_workload(model: ModelSpec, routing: LogRouting, batching: Scenario) -> Workload:
    return routing.workload(model, drafting(batching))


def cached_log(data: bytes) -> list[LogRun]:
    """Parsed runs of an uploaded or bundled log, keyed by its bytes (its size checked first)."""
    if len(data) > APP_LOG_BYTES:
        raise WorkloadError(
            f"the log is {len(data) / 2**20:,.1f} MiB, above the app's limit of {APP_LOG_BYTES / 2**20:,.0f} MiB: "
            "`python -m moe_model parse-log` reads it on your machine"
        )
    return _cached_log(data)


@app_cached("Parsing the log...")
def _cached_log(data: bytes) -> list[LogRun]:
    return parse_log(data)


def cached_trace(data: bytes, name: str, n_expert: int, sc: Scenario) -> Workload:
    """An uploaded trace as a workload batched as the request `sc` is: its cheap facts and peak checked first (the
    same one-line refusal for every session, in about a second whatever the file), then read in the asking session's
    own run, never waiting for another session's upload, and stopped between blocks when that session ends
    (session_stopped)."""
    stopped = session_stopped()
    check_upload_peak(data, name, stopped)
    return _cached_trace(data, name, n_expert, workload_scenario(sc), _should_stop=stopped)


@app_cached("Reading the trace...")
def _cached_trace(data: bytes, name: str, n_expert: int, batching: Scenario, _should_stop: Callable) -> Workload:
    try:
        trace = load_trace(data, name, APP_REPLAY, should_stop=_should_stop)
        return workload_from(trace, drafting(batching), n_expert)
    finally:
        release_freed_memory()  # the parse's buffers go back to the system, not to this process's heap


@app_cached()
def replay_memo(work: Workload) -> ReplayMemo:
    """The counts replayed on one workload so far, kept for every card, host, time model and budget that asks
    again (a host part or a GPU reprices them; only new pools replay)."""
    return ReplayMemo(work)


@app_cached("Simulating the cache at every budget...", kernels=True)
def cached_explore_curve(inputs: Inputs, base: Scenario, ranges: RangeInputs, axis: BudgetAxis) -> ExploreCurve:
    """Explore's curve for any placement, --fit included (its placement moves with the budget), with the range
    `ranges` gives (the time model's error, the routing's spreads).

    Keyed by the content of the model, workload and machine (fingerprint); the names are not trusted."""
    return explore_curve(inputs.model, inputs.hw, inputs.tm.params, base, replay_memo(inputs.work), axis, ranges)


@app_cached("Simulating the cache at this budget...", kernels=True)
def cached_explore_answer(inputs: Inputs, base: Scenario, ranges: RangeInputs, budget_mib: int) -> Answer:
    """The headline at one budget, replayed and priced as the curve is, without waiting for the curve."""
    memo = replay_memo(inputs.work).without_waiting()
    return explore_answer(inputs.model, inputs.hw, inputs.tm.params, base, memo, budget_mib, ranges)


@app_cached("Replaying the workload with every policy...", kernels=True)
def cached_policy_comparison(
    inputs: Inputs, base: Scenario, budgets: tuple[int, ...], names: tuple[str, ...]
) -> Comparison:
    """The chosen policies on the first ubatches of the workload at the same budgets (Explore: its budget alone
    first, then the curves'), each priced as `predict --policy NAME` prices it, from the workload's ReplayMemo."""
    model, work, hw, tm = inputs.model, inputs.work, inputs.hw, inputs.tm
    return compare_priced(model, hw, tm.params, base, replay_memo(policy_workload(work)), budgets, names)


BUNDLED_TRACES = {
    "GPT-OSS-20B real routing (decode)": data_path("traces", "gpt-oss-20b", "routing.npz"),
    **{
        f"llama.cpp recorded run: {p.stem}": p
        for p in sorted(data_path("groundtruth", "traces").glob("*.npz"))
        if p.stem != "minany_minus1"
    },
}


@app_cached()
def _trace_shape(path: str, content_digest: str) -> tuple[int, int, int]:
    item = load_any(path)
    return item.n_layer, item.n_expert, item.k


def bundled_traces(model: ModelSpec) -> dict[str, Path]:
    """The bundled real traces whose shape fits this model."""
    out = {}
    for name, path in BUNDLED_TRACES.items():
        n_layer, n_expert, k = _trace_shape(str(path), file_key(path))
        if n_layer == model.n_layer and n_expert <= model.n_expert and k == model.n_expert_used:
            out[name] = path
    return out


def cached_bundled_trace(path: Path, n_expert: int, sc: Scenario) -> Workload:
    """A bundled trace batched as the request `sc` is."""
    return _cached_bundled_trace(str(path), file_key(path), n_expert, workload_scenario(sc))


@app_cached("Reading the trace...")
def _cached_bundled_trace(path: str, trace_key: str, n_expert: int, batching: Scenario) -> Workload:
    return workload_from(load_any(path), drafting(batching), n_expert)


def workload_npz(work: Workload, work_key: str) -> Callable[[], bytes]:
    """The workload as NPZ bytes for a download button, made when it is clicked (st.download_button calls it on a
    thread of its own): compressing a large workload takes seconds that no view of the page waits for."""
    return _DeferredNpz(work, work_key)


class _DeferredNpz:
    """A download button's callable, holding its workload until the idle release takes it back: Streamlit keeps a
    closed session's download callables, each with its workload (38 MiB for a 50k-token upload), until the server
    ends (issue 39)."""

    def __init__(self, work: Workload, work_key: str) -> None:
        self.work: Workload | None = work
        self.work_key = work_key
        _DEFERRED.add(self)

    def release(self) -> None:
        self.work = None

    def __call__(self) -> bytes:
        if self.work is None:
            raise WorkloadError("this download was released while nobody was connected: reload the page for it")
        return _workload_npz(self.work, self.work_key)


_DEFERRED: weakref.WeakSet[_DeferredNpz] = weakref.WeakSet()  # every download callable alive: the idle release
# empties them


@app_cached()
def _workload_npz(work: Workload, _work_key: str) -> bytes:
    buf = io.BytesIO()
    save_npz(buf, work)
    return buf.getvalue()


def trace_workload(trace: Path | tuple[bytes, str], n_expert: int, sc: Scenario) -> Workload:
    """A bundled (path) or uploaded ((bytes, name)) trace batched as the request `sc` is (its streams and
    drafting): what Explore and the recommender replay."""
    if isinstance(trace, Path):
        return cached_bundled_trace(trace, n_expert, sc)
    data, name = trace
    return cached_trace(data, name, n_expert, sc)
