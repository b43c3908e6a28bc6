"""The pickers every page shares in the sidebar: the model, the machine (and time model), the serving settings
and the placement, each kept across pages and in the URL (ui.state)."""

from __future__ import annotations

import os

import streamlit as st

from moe_model.errors import LinkRateError, MoeModelError, UnknownGpuError, app_words
from moe_model.fits.calibration import TimeModel, default_time_model
from moe_model.fits.machine_fit import MachineFit
from moe_model.limits import shown
from moe_model.llama.builds import named_release_note, parse_build
from moe_model.llama.slot_plan import Placement
from moe_model.readers.http import prefix_command
from moe_model.readers.model_spec import ModelSpec
from moe_model.readers.sources import (
    SourcePolicy,
    deployment_settings,
    is_url_text,
    policy_from_env,
    resolve_source,
)
from moe_model.resources import data_path
from moe_model.speed.hardware import PRESETS, Hardware, other_card, preset, preset_match, unknown_gpu
from moe_model.speed.host_parts import HOST_BOX, PART_INPUTS, described, form_statements
from moe_model.speed.scenario import Scenario, context_for_depth
from ui.cached import cached_model, content_key, fingerprint
from ui.machine import CARD_EDITS, HOST_EDITS, edits_to_forget, with_edits
from ui.state import HARDWARE, SCENARIO, forget, keep, kept, kept_setting, kept_toggle
from ui.text import literal
from ui.uploads import (
    URL_PREFIX,
    Upload,
    keep_upload,
    parse_url_value,
    session_uploads,
    sidebar_uploads,
    uploader_key,
)
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


UPLOAD_HEADER = "upload a header prefix"
FROM_PATH = "URL or local path"


def _header_labels(headers: list[Upload]) -> dict[str, Upload]:
    """Each kept header under its name; two of one name told apart by their digest."""
    names = [u.name for u in headers]
    return {u.label if names.count(u.name) == 1 else f"{u.name} ({u.digest}, uploaded)": u for u in headers}


def _label_of(headers: dict[str, Upload], digest: str) -> str | None:
    return next((label for label, u in headers.items() if u.digest == digest), None)


def _linked_model(models: list[str], headers: dict[str, Upload]) -> str:
    """The option the kept or linked model names: a bundled model, a kept upload, or the upload widget when a
    link names an upload this session does not hold (said, never replaced by another model silently)."""
    raw = str(st.session_state.setdefault("kept", {}).get("model", st.query_params.get("model", DEFAULT_MODEL)))
    if _is_path(raw, models):
        return FROM_PATH if _reads(raw) else DEFAULT_MODEL
    linked = parse_url_value(raw)
    if linked is None:
        return kept("model", DEFAULT_MODEL, choices=models)
    held = _label_of(headers, linked[0])
    if held is not None:
        return held
    st.sidebar.warning(f"This view used an uploaded header ({literal(linked[1])}): upload it again to see it.")
    return UPLOAD_HEADER


def _is_path(raw: str, models: list[str]) -> bool:
    """Whether a kept or linked model names a URL or a path (a bundled model's name has no slash)."""
    return raw not in models and not raw.startswith(URL_PREFIX) and (is_url_text(raw) or "/" in raw or "\\" in raw)


def _reads(raw: str) -> bool:
    """Whether a URL or path a link (or this session) names reads here; one that does not is said in one line
    and dropped from the URL, the default model shown meanwhile."""
    policy = source_policy()
    try:
        cached_model(resolve_source(raw, policy), policy)
    except MoeModelError as err:
        st.sidebar.warning(
            f"This view's model ({literal(raw)}) cannot be read here: {literal(err, None)}. Showing the "
            f"{literal(DEFAULT_MODEL)}."
        )
        forget("model")
        return False
    return True


def _kept_path(models: list[str]) -> str:
    """The URL or path chosen on another page this session or in the link, else nothing."""
    raw = str(st.session_state.setdefault("kept", {}).get("model", st.query_params.get("model", "")))
    return raw if _is_path(raw, models) else ""


def _default_model() -> tuple[ModelSpec, str, str]:
    return cached_model(str(MODELS / DEFAULT_MODEL)), DEFAULT_MODEL, DEFAULT_MODEL


def _path_model(models: list[str]) -> tuple[ModelSpec, str, str]:
    """A model read from a URL or a path: kept for every page and in the URL once it reads, like an upload; one
    that does not read here (refused, missing, another deployment's path) says why in one line, and the rest of
    the sidebar and the page go on with the default model."""
    label = "https://.../model.gguf or /path/model.gguf"
    text = st.sidebar.text_input(label, _kept_path(models), key="model_path").strip()
    if not text:
        return _default_model()
    policy = source_policy()
    try:
        model = cached_model(resolve_source(text, policy), policy)
    except MoeModelError as err:
        st.sidebar.error(f"{literal(err, None)}. Showing the {literal(DEFAULT_MODEL)} meanwhile.")  # no echo: no oracle
        return _default_model()
    keep(model=text)
    return model, text, text


def sidebar_model() -> tuple[ModelSpec, str, str]:
    """The model picker shared by every page: bundled, an uploaded header prefix (kept for the session), a URL
    or a path.

    Returns the model, the name to show (and put in command lines), and a key naming its content."""
    models = bundled_models()
    kept_headers = _header_labels(session_uploads().of_kind("header"))
    options = [*models, *kept_headers, UPLOAD_HEADER, FROM_PATH]
    choice = _linked_model(models, kept_headers)
    uploaded = st.session_state.pop("model_uploaded", None)  # the digest of a header kept on the last run
    index = options.index(choice) if choice in options else 0
    if uploaded is not None:  # chosen at once: the picker names it, not "upload a header prefix"
        st.session_state["model_choice"] = _label_of(kept_headers, uploaded) or choice
        index = 0  # the state names the choice (a start index beside it is logged as a conflict)
    kind = st.sidebar.selectbox("Model", options, index=index, key="model_choice")
    sidebar_uploads()
    if kind in kept_headers:
        return _uploaded_model(kept_headers[kind])
    if kind == UPLOAD_HEADER:
        st.sidebar.caption(f"Make one with `{prefix_command()}` (split models: the first shard).")
        upload = st.sidebar.file_uploader("GGUF header prefix", type=None, key=uploader_key("model_upload"))
        if upload is None:
            st.sidebar.info("No file yet: showing the bundled sample.")
            return _default_model()
        data = upload.getvalue()
        held = session_uploads().get(content_key(data))
        if held is not None:  # a header this session holds already: picked by its name
            st.session_state["model_uploaded"] = held.digest
            st.rerun()
        try:  # a header that does not parse is refused before the session keeps it; the sidebar goes on
            cached_model(data)
        except MoeModelError as err:
            st.sidebar.error(f"{literal(upload.name)}: {literal(err, None)}. Showing the {literal(DEFAULT_MODEL)}.")
            return _default_model()
        if (held := keep_upload("header", upload.name, data)) is not None:
            st.session_state["model_uploaded"] = held.digest
            st.rerun()  # the picker and the sidebar's list of uploads, drawn above, name it too
        return cached_model(data), upload.name, f"upload:{content_key(data)}"
    if kind == FROM_PATH:
        return _path_model(models)
    keep(model=kind)
    return cached_model(str(MODELS / kind)), kind, kind


MACHINE_EDITS = (*HOST_EDITS, *CARD_EDITS)  # every kept machine edit: the host's, then the card's


def _uploaded_model(upload: Upload) -> tuple[ModelSpec, str, str]:
    keep(model=upload.url_value)  # a link says an upload is needed, and which
    return cached_model(upload.data), upload.name, f"upload:{upload.digest}"


def _edit(box, name: str, default, base_id: str):
    """One machine field's declared widget, starting at the base machine's value; kept across pages and in the URL."""
    s = HARDWARE[name]
    value = setting_input(box, s, kept_setting(s, start=default), f"hw_{s.url_key}_{base_id}")
    keep(**{s.url_key: value})
    return value


def _link_edit(hw: Hardware, base_id: str) -> float:
    """One measured host-to-device rate for both copies (0: derived from the machine), up to the link's line rate."""
    label, top = "measured host-to-device GB/s (0: from the machine)", hw.line_gbs
    value = st.number_input(label, 0.0, top, kept("link", 0.0, float, 0.0, top), 0.5, key=f"hw_link_{base_id}")
    keep(link=value)
    return value


def _calibrated() -> MachineFit | None:
    """The machine calibrated on the Logs page this session; a link that used one says it is not here."""
    calibrated = st.session_state.get("machine")
    if calibrated is None and st.query_params.get("calibrated") in ("True", "1"):
        st.sidebar.warning("This view used a machine calibrated from your logs: calibrate it again on Logs.")
    return calibrated


def _base_machine(base_id: str) -> Hardware | None:
    """The machine a base id names: a preset, or this session's calibrated machine."""
    calibrated = st.session_state.get("machine")
    if base_id.startswith("calibrated:"):
        return calibrated.hardware if calibrated else None
    return PRESETS.get(base_id)


def _switch_base(base_id: str, calibrated: bool) -> bool:
    """Another base machine (a GPU picked, the calibrated machine switched on or off): drop the edits that were
    the old card's, and the host's unless the user made it theirs (ui.machine). True when the base changed."""
    old_id = st.session_state.get("hw_base")
    switched = old_id is not None and old_id != base_id
    if switched:
        forget(*edits_to_forget(st.session_state.setdefault("kept", {}), _base_machine(old_id), calibrated))
    st.session_state["hw_base"] = base_id
    return switched


def _apply_preset_host(base_id: str) -> None:
    """The button's callback: the preset's own host figures replace the kept ones (and the boxes showing them)."""
    forget(*HOST_EDITS)
    for key in HOST_EDITS:
        st.session_state.pop(f"hw_{key}_{base_id}", None)


def _linked_gpu() -> None:
    """A link's `gpu=` as users type it ("4070 ti super"): kept as its preset; a name no preset has gets the
    nearest presets and how to describe the card, and the default GPU."""
    typed = st.query_params.get("gpu")
    if typed is None or typed in PRESETS or "gpu" in st.session_state.get("kept", {}):
        return
    typed = shown(typed)  # a name past the echo limit is no card's: matched and named cut
    try:
        keep(gpu=preset_match(typed).hardware.name)
    except MoeModelError as err:
        why = unknown_gpu(typed, app=True) if isinstance(err, UnknownGpuError) else str(err)
        st.sidebar.warning(f"The link's gpu: {literal(why, None)}. Showing the {DEFAULT_GPU} meanwhile.")
        forget("gpu")


def sidebar_hardware() -> tuple[Hardware, TimeModel, str]:
    """The machine (a preset, every field editable, or the one calibrated on the Logs page), the time model
    and the load mode (-lm) of the host experts; all kept across pages and in the URL. Picking another GPU
    keeps the host (RAM, memory bandwidth, threads, link) once the user has edited it."""
    names = list(PRESETS)
    _linked_gpu()
    chosen = kept("gpu", DEFAULT_GPU, choices=names)
    not_listed = f"Not listed? {other_card('the nearest card', app=True)}."
    name = st.sidebar.selectbox("GPU", names, index=names.index(chosen), key="gpu", help=not_listed)
    keep(gpu=name)
    time_model = default_time_model()
    calibrated = _calibrated()  # a MachineFit from the Logs page
    use_calibrated = calibrated is not None and kept_toggle(
        st.sidebar, f"use my calibrated machine ({literal(calibrated.hardware.name)})", "calibrated", True
    )
    if use_calibrated:
        hw = calibrated.hardware
        base_id = f"calibrated:{fingerprint(hw)}"
        time_model = TimeModel(
            time_model.params,
            calibrated.rel_error,
            "your machine, calibrated from your logs (Logs page)",
            time_model.prefill_rel_error,  # the prompt's range stays the one measured across machines
        )
    else:
        hw, base_id = preset(name), name
    st.session_state["machine_in_use"] = use_calibrated
    if _switch_base(base_id, use_calibrated) and use_calibrated:
        keep(**{SCENARIO["load_mode"].url_key: calibrated.load_mode})  # the logs' load mode, until the user picks
        if calibrated.build:  # and the logs' build: its policy produced the hit rates the machine was fitted on
            keep(**{SCENARIO["build"].url_key: calibrated.build})
    ram = _edit(st.sidebar, "ram_gib", float(hw.ram_gib), base_id)
    with st.sidebar.expander("edit this machine"):
        link = _link_edit(hw, base_id)
        vram = _edit(st, "vram_gib", float(hw.vram_gib), base_id)
        gpu_bw = _edit(st, "gpu_bw_gbs", float(hw.gpu_bw_gbs), base_id)
        gen = _edit(st, "pcie_gen", hw.pcie_gen, base_id)
        lanes = _edit(st, "pcie_lanes", hw.pcie_lanes, base_id)
        shown = {"ram_gib": float(hw.ram_gib), "vram_gib": float(hw.vram_gib), "gpu_bw_gbs": float(hw.gpu_bw_gbs)}
        shown |= {"pcie_gen": hw.pcie_gen, "pcie_lanes": hw.pcie_lanes}
        shown |= {"mem_bw_gbs": float(hw.cpu_bw_gbs), "threads": int(hw.cpu_threads)}
        edits = {"ram_gib": ram, "vram_gib": vram, "gpu_bw_gbs": gpu_bw, "pcie_gen": gen, "pcie_lanes": lanes}
        edits |= {name: _edit(st, name, shown[name], base_id) for name in ("mem_bw_gbs", "threads")}
        stated = form_statements(shown, edits)  # what counts as stated: one library rule with the CLI's flags
        try:
            hw = with_edits(hw, link, **stated)
        except LinkRateError as err:  # the CLI's rule: refused; here said, and the rates derived from the link
            st.warning(f"{literal(err, None)}. Priced with the rates derived from the link until the box is set again.")
            hw = with_edits(hw, 0.0, **stated)
        if not use_calibrated:
            st.button(
                f"use the {name} preset's host",
                key="preset_host",
                on_click=_apply_preset_host,
                args=(base_id,),
                help="RAM, host memory, threads and link as the preset states them (picking a GPU keeps yours)",
            )
    hw = _host_parts(hw)
    pick = calibrated.class_lru if use_calibrated else None  # the ClassLRU reading its b12170+ logs picked
    st.session_state["class_lru_reading"] = tuple(pick["reading"].items()) if pick else ()
    load_mode = control(st.sidebar, SCENARIO["load_mode"])
    held = "mmap'd (pageable)" if load_mode == "mmap" else "pinned (CUDA_Host)"
    st.sidebar.caption(
        f"{hw.vram_gib:g} GiB, {hw.gpu_bw_gbs:g} GB/s, {hw.pcie_label}, {hw.backend}, {hw.ram_gib:g} GiB RAM. "
        f"Host experts are {held}. "
        f"Source: {literal(hw.source, None)}"
    )
    return hw, time_model, load_mode


HOST_PARTS = {key: part.box for key, part in PART_INPUTS.items()}  # declared once with their flags (host_parts)


def _host_parts(hw: Hardware) -> Hardware:
    """The host as the user knows it (CPU, RAM kit, slot, drive): each part given narrows the range; one that is
    not understood is named in one line and left out. Kept across pages and in the URL."""
    with st.sidebar.expander(f"{HOST_BOX} (narrows the range)"):
        typed = {
            key: st.text_input(label, kept(key, ""), key=f"host_{key}").strip() for key, label in HOST_PARTS.items()
        }
    keep(**typed)
    for key, text in typed.items():
        if not text:
            continue
        try:
            hw = described(hw, **{key: text})
        except MoeModelError as err:
            st.sidebar.warning(f"{HOST_PARTS[key].split(' (')[0]}: {literal(app_words(err), None)}")
    return hw


def sidebar_session(note: str) -> None:
    """The session's model and machine pickers on a page that predicts nothing with them: every page shows the
    same choices and can change them; `note` says what this page shows instead."""
    sidebar_model()
    sidebar_hardware()
    st.sidebar.caption(note)


def _read_build(text) -> tuple[int | None, str]:
    """A build box's text as a build number by the CLI's rule (moe_model.llama.builds.parse_build), or why not."""
    try:
        return parse_build(str(text)), ""
    except MoeModelError as err:
        return None, str(err)


def _typed_build() -> None:
    """The build box's callback: a text that reads as a build is kept before the page runs (a refused one is not)."""
    key = SCENARIO["build"].url_key
    build, _ = _read_build(st.session_state[key])
    if build is not None:
        st.session_state.setdefault("kept", {})[key] = build


def sidebar_build() -> int:
    """The llama.cpp build the server runs (b12170+: ClassLRU, b11480-b12169: the exact LRU), typed as the CLI's
    `--build` takes it (b12569, 12569 or a named release such as v1.0.0), kept across pages and in the URL; a text
    that is no build is refused in one line, the last build kept meanwhile."""
    s = SCENARIO["build"]
    linked = _read_build(st.query_params.get(s.url_key, ""))[0]  # a link's b12569 or v1.0.0 (else warned below)
    if linked is not None and s.url_key not in st.session_state.setdefault("kept", {}):
        keep(**{s.url_key: linked})
    build, state = int(kept_setting(s)), st.session_state
    if _read_build(state.get(s.url_key))[0] not in (None, build):  # another control kept a build (calibrated logs)
        state[s.url_key] = f"b{build}"
    text = st.sidebar.text_input(s.widget.label, f"b{build}", key=s.url_key, on_change=_typed_build, help=s.help)
    typed, why = _read_build(text)
    if typed is None:
        st.sidebar.error(f"{literal(why, None)}. Priced with b{build} meanwhile.")
        return build
    if note := named_release_note(text):
        st.sidebar.caption(note)
    keep(**{s.url_key: typed})
    return typed


def sidebar_calibrated() -> bool:
    """Whether the page's machine is the one calibrated from the session's logs (after sidebar_hardware)."""
    return bool(st.session_state.get("machine_in_use"))


def sidebar_reading() -> tuple[tuple[str, str], ...]:
    """ClassLRU's reading the calibrated machine's logs picked (after sidebar_hardware), () for none: pages replay it
    alone instead of the band."""
    return st.session_state.get("class_lru_reading", ())


def policy_caption(sc: Scenario) -> str:
    """One line naming the policy that produced a page's hit rates, exact or modelled, and the build."""
    return sc.hit_rate_wording.line


def sidebar_serving(prompt: bool = False) -> dict:
    """Context (-c), concurrent streams (-np) and the context depth decoding reads, shared by every page that
    predicts; `prompt`: the prompt's length too (pages that show prompt speed). Returns them as Scenario fields,
    the context raised where it cannot hold every stream at that depth (said here): the VRAM verdict counts it."""
    chosen, concurrency = control(st.sidebar, SCENARIO["n_ctx"]), control(st.sidebar, SCENARIO["concurrency"])
    depth = control(st.sidebar, SCENARIO["depth"], SCENARIO["n_ctx"].widget.hi // concurrency)  # -c can hold it
    n_ctx = context_for_depth(chosen, depth, concurrency)
    if n_ctx > chosen:
        st.sidebar.caption(
            f"Context raised to -c {n_ctx:,}: {concurrency} stream(s) {depth:,} tokens deep need it "
            "(its KV cache is in the VRAM verdict and the commands)."
        )
    fields = {"n_ctx": n_ctx, "concurrency": concurrency, "depth": depth}
    if not prompt:
        return fields
    prompt_tokens = control(st.sidebar, SCENARIO["prompt_tokens"])
    if depth < prompt_tokens:
        st.sidebar.caption(
            f"The depth is below the prompt: decoding right after a {prompt_tokens:,}-token prompt reads at least "
            f"{prompt_tokens:,} tokens (a shorter depth models a shorter context than this prompt makes)."
        )
    return fields | {"prompt_tokens": prompt_tokens}


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


def setting_controls(sc: Scenario) -> dict:
    """The kept value of every control that sets `sc` (placement, K, budget, load mode, CPU share, context,
    streams, prompt, depth), under each control's key: what "apply" writes, so that every page shows that setting."""
    p = sc.placement
    placement = 2 if p.fit else 1 if p.n_cpu_moe and not p.cpu_moe else 0
    fields = ("budget_mib", "load_mode", "cpu_share", "n_ctx", "concurrency", "prompt_tokens")
    out = {"placement": placement} | {SCENARIO[f].url_key: getattr(sc, f) for f in fields}
    out[SCENARIO["depth"].url_key] = sc.context_depth
    return out | ({"k": p.n_cpu_moe} if placement == 1 else {})


def apply_setting(sc: Scenario) -> None:
    """A button's callback: every control set to `sc` (kept, in the URL and in the widgets themselves)."""
    controls = setting_controls(sc)
    keep(**controls)
    budget = SCENARIO["budget_mib"].url_key
    widgets = {**controls, "placement": PLACEMENTS[controls["placement"]], f"{budget}_box": controls[budget]}
    for key, value in widgets.items():
        st.session_state[key] = value
    st.session_state.pop(budget, None)  # the slider starts again at the kept budget, clamped to what this page fits
