"""The user's CPU run in the sidebar ("your CPU run": a host record from `record --host-out`, or llama-bench -ngl 0's
output of their model): uploaded once, kept for the session like logs and headers, and applied to the machine of
every page that predicts (fits.host_fit.apply_host_record), Shopping's other cards included, and to the Logs page's
calibration, which holds the CPU rate it measured and fits the rest on the logs."""

from __future__ import annotations

import streamlit as st

from moe_model.errors import MoeModelError
from moe_model.fits.calibration import TimeModel
from moe_model.fits.host_fit import HOST_SETTLED, apply_host_record, host_time_model
from moe_model.readers.llama_bench import HostInput, read_host_input, with_header_types
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from ui.cached import content_key
from ui.text import literal
from ui.uploads import keep_upload, session_uploads, uploader_key

LABEL = "your CPU run (host record or llama-bench -ngl 0 output)"


def sidebar_host_run() -> HostInput | None:
    """The CPU run this session keeps (the latest uploaded), with an uploader; one that does not read is one line."""
    held = session_uploads().of_kind("host")
    title = f"your CPU run: {literal(held[-1].name)} (in use)" if held else "your CPU run (calibrates the host)"
    with st.sidebar.expander(title, expanded=False):
        st.caption(
            "`python -m moe_model record ... --host-out host.json`, or `llama-bench -m MODEL.gguf -ngl 0` "
            "(its table, -o json or -o jsonl) saved to a file: your CPU times your model."
        )
        new = st.file_uploader(LABEL, key=uploader_key("host_upload"))
    if new is not None:
        data = new.getvalue()
        if session_uploads().get(content_key(data)) is None:
            try:
                read_host_input(data)  # a file that does not read is refused before the session keeps it
            except MoeModelError as err:
                st.sidebar.warning(f"Your CPU run: {literal(err, None)}")
                return _latest()
            keep_upload("host", new.name, data)
    return _latest()


def _latest() -> HostInput | None:
    held = session_uploads().of_kind("host")
    if not held:
        return None
    try:
        return read_host_input(held[-1].data)
    except MoeModelError as err:
        st.sidebar.warning(f"Your CPU run ({literal(held[-1].name)}): {literal(err, None)}")
        return None


def with_host_run(hw: Hardware, model: ModelSpec, given: HostInput | None) -> Hardware:
    """`hw` with its host side calibrated from the CPU run (a run of another model: one warning, `hw` unchanged)."""
    if given is None:
        return hw
    try:
        return apply_host_record(hw, with_header_types(given.record, model), model)
    except MoeModelError as err:
        st.sidebar.warning(f"Your CPU run is not used here: {literal(err, None)}")
        return hw


def calibration_machine(hw: Hardware, model: ModelSpec, given: HostInput | None) -> tuple[Hardware, tuple[str, ...]]:
    """The machine a calibration on logs starts from, and the terms it holds: with the CPU run, its host side
    measured and its CPU rate held (host_fit.HOST_SETTLED), as `calibrate --host` does."""
    calibrated = with_host_run(hw, model, given)
    return calibrated, HOST_SETTLED if calibrated is not hw else ()


def time_model_with(time_model: TimeModel, given: HostInput | None, calibrated: bool) -> TimeModel:
    """The time model a prediction with the CPU run carries: the error left out of a fit with a host record, unless
    the machine is calibrated from its own logs (that error is its own)."""
    return time_model if given is None or calibrated else host_time_model()
