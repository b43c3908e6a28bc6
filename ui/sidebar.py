"""The pickers every page shares in the sidebar: the model, the machine (and time model), the serving settings
and the placement, each kept across pages and in the URL (ui.state)."""

from __future__ import annotations

import os

import streamlit as st

from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import ModelSpec
from moe_model.readers.sources import SourcePolicy, deployment_settings, policy_from_env, resolve_source
from moe_model.resources import data_path
from moe_model.speed.calibration import TimeModel, default_time_model
from moe_model.speed.hardware import PRESETS, Hardware, preset
from moe_model.speed.scenario import LOAD_MODES
from ui.cached import cached_model, content_key
from ui.state import forget, keep, kept

MODELS = data_path("models")
DEFAULT_MODEL = "Qwen3-30B-A3B-Q4_K_M.gguf"
DEFAULT_GPU = "Tesla T4"


def bundled_models() -> list[str]:
    return sorted(p.name for p in MODELS.glob("*.gguf") if "-0000" not in p.name or "-00001-of-" in p.name)


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
        return cached_model(resolve_source(text, policy), policy), text, text
    keep(model=kind)
    return cached_model(str(MODELS / kind)), kind, kind


MACHINE_EDITS = ("vram", "bw", "gen", "lanes", "cpu", "threads", "ram", "link")


def _edit(box, label: str, key: str, default, lo, hi, gpu: str, step=None):
    """One machine field: a number box whose value is kept across pages and in the URL."""
    cast = type(default)
    value = box.number_input(label, cast(lo), cast(hi), kept(key, default, cast, lo, hi), step, key=f"hw_{key}_{gpu}")
    keep(**{key: value})
    return value


def _pick(box, label: str, key: str, default: int, options: list[int], gpu: str) -> int:
    value = kept(key, default, int, choices=options)
    value = box.selectbox(label, options, options.index(value), key=f"hw_{key}_{gpu}")
    keep(**{key: value})
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
    ram = _edit(st.sidebar, "host RAM GiB", "ram", float(hw.ram_gib), 1.0, 16384.0, name, 8.0)
    with st.sidebar.expander("edit this machine"):
        link = _edit(st, "measured host-to-device GB/s (0: from the machine)", "link", 0.0, 0.0, hw.line_gbs, name, 0.5)
        hw = hw.with_changes(
            ram_gib=ram,
            vram_gib=_edit(st, "VRAM GiB", "vram", float(hw.vram_gib), 1.0, 1024.0, name),
            gpu_bw_gbs=_edit(st, "GPU memory GB/s", "bw", float(hw.gpu_bw_gbs), 10.0, 20000.0, name),
            pcie_gen=_pick(st, "PCIe generation", "gen", hw.pcie_gen, [3, 4, 5], name),
            pcie_lanes=_pick(st, "PCIe lanes", "lanes", hw.pcie_lanes, [1, 2, 4, 8, 16], name),
            cpu_bw_gbs=_edit(st, "host memory GB/s", "cpu", float(hw.cpu_bw_gbs), 1.0, 2000.0, name),
            cpu_threads=_edit(st, "CPU threads (-t)", "threads", int(hw.cpu_threads), 1, 1024, name),
        )
        hw = hw.with_changes(
            **({"pinned_gbs": min(link, hw.line_gbs), "pageable_gbs": min(link, hw.line_gbs)} if link else {})
        )
    load_mode = st.sidebar.selectbox(
        "host experts (--load-mode)", LOAD_MODES, LOAD_MODES.index(kept("lm", "mmap", choices=LOAD_MODES)), key="lm"
    )
    keep(lm=load_mode)
    st.sidebar.caption(
        f"{hw.vram_gib:g} GiB, {hw.gpu_bw_gbs:g} GB/s, {hw.pcie_label}, {hw.backend}, {hw.ram_gib:g} GiB RAM. "
        f"{'Pinned (CUDA_Host)' if load_mode != 'mmap' else 'mmap (pageable)'} host experts. Source: {hw.source}"
    )
    return hw, time_model, load_mode


def sidebar_session(note: str) -> None:
    """The session's model and machine pickers on a page that predicts nothing with them: every page shows the
    same choices and can change them; `note` says what this page shows instead."""
    sidebar_model()
    sidebar_hardware()
    st.sidebar.caption(note)


def sidebar_serving() -> tuple[int, int]:
    """Context (-c) and concurrent streams (-np), shared by every page that predicts."""
    ctx = st.sidebar.number_input(
        "context (-c)", 512, 1_048_576, kept("ctx", 4096, int, 512, 1_048_576), 512, key="ctx"
    )
    concurrency = st.sidebar.slider("concurrent streams (-np)", 1, 8, kept("np", 1, int, 1, 8), key="np")
    keep(ctx=int(ctx), np=concurrency)
    return int(ctx), concurrency


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
