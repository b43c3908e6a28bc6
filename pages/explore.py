"""Explore: drag the budget and the server settings; see hit rates, uploads, speed and where time goes."""

import numpy as np
import pandas as pd
import streamlit as st

from moe_model.charts import hit_rate_curve, layer_hit_rates, speed_curve, time_breakdown, upload_curve
from moe_model.measurements import load_reference
from moe_model.slot_plan import Placement, full_budget_mib, min_budget_mib
from moe_model.synthetic import load_presets, preset_for
from moe_model.timing import Scenario, predict, resolve, traffic_from_simulation
from moe_model.vram import max_budget_mib
from moe_model.workload import PHASE_DECODE
from ui.common import (
    cached_curve,
    cached_share_traffic,
    cached_synthetic,
    cached_trace,
    friendly_errors,
    remember,
    sidebar_hardware,
    sidebar_model,
    url_value,
)

N_CURVE = 24

st.header("Explore")
st.caption(
    "Hit rates are simulated exactly as llama.cpp's cache would serve the workload; speeds come from a "
    "calibrated time model (a model, not a measurement); diamonds are measurements."
)

with friendly_errors():
    model, source = sidebar_model()
    hw, (params, params_source) = sidebar_hardware()
    controls, charts = st.columns([1, 3])
    with controls:
        concurrency = st.slider("concurrent streams (-np)", 1, 8, url_value("np", 1, int), key="np")
        draft = st.slider("draft tokens (speculative)", 0, 8, url_value("draft", 0, int), key="draft")
        accept = st.slider("draft acceptance", 0.0, 1.0, url_value("accept", 0.7, float), 0.05, key="accept")
        share = st.select_slider(
            "--moe-cache-cpu-share (b12191)", [0.0, 0.5, 0.8, 0.9, 0.95], url_value("share", 0.0, float), key="share"
        )
        pinned = st.toggle(
            "pinned host experts (-lm none / mlock)", url_value("pinned", "False") == "True", key="pinned"
        )
        link = st.number_input("host-to-device GB/s (0: from the preset)", 0.0, 200.0, 0.0, 0.5, key="link")
        hw = hw.with_changes(pinned=pinned, **({"link_gbs": link, "pageable_gbs": link} if link else {}))
        workload_kind = st.radio("workload", ["synthetic (fitted preset)", "upload a trace"], key="workload")
        upload = (
            st.file_uploader("trace (.npz or .csv)", key="trace_upload") if workload_kind.startswith("upload") else None
        )
    placement = Placement(cpu_moe=True)
    lowest, full = min_budget_mib(model, placement) or 1, full_budget_mib(model, placement) or 1
    fits = max_budget_mib(model, hw, placement)
    with controls:
        budget = st.slider(
            "--moe-cache-mib", 0, int(full), min(url_value("budget", min(10000, fits), int), int(full)), key="budget"
        )
    remember(np=concurrency, draft=draft, accept=accept, share=share, pinned=pinned, budget=budget)
    if upload is not None:
        work = cached_trace(upload.getvalue(), upload.name, model.n_expert, concurrency, draft, accept)
        work_key = f"upload:{upload.name}:{upload.size}:{concurrency}:{draft}:{accept}"
    else:
        work = cached_synthetic(model, concurrency, draft, accept)
        name, knobs = preset_for(model.name)
        work_key = f"synthetic:{model.name}:{concurrency}:{draft}:{accept}"
        with controls:
            st.caption(f"Synthetic routing is a model: knobs {knobs} fitted to {load_presets()[name]['fitted_to']}.")
    budgets = tuple(sorted(set(np.linspace(lowest, full, N_CURVE).astype(int).tolist())))
    results = cached_curve(model, source, work, work_key, budgets, placement)
    current = cached_curve(model, source, work, work_key, (max(budget, lowest),), placement)[0]
    n_ub = int(((work.rec_phase == PHASE_DECODE) & (work.rec_layer == 0)).sum())
    speeds = []
    for r in results:
        sc = Scenario("cpu-moe", r.budget_mib, concurrency, draft, accept, share)
        layout = resolve(model, hw, sc)
        if share > 0:
            traffic = cached_share_traffic(model, source, work, work_key, hw, repr(hw), sc)
        else:
            traffic = traffic_from_simulation(model, layout, sc, r.layer_hits, r.layer_lookups, n_ub, "simulated")
        pred = predict(model, hw, params, sc, traffic, layout=layout)
        speeds.append(pred.decode_tps if pred.starts and pred.vram.fits else None)
    no_cache = {
        "--fit": predict(model, hw, params, Scenario("fit", 0, concurrency, draft, accept)),
        "--cpu-moe": predict(model, hw, params, Scenario("cpu-moe", 0, concurrency, draft, accept)),
    }
    baselines = {f"{name}, no cache": p.decode_tps for name, p in no_cache.items()}
    reference = load_reference()
    measured = reference[
        (reference["gpu"] == hw.name)
        & (reference["model"] == model.name.split(" (")[0])
        & (reference["parallel"] == concurrency)
        & reference["decode_tps"].notna()
        & (reference["placement"] == "--cpu-moe")
    ]
    logged = st.session_state.get("measured_points")
    if logged is not None and len(logged):
        measured = pd.concat([measured, logged[(logged["model"] == model.name)]], ignore_index=True)
    with charts:
        st.plotly_chart(speed_curve(budgets, speeds, baselines, measured, budget), width="stretch", key="speed")
        a, b = st.columns(2)
        a.plotly_chart(hit_rate_curve(results, budget), width="stretch", key="hits")
        b.plotly_chart(upload_curve(results, budget), width="stretch", key="uploads")
        a.plotly_chart(layer_hit_rates(current), width="stretch", key="layers")
        chosen = Scenario("cpu-moe", max(budget, lowest), concurrency, draft, accept, share)
        layout = resolve(model, hw, chosen)
        traffic = (
            cached_share_traffic(model, source, work, work_key, hw, repr(hw), chosen)
            if share > 0
            else traffic_from_simulation(model, layout, chosen, current.layer_hits, current.layer_lookups, n_ub, "sim")
        )
        compare = {**no_cache, f"+ {chosen.budget_mib} MiB": predict(model, hw, params, chosen, traffic, layout=layout)}
        b.plotly_chart(time_breakdown(compare), width="stretch", key="breakdown")
        st.caption(f"Time model parameters: {params_source}. Fit errors and residuals: the Reference page.")
    table = pd.DataFrame(
        {
            "budget_mib": [r.budget_mib for r in results],
            "starts": [r.starts for r in results],
            "hit_rate_small": [r.small.hit_rate for r in results],
            "hit_rate_large": [r.large.hit_rate for r in results],
            "uploaded_mib_per_token": [r.uploaded_bytes_per_token() / 2**20 for r in results],
            "predicted_decode_tps": speeds,
        }
    )
    st.download_button("curve as CSV", table.to_csv(index=False), file_name="moe-cache-curve.csv", key="dl_curve")
