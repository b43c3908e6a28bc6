"""Logs: what the cache really did, from llama-server -lv 4 logs; cross-checked; calibrate on your runs."""

from pathlib import Path

import pandas as pd
import streamlit as st

from moe_model.answers.before_calibration import time_model_before, uncalibrated
from moe_model.charts import measured_curves
from moe_model.fits.log_timings import crosscheck, point_from_run
from moe_model.fits.machine_fit import calibrate_logs
from moe_model.fits.routing_from_logs import unused_logs
from moe_model.resources import data_path
from ui.cached import cached_log, content_key
from ui.host_run import calibration_machine, sidebar_host_run
from ui.log_checks import checked_logs
from ui.session_logs import log_machine, same_model, uploaded_logs
from ui.sidebar import sidebar_build, sidebar_hardware, sidebar_model
from ui.startup import through_app
from ui.state import keep, kept
from ui.tables import before_calibration_table, calibration_table, readable, run_summary
from ui.text import chart_literal, literal
from ui.uploads import keep_upload, session_uploads, uploader_key
from ui.widgets import friendly_errors

through_app()  # a link opened on a fresh server runs app.py first (ui.startup)

EXAMPLES = {p.name: p for p in sorted(data_path("logs").glob("*.log"))} | {
    f"real H200 run: {p.name}": p for p in sorted(data_path("groundtruth", "logs").glob("server_*.log"))
}

st.header("Logs")
st.caption(
    "Start llama-server with `-lv 4` (cache size and slots at start-up; hit rates when it stops cleanly). "
    "Upload one or more logs, or pick an example."
)


def example_picks(have_uploads: bool) -> list[str]:
    """Bundled examples, kept across pages and in the URL; the T4 example only while nothing is uploaded."""
    default = "" if have_uploads else "t4-cpumoe-10000.log"
    chosen = [n for n in kept("log_examples", default).split(";") if n in EXAMPLES]
    picks = st.multiselect(
        "or bundled examples (assembled T4 examples; real H200 runs of a small model)",
        list(EXAMPLES),
        default=None if "log_examples" in st.session_state else chosen,  # a value set above wins
        key="log_examples",
    )
    keep(log_examples=";".join(picks))
    return picks


def show_before_calibration(files: list[tuple[str, bytes]], matching: list, model, hw, host_run, build) -> None:
    """Each run of the sidebar's model beside the range predicted for its settings before calibration: on the
    machine calibrate starts from (the logs' GPU, the CPU run applied), with none of this calibration."""
    machine, held = calibration_machine(log_machine(matching, uncalibrated(hw)), model, host_run)
    result = checked_logs(files, model, machine, time_model_before(bool(held)), build)
    st.subheader("Did each run land in the range predicted before calibration?")
    st.markdown(f"**{literal(result.summary, None)}**")
    if result.runs:
        st.dataframe(before_calibration_table(result), hide_index=True, width="stretch", key="before_calibration")
    st.caption(
        f"Predicted for each run's own settings (from its log) with {literal(result.predicted_with, None)}; a run "
        "timed on its server's first request is set beside the first-request figure. Outside: how far past the "
        "nearer end of the range."
    )
    for skipped in result.not_checked:
        st.caption(f"Not checked: {literal(skipped.name)}: {literal(skipped.why, None)}.")


with friendly_errors():
    model, source, _ = sidebar_model()
    hw, time_model, _ = sidebar_hardware()
    build = sidebar_build()
    host_run = sidebar_host_run()  # your CPU run: the calibration holds its CPU rate and fits the rest
    st.sidebar.caption(
        "A log's own `build:` line wins, then a cache size line in MiB only (b11480-b12169: the plain LRU); "
        "the build above is taken for the other logs."
    )
    new = st.file_uploader(
        "llama-server / llama-cli logs (kept for this session until removed in the sidebar)",
        accept_multiple_files=True,
        key=uploader_key("log_upload"),
    )
    held = {u.digest for u in session_uploads().of_kind("log")}
    added = [keep_upload("log", u.name, u.getvalue()) for u in new or [] if content_key(u.getvalue()) not in held]
    if any(added):
        keep(log_examples="")  # an upload replaces the bundled example (it stays one click away)
        st.session_state["log_examples"] = []  # set, not dropped: the browser's chips follow a set value only
        st.rerun()  # the sidebar, drawn before these were kept, names them too
    kept_logs = session_uploads().of_kind("log")
    picks = example_picks(bool(kept_logs))
    files = [(u.name, u.data) for u in kept_logs] + [(n, EXAMPLES[n].read_bytes()) for n in picks]
    names = [name for name, _ in files]  # uploads of one name from two folders are told apart by position
    files = [(f"{name} ({i + 1})" if names.count(name) > 1 else name, data) for i, (name, data) in enumerate(files)]
    points, all_runs, parsed = [], [], []
    for name, data in files:
        try:
            runs = cached_log(data)
        except Exception as err:  # noqa: BLE001 - one bad file must not hide the others
            st.error(f"{literal(name)}: {literal(err, None)}")
            continue
        parsed.append((name, runs))
        runs = [r for r in runs if r.program != "unknown"]
        if not runs:  # e.g. a pipeline log that only mentions llama.cpp
            st.warning(
                f"{literal(name)}: no llama-server or llama-cli run in this file (no start-up lines): nothing to show."
            )
            continue
        for run in runs:
            all_runs.append(run)
            with st.expander(
                f"{literal(name)}, run {run.index + 1}: {literal(run.program)}"
                + ("" if run.starts else " — did not start"),
                expanded=len(files) == 1,
            ):
                st.dataframe(run_summary(run), hide_index=True, width="stretch")
                for note in run.notes():
                    st.info(literal(note, None))
                for w in run.warnings:
                    st.warning(literal(w, None))
                for e in run.errors:
                    st.error(literal(e, None))
                budget = None
                if same_model(run, model):
                    budget, lines = crosscheck(run, model, build=build)
                    st.markdown(f"**Cross-check against {literal(Path(source).name)}** (budget {budget} MiB):")
                    rows = [
                        {
                            "what": c.what,
                            "logged": c.logged,
                            "header says": c.predicted,
                            "ok": {True: "ok", False: "MISMATCH", None: "info"}[c.ok],
                        }
                        for c in lines
                    ]
                    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
                else:
                    st.caption("Pick the matching model in the sidebar to cross-check the logged slots.")
                point = point_from_run(run, name, budget)
                points.append(point)
    if points:
        frame = pd.DataFrame(points)
        st.subheader("Measured points")
        st.dataframe(readable(frame), hide_index=True, width="stretch")
        st.session_state["measured_points"] = frame.dropna(subset=["decode_tps", "moe_cache_mib"])
        st.caption("These points are drawn on the Explore page's speed chart for the same model and GPU.")
        st.download_button("points as CSV", frame.to_csv(index=False), file_name="measured-points.csv", key="dl_points")
        if frame["moe_cache_mib"].notna().sum() > 1:
            st.plotly_chart(measured_curves(chart_literal(frame)), width="stretch", key="measured_curve")
    matching = [r for r in all_runs if same_model(r, model)]
    if matching:
        read = {name for name, _ in parsed}
        show_before_calibration([(n, d) for n, d in files if n in read], matching, model, hw, host_run, build)
    if uploaded_logs(model):
        every = uploaded_logs(model, every=True)
        unused = unused_logs(every, model, log_machine(matching, hw), build)
        st.caption(
            f"{len(every) - len(unused)} of your {len(every)} uploaded logs pin the routing of {literal(model.name)} "
            "on every page that predicts (their decode hit rates, fitted once per log set when a page first needs "
            "it, ~20 s)." + "".join(f" Not used: {literal(name)}: {literal(why, None)}." for name, why in unused)
        )
    if matching and st.button("Calibrate the time model on these runs", key="calibrate"):
        machine, held = calibration_machine(log_machine(matching, hw), model, host_run)
        st.caption(
            f"Calibrating {len(matching)} run(s) of {literal(model.name)} on {literal(machine.name)} "
            + (
                "(the GPU the logs name)."
                if machine is not hw
                else "(the sidebar's machine: the logs name none or several)."
            )
        )
        logs = [(name, [r for r in runs if same_model(r, model)]) for name, runs in parsed]
        result = calibrate_logs(
            [(name, runs) for name, runs in logs if runs], model, machine, time_model.params, build, held
        )
        st.table(calibration_table(result))
        st.caption(result.request_note)
        if result.held:
            st.caption(
                f"Held from {literal(host_run.described)}: the CPU expert rate "
                f"{result.hardware.cpu_expert_gbs:,.1f} GB/s at {result.hardware.cpu_expert_threads} threads "
                "(measured, not fitted)."
            )
        if result.accepted:
            st.session_state["machine"] = result
            st.success(
                f"Fitted {result.fitted_words} ({result.reason}; load mode {result.load_mode}; {result.engine} "
                "runs): every page now "
                f"uses this machine (sidebar); predictions on it carry ±{100 * result.rel_error:.1f} % (its runs' "
                "error when left out)."
            )
        else:
            st.error(f"Calibration refused: {literal(result.reason, None)}. Nothing else uses it.")
        if result.class_lru:
            reading = ", ".join(f"{k} {v}" for k, v in result.class_lru["reading"].items())
            st.caption(
                f"ClassLRU reading nearest these b12170+ runs' hit rates: {reading} "
                f"({result.class_lru['rms_points']:.1f} points RMS; `calibrate` keeps it in the machine file)."
            )
