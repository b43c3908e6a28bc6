"""The session's own logs drive the routing: the uploaded logs of the sidebar's model pin the synthetic routing
(moe_model.fits.routing_from_logs), fitted once per log set and kept for the session, on every page."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from moe_model.errors import MoeModelError
from moe_model.fits.routing_from_logs import logged_hit_rates, routing_from_logs
from moe_model.limits import MAX_SESSION_LOG_ROUTINGS
from moe_model.readers.logs import LogRun
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.logged import LogRouting
from moe_model.speed.hardware import Hardware, preset
from ui.cached import cached_log, fingerprint
from ui.text import literal
from ui.uploads import session_uploads


def same_model(run: LogRun, model: ModelSpec) -> bool:
    """A run of this model (only those are cross-checked, calibrated and fitted)."""
    return run.model.get("n_layer") == model.n_layer and run.model.get("n_expert") == model.n_expert


def log_machine(runs: Sequence[LogRun], fallback: Hardware) -> Hardware:
    """The machine the runs' logs name (one preset for all of them) in the sidebar's RAM, else the sidebar's."""
    names = {str(r.placement.get("gpu") or "").replace("NVIDIA", "").strip() for r in runs}
    if len(names) != 1 or not next(iter(names)):
        return fallback
    try:
        return preset(next(iter(names))).with_changes(ram_gib=fallback.ram_gib)
    except MoeModelError:
        return fallback


def uploaded_logs(model: ModelSpec, every: bool = False) -> list[tuple[str, list[LogRun]]]:
    """(name, runs of this model) of every log the session keeps; files that do not parse or hold no run of this
    model are left out, unless `every` (then with no runs: each upload is counted and said why it is not used)."""
    out = []
    uploads = session_uploads().of_kind("log")
    names = [u.name for u in uploads]
    for upload in uploads:
        try:
            runs = [r for r in cached_log(upload.data) if same_model(r, model)]
        except MoeModelError:
            runs = []
        if runs or every:  # two uploads of one name are told apart by their content
            out.append((upload.name if names.count(upload.name) == 1 else f"{upload.name} ({upload.digest})", runs))
    return out


def log_routing(model: ModelSpec, hw: Hardware, build: int | None = None) -> LogRouting | None:
    """The routing fitted to the session's logs of this model (None without a logged hit rate), through the
    policy of each log's build (`build` for logs that name none): fitted once per log set and build, with a
    progress bar (~20 s for six logs), then kept for the session."""
    logs = uploaded_logs(model, every=True)  # every upload, so the routing says which it did not use and why
    machine = log_machine([r for _, runs in logs for r in runs], hw)
    if not any(logged_hit_rates(runs, model, machine, name, build) for name, runs in logs):
        return None
    key = (fingerprint(model), tuple(sorted(d for d in _digests())), machine.name, build)
    fitted: dict = st.session_state.setdefault("log_routings", {})
    if key not in fitted:
        words = f"Fitting the routing to your {len(logs)} logs: each replayed at its budget by its build's policy"
        bar = st.progress(0.0, f"{words} (once per log set)...")
        try:
            routing = routing_from_logs(
                model, logs, machine, build, progress=lambda f: bar.progress(min(f, 1.0), f"{words}: {100 * f:.0f} %")
            )
        except MoeModelError as err:  # the page goes on with the model's preset, and says why
            st.warning(f"Your logs could not pin the routing ({literal(err, None)}): using the model's routing preset.")
            routing = None
        bar.empty()
        while len(fitted) >= MAX_SESSION_LOG_ROUTINGS:
            fitted.pop(next(iter(fitted)))
        fitted[key] = routing
    return fitted[key]


def _digests() -> list[str]:
    return [u.digest for u in session_uploads().of_kind("log")]
