"""Model & budget: does it fit (VRAM and RAM), the slot plan llama-server would print, and the command line."""

import json
from dataclasses import replace

import pandas as pd
import streamlit as st

from moe_model.answers.fit_advice import would_fit
from moe_model.answers.known_problems import known_problems
from moe_model.answers.recommend import command_line
from moe_model.charts import plan_slots, vram_bar
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib, plan_cache, plan_report
from moe_model.pricing.curve import slider_top
from moe_model.speed.scenario import cache_room_mib, resolve
from ui.request import app_scenario
from ui.sidebar import (
    policy_caption,
    sidebar_build,
    sidebar_hardware,
    sidebar_model,
    sidebar_placement,
    sidebar_serving,
)
from ui.startup import through_app
from ui.tables import readable
from ui.text import literal
from ui.widgets import budget_slider, fit_verdicts, friendly_errors, model_flag_path, runnable

through_app()  # a link opened on a fresh server runs app.py first (ui.startup)

st.header("Model & budget")
st.caption("This page computes what `--moe-cache-mib N` buys from the GGUF header, exactly as llama.cpp b11549 does.")

with friendly_errors():
    model, source, model_key = sidebar_model()
    hw, _, load_mode = sidebar_hardware()
    serving = sidebar_serving()  # the context raised to hold the depth decoding reads: its KV cache is in VRAM
    placement_name, chosen = sidebar_placement(model)
    build = sidebar_build()
    base = app_scenario(serving, build, chosen, load_mode)
    placement = resolve(model, hw, base).placement  # --fit: its layer count
    left, right = st.columns([1, 2])
    with left:
        lowest = min_budget_mib(model, placement)
        full = full_budget_mib(model, placement)
        if lowest is None:
            st.warning("No layer has all of its experts in host memory: the cache would be disabled.")
            st.stop()
        fits = cache_room_mib(model, hw, base, placement)
        top = slider_top(lowest, full, fits)
        budget = budget_slider(st, top)
        c1, c2 = st.columns(2)
        c1.metric("starts from", f"{lowest:,} MiB", help="the smallest --moe-cache-mib with which llama-server starts")
        c2.metric("caches all at", f"{full:,} MiB", help="the smallest --moe-cache-mib that caches every expert")
        st.metric(
            f"largest that fits a {literal(hw.name)}",
            f"{fits:,} MiB" if fits >= lowest else "none",
            help="with dense weights, KV cache and an "
            "estimated compute buffer on the GPU (VRAM accounting is an estimate, see the bar)",
        )
        if fits < lowest:
            st.caption("No cache fits beside this placement: free VRAM with more layers in host memory.")
    sc = base.with_budget(budget)
    layout = resolve(model, hw, sc)
    for problem in known_problems(model, sc, layout):
        st.warning(f"Known problem: {problem}.")  # the library's words on this setting: no visitor text
    st.caption(policy_caption(sc) + " The slot plan below is the same in every build since b11480.")
    placement = replace(layout.placement, fit=False)  # --fit: the layers it moves to make room for this cache
    report = plan_report(model, budget, placement)
    with right:
        host = layout.ram
        fits = report["starts"] and layout.vram.fits and host.fits
        usable = fit_verdicts(layout.vram, host, () if fits else would_fit(model, hw, sc))
        if not report["starts"]:
            st.error(f"llama-server refuses to start: {literal(report['error'], None)}")
        elif usable:
            st.success(
                f"starts: {sum(g['n_slots'] for g in report['groups']):,} slots, "
                f"{report['device_cache_mib']:,.2f} MiB of VRAM"
            )
        st.markdown("**What llama-server prints at `-lv 4`** (computed, not a log):")
        st.code("\n".join(report["log_lines"]) or "(cache disabled: --moe-cache-mib 0)", language="text")
        st.plotly_chart(plan_slots(plan_cache(model, budget, placement)), width="stretch", key="plan_chart")
    st.subheader(f"VRAM on a {literal(hw.name)} (estimate)")
    st.plotly_chart(vram_bar(layout.vram), width="stretch", key="vram_chart")
    groups = pd.DataFrame(report["groups"]).round({"percent": 1})
    st.dataframe(readable(groups), hide_index=True, width="stretch")
    if report["starts"] and usable:
        st.markdown("**Command line** (with `-lv 4` so you can check the slot lines yourself):")
        command = command_line(model_flag_path(source, model_key), sc, chosen)
        st.code(runnable(command, source), language="bash", wrap_lines=True)
    else:
        st.caption("No command: this setting does not start or does not fit (see above).")
    st.download_button("plan as JSON", json.dumps(report, indent=1), file_name="moe-cache-plan.json", key="dl_plan")
    st.caption(
        f"Model: {literal(model.name)} ({literal(model.architecture)}, {literal(model.file_type_name)}), "
        f"{model.n_layer} layers, "
        f"{model.n_expert} experts, {model.n_expert_used} used, {model.expert_bytes_total / 2**30:.2f} GiB of experts."
    )
