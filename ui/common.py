"""Shared page helpers. Pages lay out controls and call moe_model; this module caches those calls on
their real inputs, keeps the shareable settings in the URL, and turns errors into messages."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import traceback
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np
import streamlit as st

from moe_model.errors import MoeModelError
from moe_model.limits import APP_CACHE_TTL_S, MAX_ROUTING_DRAWS
from moe_model.llama.batching import workload_from
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.readers.logs import LogRun, parse_log
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.sources import SourcePolicy, check_url, deployment_settings, policy_from_env, resolve_source
from moe_model.readers.traces import load_any, save_npz
from moe_model.resources import data_path
from moe_model.routing.synthetic import PRESETS_PATH, SEQ_LEN, preset_for
from moe_model.settings import Setting, settings_of
from moe_model.speed.calibration import TimeModel, default_time_model
from moe_model.speed.hardware import PRESETS, Hardware, preset
from moe_model.speed.host_memory import HostMemory
from moe_model.speed.measured import synthetic_workload
from moe_model.speed.policy_compare import Comparison, compare
from moe_model.speed.recommend import Option, recommend
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.traffic import from_workload, simulate_curve
from moe_model.speed.vram import VramBreakdown
from moe_model.workload import Batching, Workload

ROOT = Path(__file__).resolve().parent.parent
MODELS = data_path("models")
DEFAULT_MODEL = "Qwen3-30B-A3B-Q4_K_M.gguf"
DEFAULT_GPU = "Tesla T4"
EXPLORE_TOKENS = 6000  # synthetic decode tokens the pages simulate (12 sequences)


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


def bundled_models() -> list[str]:
    return sorted(p.name for p in MODELS.glob("*.gguf") if "-0000" not in p.name or "-00001-of-" in p.name)


@contextmanager
def friendly_errors():
    """Show library errors as messages and anything else without a traceback."""
    try:
        yield
    except MoeModelError as err:
        st.error(str(err))
    except Exception as err:  # noqa: BLE001 - the page must never show a traceback
        st.error(f"Something went wrong: {type(err).__name__}: {err}")
        print(traceback.format_exc())


def url_value(key: str, default, cast: Callable = str, lo=None, hi=None, choices=None):
    """A setting from the URL's query parameters (shareable links): cast, clamped into [lo, hi] or checked
    against choices; an absurd, unknown or unreadable value gets a warning and falls back."""
    raw = st.query_params.get(key)
    if raw is None:
        return default
    try:
        value = cast(raw)
    except (TypeError, ValueError, OverflowError):
        return _stale(key, raw, default)
    if choices is not None:
        return value if value in choices else _stale(key, raw, default)
    if lo is not None and value < lo:
        return _stale(key, raw, lo)
    if hi is not None and value > hi:
        return _stale(key, raw, hi)
    return value


def _stale(key: str, raw: str, used):
    st.warning(f"The link's `{key}={raw}` is unknown or out of range here: using {used}.")
    return used


def remember(**values) -> None:
    """Write settings into the URL so the view can be shared."""
    for key, value in values.items():
        st.query_params[key] = str(value)


def kept(key: str, default, cast: Callable = str, lo=None, hi=None, choices=None):
    """A setting shared by every page: the value last chosen on any page this session, else the URL's, else
    the default (widget state is dropped when a page that lacks the widget runs, this store is not)."""
    store = st.session_state.setdefault("kept", {})
    if key not in store:
        return url_value(key, default, cast, lo, hi, choices)
    value = store[key]
    if choices is not None:
        return value if value in choices else default
    return min(max(value, lo if lo is not None else value), hi if hi is not None else value)


def keep(**values) -> None:
    """Store settings for every page and write them into the URL."""
    st.session_state.setdefault("kept", {}).update(values)
    remember(**values)


def forget(*keys: str) -> None:
    """Drop kept settings (a new GPU resets the machine's edits to its preset)."""
    store = st.session_state.setdefault("kept", {})
    for key in keys:
        store.pop(key, None)
        st.query_params.pop(key, None)


SCENARIO, HARDWARE = settings_of(Scenario), settings_of(Hardware)  # each setting's URL key, widget and range
URL_SETTINGS = {s.url_key: s for s in (*SCENARIO.values(), *HARDWARE.values()) if s.url_key}


def kept_setting(s: Setting, hi=None, start=None):
    """A declared setting's kept value (another page's, else the URL's, else where its widget starts), within its
    widget's range (`hi`: the page's end where the declaration leaves it open) or options."""
    w = s.widget
    first = next(v for v in (start, w.start, s.default) if v is not None)
    if w.options:
        return kept(s.url_key, first, type(first), choices=list(w.options))
    top = w.hi if hi is None else hi
    return kept(s.url_key, first if top is None else min(first, top), type(first), w.lo, top)


def setting_input(box, s: Setting, value, key: str, hi=None):
    """A declared setting's widget showing `value`: its label, kind, range and step, or its options."""
    w, cast = s.widget, type(value)
    top = w.hi if hi is None else hi
    if w.kind == "selectbox":
        return box.selectbox(w.label, w.options, list(w.options).index(value), key=key)
    if w.kind == "select_slider":
        return box.select_slider(w.label, list(w.options), value, key=key)
    step = None if w.step is None else cast(w.step)
    if w.kind == "number":
        return cast(box.number_input(w.label, cast(w.lo), cast(top), value, step, key=key))
    return cast(box.slider(w.label, cast(w.lo), cast(top), value, step, key=key))


def control(box, s: Setting, hi=None):
    """A declared setting's widget, its value kept across pages and in the URL under the setting's key."""
    value = setting_input(box, s, kept_setting(s, hi), s.url_key, hi)
    keep(**{s.url_key: value})
    return value


@st.cache_data(show_spinner="Reading the GGUF header...", max_entries=16, ttl=APP_CACHE_TTL_S)
def cached_model(source: str | bytes, private_hosts: bool = False) -> ModelSpec:
    return load_model(source, check_url=partial(check_url, private_hosts=private_hosts))


def source_policy() -> SourcePolicy:
    """What this deployment reads: decided by its bind address and the MOE_EXPLORER_* settings, each from the
    environment where set, else from [moe_explorer] in .streamlit/secrets.toml (moe_model.sources)."""
    return policy_from_env(st.get_option("server.address"), deployment_settings(os.environ, _secrets()))


def _secrets() -> dict:
    try:
        return st.secrets.to_dict()
    except FileNotFoundError:  # no secrets file (Streamlit's own error subclasses it): the environment alone
        return {}


def sidebar_model() -> tuple[ModelSpec, str, str]:
    """The model picker shared by every page: bundled, an uploaded header prefix, a URL or a path.

    Returns the model, the name to show (and put in command lines), and a key naming its content."""
    models = bundled_models()
    choice = kept("model", DEFAULT_MODEL, choices=models)
    options = [*models, "upload a header prefix", "URL or local path"]
    kind = st.sidebar.selectbox(
        "Model", options, index=options.index(choice) if choice in options else 0, key="model_choice"
    )
    if kind == "upload a header prefix":
        st.sidebar.caption("Make one with `head -c 16M model.gguf > header.gguf` (split models: the first shard).")
        upload = st.sidebar.file_uploader("GGUF header prefix", type=None, key="model_upload")
        if upload is None:
            st.sidebar.info("No file yet: showing the bundled sample.")
            return cached_model(str(MODELS / DEFAULT_MODEL)), DEFAULT_MODEL, DEFAULT_MODEL
        data = upload.getvalue()
        return cached_model(data), upload.name, f"upload:{content_key(data)}"
    if kind == "URL or local path":
        text = st.sidebar.text_input("https://.../model.gguf or /path/model.gguf", key="model_path").strip()
        if not text:
            return cached_model(str(MODELS / DEFAULT_MODEL)), DEFAULT_MODEL, DEFAULT_MODEL
        policy = source_policy()
        return cached_model(resolve_source(text, policy), policy.private_hosts), text, text
    keep(model=kind)
    return cached_model(str(MODELS / kind)), kind, kind


MACHINE_EDITS = (*(s.url_key for s in HARDWARE.values() if s.url_key), "link")


def _edit(box, name: str, default, gpu: str):
    """One machine field's declared widget, starting at the preset's value; kept across pages and in the URL."""
    s = HARDWARE[name]
    value = setting_input(box, s, kept_setting(s, start=default), f"hw_{s.url_key}_{gpu}")
    keep(**{s.url_key: value})
    return value


def sidebar_hardware() -> tuple[Hardware, TimeModel, str]:
    """The machine (a preset, every field editable, or the one calibrated on the Logs page), the time model
    and the load mode (-lm) of the host experts; all kept across pages and in the URL."""
    names = list(PRESETS)
    chosen = kept("gpu", DEFAULT_GPU, choices=names)
    name = st.sidebar.selectbox("GPU", names, index=names.index(chosen), key="gpu")
    if st.session_state["kept"].get("gpu", name) != name:
        forget(*MACHINE_EDITS)  # another card: its own preset figures
    keep(gpu=name)
    time_model = default_time_model()
    calibrated = st.session_state.get("machine")
    if calibrated is not None and st.sidebar.toggle(f"use my calibrated machine ({calibrated[0].name})", True):
        hw, rel_error = calibrated
        time_model = TimeModel(time_model.params, rel_error, "your machine, calibrated from your logs (Logs page)")
    else:
        hw = preset(name)
    ram = _edit(st.sidebar, "ram_gib", float(hw.ram_gib), name)
    with st.sidebar.expander("edit this machine"):
        link = _link_edit(hw, name)
        hw = hw.with_changes(
            ram_gib=ram,
            vram_gib=_edit(st, "vram_gib", float(hw.vram_gib), name),
            gpu_bw_gbs=_edit(st, "gpu_bw_gbs", float(hw.gpu_bw_gbs), name),
            pcie_gen=_edit(st, "pcie_gen", hw.pcie_gen, name),
            pcie_lanes=_edit(st, "pcie_lanes", hw.pcie_lanes, name),
            cpu_bw_gbs=_edit(st, "cpu_bw_gbs", float(hw.cpu_bw_gbs), name),
            cpu_threads=_edit(st, "cpu_threads", int(hw.cpu_threads), name),
        )
        hw = hw.with_changes(
            **({"pinned_gbs": min(link, hw.line_gbs), "pageable_gbs": min(link, hw.line_gbs)} if link else {})
        )
    load_mode = control(st.sidebar, SCENARIO["load_mode"])
    st.sidebar.caption(
        f"{hw.vram_gib:g} GiB, {hw.gpu_bw_gbs:g} GB/s, {hw.pcie_label}, {hw.backend}, {hw.ram_gib:g} GiB RAM. "
        f"{'Pinned (CUDA_Host)' if load_mode != 'mmap' else 'mmap (pageable)'} host experts. Source: {hw.source}"
    )
    return hw, time_model, load_mode


def _link_edit(hw: Hardware, gpu: str) -> float:
    """One measured host-to-device rate for both copies (0: derived from the machine), up to the link's line rate."""
    label, top = "measured host-to-device GB/s (0: from the machine)", hw.line_gbs
    value = st.number_input(label, 0.0, top, kept("link", 0.0, float, 0.0, top), 0.5, key=f"hw_link_{gpu}")
    keep(link=value)
    return value


def sidebar_session(note: str) -> None:
    """The session's model and machine pickers on a page that predicts nothing with them: every page shows the
    same choices and can change them; `note` says what this page shows instead."""
    sidebar_model()
    sidebar_hardware()
    st.sidebar.caption(note)


def sidebar_serving() -> tuple[int, int]:
    """Context (-c) and concurrent streams (-np), shared by every page that predicts."""
    return control(st.sidebar, SCENARIO["n_ctx"]), control(st.sidebar, SCENARIO["concurrency"])


PLACEMENTS = ["--cpu-moe", "--n-cpu-moe K", "--fit"]


def sidebar_placement(model: ModelSpec) -> tuple[str, Placement]:
    """Where the experts go (--cpu-moe, --n-cpu-moe K, --fit), kept across pages and in the URL."""
    index = kept("placement", 0, int, 0, len(PLACEMENTS) - 1)
    name = st.sidebar.radio("experts in host memory", PLACEMENTS, index=index, key="placement")
    keep(placement=PLACEMENTS.index(name))
    if name == "--n-cpu-moe K":
        k = st.sidebar.slider(
            "K (first layers in host memory)",
            1,
            model.n_layer,
            kept("k", model.n_layer // 2, int, 1, model.n_layer),
            key="k",
        )
        keep(k=int(k))
        return name, Placement(cpu_moe=False, n_cpu_moe=int(k))
    return name, Placement.parse({"--cpu-moe": "cpu-moe", "--fit": "fit"}[name])


def _follow(moved: str, other: str) -> None:
    """The budget's slider and number box show one value: the one the user just changed sets the other."""
    st.session_state[other] = st.session_state[moved]


def _snap_to_stop(step: int, top: int) -> None:
    """A typed budget moves the slider to its nearest stop; the number box keeps the exact value."""
    key = SCENARIO["budget_mib"].url_key
    st.session_state[key] = min(top, round(st.session_state[f"{key}_box"] / step) * step)


def budget_top(lowest: int, full: int, fits: int) -> int:
    """Where every page's budget slider ends: where the cache stops fitting beside everything else, at most where
    it caches every expert; where it would cache everything when no cache fits (to show what it would take)."""
    return max(min(full, fits), 1) if fits >= lowest else max(full, 1)


def budget_slider(box, top: int, step: int = 1) -> int:
    """--moe-cache-mib as a slider moving in `step` MiB and a number box for any exact value, both ending at
    `top` (budget_top); the box's value is the budget, kept across pages and in the URL."""
    s = SCENARIO["budget_mib"]
    key, label, lo = s.url_key, s.widget.label, s.widget.lo
    value = kept_setting(s, top)
    box.slider(
        label,
        lo,
        top,
        min(top, round(value / step) * step),
        step,
        key=key,
        on_change=_follow,
        args=(key, f"{key}_box"),
    )
    budget = int(
        box.number_input(
            f"exact {label} (MiB)", lo, top, value, key=f"{key}_box", on_change=_snap_to_stop, args=(step, top)
        )
    )
    keep(**{key: budget})
    return budget


def fit_verdicts(vram: VramBreakdown, host: HostMemory) -> bool:
    """Lead with whether the setting fits VRAM and RAM; True when both do."""
    for fits, line in ((vram.fits, vram.verdict), (host.fits, host.verdict)):
        (st.success if fits else st.error)(line)
    return vram.fits and host.fits


def model_flag_path(source: str, model_key: str) -> str:
    """What a printed command names the model by: a placeholder when it came from an upload."""
    return "/path/to/model.gguf" if model_key.startswith("upload:") else source


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


def simulated_prompt_tokens(prompt_tokens: int, model: ModelSpec, n_tokens: int = EXPLORE_TOKENS) -> int:
    """Prompt tokens per synthetic sequence whose routing can be drawn within this tool's limit (warm-up included)."""
    n_seq = -(-n_tokens // SEQ_LEN)
    return min(prompt_tokens, (MAX_ROUTING_DRAWS // (model.n_layer * model.n_expert) - 2) // n_seq)


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
def cached_scenario_curve(
    model: ModelSpec,
    _model_key: str,
    work: Workload,
    _work_key: str,
    hw: Hardware,
    _hw_key: str,
    base: Scenario,
    budgets: tuple[int, ...],
):
    """A budget curve for any placement, --fit included (its placement moves with the budget).

    Keyed by the content of the model, workload and machine (fingerprint); the names are not trusted."""
    return simulate_curve(model, hw, work, base, list(budgets))


@st.cache_data(
    show_spinner="Simulating the cache at every budget...", max_entries=32, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS
)
def cached_curve(
    model: ModelSpec, _model_key: str, work: Workload, _work_key: str, budgets: tuple[int, ...], placement: Placement
):
    """All budgets in one pass; keyed by the content of the model and workload (fingerprint)."""
    return simulate_budgets(model, work, list(budgets), placement)


@st.cache_data(show_spinner="Replaying the policy...", max_entries=256, ttl=APP_CACHE_TTL_S, hash_funcs=HASH_FUNCS)
def cached_policy_traffic(
    model: ModelSpec, _model_key: str, work: Workload, _work_key: str, hw: Hardware, _hw_key: str, scenario: Scenario
):
    """Traffic of one scenario under its policy when that is not the exact LRU (a per-budget replay)."""
    return from_workload(model, resolve(model, hw, scenario), scenario, work)


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
    placement: Placement,
    budgets: tuple[int, ...],
    names: tuple[str, ...],
) -> Comparison:
    """The chosen policies on the same workload and budgets (per-budget runs for all but the exact LRU)."""
    return compare(model, work, budgets, placement, names)


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
