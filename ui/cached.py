"""The library calls the pages make, cached on their real inputs: a content digest of every model, workload
and machine (never a hand-built name), bounded in entries and age (moe_model.limits.APP_CACHE_TTL_S)."""

from __future__ import annotations

import hashlib
import io
import threading
import weakref
from functools import partial
from pathlib import Path

import numpy as np
import streamlit as st

from moe_model.limits import APP_CACHE_TTL_S
from moe_model.llama.batching import workload_from
from moe_model.readers.logs import LogRun, parse_log
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.sources import SourcePolicy, check_path, check_url
from moe_model.readers.traces import load_any, save_npz
from moe_model.resources import data_path
from moe_model.routing.synthetic import PRESETS_PATH, preset_for
from moe_model.speed.calibration import TimeModel
from moe_model.speed.curve import BudgetAxis, CurvePoint
from moe_model.speed.explore import EXPLORE_TOKENS, ExploreCurve, explore_curve, explore_point
from moe_model.speed.hardware import Hardware
from moe_model.speed.measured import synthetic_workload
from moe_model.speed.policy_compare import Comparison, compare_priced, policy_workload
from moe_model.speed.recommend import Option, recommend
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching, Workload


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


HASH_FUNCS = {ModelSpec: fingerprint, Workload: fingerprint, Hardware: fingerprint}


@st.cache_data(show_spinner="Reading the GGUF header...", max_entries=16, ttl=APP_CACHE_TTL_S)
def cached_model(source: str | bytes, policy: SourcePolicy | None = None) -> ModelSpec:
    """A model read under `policy` (every shard too); None for the bundled models and uploads: public URLs only."""
    if policy is None:
        return load_model(source, check_url=check_url)
    return load_model(
        source,
        check_url=partial(check_url, private_hosts=policy.private_hosts),
        check_path=partial(check_path, policy=policy),
    )


@st.cache_data(show_spinner="Generating routing...", max_entries=16, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS)
def cached_recommend_work(
    model: ModelSpec, _model_key: str, concurrency: int, draft: int, accept: float, presets_key: str
) -> Workload:
    """The recommender's workload: the same synthetic preset `python -m moe_model recommend` uses."""
    return synthetic_workload(model, Scenario(concurrency=concurrency, draft_tokens=draft, accept_rate=accept))


@st.cache_data(show_spinner="Ranking every setting...", max_entries=32, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS)
def cached_recommend(
    model: ModelSpec,
    _model_key: str,
    command_path: str,
    hw: Hardware,
    _hw_key: str,
    _tm: TimeModel,
    tm_key: str,
    concurrency: int,
    n_ctx: int,
) -> list[Option]:
    """The one recommender with the inputs every page and the CLI share: concurrency and context."""
    presets = file_key(PRESETS_PATH)
    return recommend(
        model,
        hw,
        _tm.params,
        Scenario(concurrency=concurrency, n_ctx=n_ctx),
        lambda sc: cached_recommend_work(model, "", sc.concurrency, sc.draft_tokens, sc.accept_rate, presets),
        command_path,
        _tm.rel_error,
        preset_for(model).spread_points,
    )


def cached_synthetic(
    model: ModelSpec,
    concurrency: int,
    draft: int,
    accept: float,
    prompt_tokens: int = 0,
    n_tokens: int = EXPLORE_TOKENS,
) -> Workload:
    """The model's synthetic preset, batched; prompt_tokens > 0 adds each sequence's prompt ubatches."""
    return _cached_synthetic(model, concurrency, draft, accept, prompt_tokens, n_tokens, file_key(PRESETS_PATH))


@st.cache_data(show_spinner="Generating routing...", max_entries=8, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS)
def _cached_synthetic(
    model: ModelSpec, concurrency: int, draft: int, accept: float, prompt_tokens: int, n_tokens: int, presets_key: str
) -> Workload:
    sc = Scenario(concurrency=concurrency, draft_tokens=draft, accept_rate=accept, prompt_tokens=max(prompt_tokens, 1))
    return synthetic_workload(model, sc, n_tokens=n_tokens, prompts=prompt_tokens > 0)


@st.cache_data(show_spinner="Parsing the log...", max_entries=16, ttl=APP_CACHE_TTL_S)
def cached_log(data: bytes) -> list[LogRun]:
    """Parsed runs of an uploaded or bundled log, keyed by its bytes."""
    return parse_log(data)


@st.cache_data(show_spinner="Reading the trace...", max_entries=8, ttl=APP_CACHE_TTL_S)
def cached_trace(data: bytes, name: str, n_expert: int, concurrency: int, draft: int, accept: float) -> Workload:
    return workload_from(load_any(data, name), Batching(concurrency, draft, accept), n_expert)


WARM_UP_DELAY_S = 5.0  # after the first page has been drawn: the compiler would hold the GIL while it is


@st.cache_resource(show_spinner=False, max_entries=1, ttl=APP_CACHE_TTL_S)  # once per process and hour: cheap
def warm_kernels_in_background() -> threading.Thread:
    """Compile the numba kernels once per server process while the first page is read: a fresh install would
    otherwise pay ~14 s inside the first simulation (numba caches them per install, moe_model.numba_cache)."""
    from moe_model.warmup import warm_up

    timer = threading.Timer(WARM_UP_DELAY_S, warm_up)
    timer.daemon = True
    timer.start()
    return timer


@st.cache_data(
    show_spinner="Simulating the cache at every budget...", max_entries=32, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS
)
def cached_explore_curve(
    model: ModelSpec,
    _model_key: str,
    work: Workload,
    _work_key: str,
    hw: Hardware,
    _hw_key: str,
    _tm: TimeModel,
    tm_key: str,
    base: Scenario,
    spread_points: float,
    axis: BudgetAxis,
) -> ExploreCurve:
    """Explore's curve for any placement, --fit included (its placement moves with the budget).

    Keyed by the content of the model, workload and machine (fingerprint); the names are not trusted."""
    params, rel_error = _tm.params, _tm.rel_error
    return explore_curve(model, hw, params, base, work, axis, rel_error=rel_error, spread_points=spread_points)


@st.cache_data(
    show_spinner="Simulating the cache at this budget...", max_entries=32, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS
)
def cached_explore_point(
    model: ModelSpec,
    _model_key: str,
    work: Workload,
    _work_key: str,
    hw: Hardware,
    _hw_key: str,
    _tm: TimeModel,
    tm_key: str,
    base: Scenario,
    spread_points: float,
    budget_mib: int,
) -> CurvePoint:
    """A budget between the curve's stops (typed in the number box), replayed and priced as the curve is."""
    params, rel_error = _tm.params, _tm.rel_error
    return explore_point(model, hw, params, base, work, budget_mib, rel_error=rel_error, spread_points=spread_points)


@st.cache_data(
    show_spinner="Replaying the workload with every policy...",
    max_entries=8,
    ttl=APP_CACHE_TTL_S,
    hash_funcs=HASH_FUNCS,
)
def cached_policy_comparison(
    model: ModelSpec,
    _model_key: str,
    work: Workload,
    _work_key: str,
    hw: Hardware,
    _hw_key: str,
    _tm: TimeModel,
    tm_key: str,
    base: Scenario,
    budgets: tuple[int, ...],
    names: tuple[str, ...],
) -> Comparison:
    """The chosen policies on the first ubatches of the workload at the same budgets, each priced as
    `predict --policy NAME` prices it (per-budget runs for all but the exact LRU)."""
    return compare_priced(model, hw, _tm.params, base, policy_workload(work), budgets, names)


BUNDLED_TRACES = {
    "GPT-OSS-20B real routing (decode)": data_path("traces", "gpt-oss-20b", "routing.npz"),
    **{
        f"llama.cpp recorded run: {p.stem}": p
        for p in sorted(data_path("groundtruth", "traces").glob("*.npz"))
        if p.stem != "minany_minus1"
    },
}


@st.cache_data(max_entries=32, ttl=APP_CACHE_TTL_S)
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


def cached_bundled_trace(path: Path, n_expert: int, concurrency: int, draft: int, accept: float) -> Workload:
    return _cached_bundled_trace(str(path), file_key(path), n_expert, concurrency, draft, accept)


@st.cache_data(show_spinner="Reading the trace...", max_entries=8, ttl=APP_CACHE_TTL_S)
def _cached_bundled_trace(
    path: str, trace_key: str, n_expert: int, concurrency: int, draft: int, accept: float
) -> Workload:
    return workload_from(load_any(path), Batching(concurrency, draft, accept), n_expert)


@st.cache_data(show_spinner=False, max_entries=4, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS)
def workload_npz(work: Workload, _work_key: str) -> bytes:
    buf = io.BytesIO()
    save_npz(buf, work)
    return buf.getvalue()
