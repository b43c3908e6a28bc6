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
from ui.cached import cached_model, content_key
from ui.state import HARDWARE, SCENARIO, forget, keep, kept, kept_setting
from ui.widgets import control, setting_input

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


MACHINE_EDITS = (*(s.url_key for s in HARDWARE.values() if s.url_key), "link")


def _edit(box, name: str, default, gpu: str):
    """One machine field's declared widget, starting at the preset's value; kept across pages and in the URL."""
    s = HARDWARE[name]
    value = setting_input(box, s, kept_setting(s, start=default), f"hw_{s.url_key}_{gpu}")
    keep(**{s.url_key: value})
    return value


def _link_edit(hw: Hardware, gpu: str) -> float:
    """One measured host-to-device rate for both copies (0: derived from the machine), up to the link's line rate."""
    label, top = "measured host-to-device GB/s (0: from the machine)", hw.line_gbs
    value = st.number_input(label, 0.0, top, kept("link", 0.0, float, 0.0, top), 0.5, key=f"hw_link_{gpu}")
    keep(link=value)
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
    calibrated = st.session_state.get("machine")  # a MachineFit from the Logs page
    if calibrated is not None and st.sidebar.toggle(f"use my calibrated machine ({calibrated.hardware.name})", True):
        hw = calibrated.hardware
        time_model = TimeModel(
            time_model.params, calibrated.rel_error, "your machine, calibrated from your logs (Logs page)"
        )
        name = f"calibrated {hw.name}"  # its own figures: the preset's kept edits do not apply to it
    else:
        hw = preset(name)
    if st.session_state["kept"].get("machine_source", name) != name:
        forget(*MACHINE_EDITS)
        if calibrated is not None and name.startswith("calibrated"):
            keep(**{SCENARIO["load_mode"].url_key: calibrated.load_mode})  # until the user picks another
    st.session_state["kept"]["machine_source"] = name
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
