"""Model & budget: the slot plan llama-server would print, the floors, VRAM, and the command line."""

import json

import pandas as pd
import streamlit as st

from moe_model.charts import plan_slots, vram_bar
from moe_model.slot_plan import Placement, full_budget_mib, min_budget_mib, plan_cache, plan_report
from moe_model.vram import breakdown, max_budget_mib
from ui.common import friendly_errors, remember, sidebar_hardware, sidebar_model, url_value

st.header("Model & budget")
st.caption("What `--moe-cache-mib N` buys, computed exactly as llama.cpp b11549 does from the GGUF header.")

with friendly_errors():
    model, source, _ = sidebar_model()
    hw, _, _ = sidebar_hardware()
    left, right = st.columns([1, 2])
    with left:
        mode = st.radio(
            "Experts in host memory",
            ["--cpu-moe (all layers)", "--n-cpu-moe K (first K layers)"],
            index=url_value("mode", 0, int, 0, 1),
            key="mode",
        )
        k = model.n_layer
        if mode.startswith("--n-cpu-moe"):
            k = st.number_input("K", 1, model.n_layer, url_value("k", 12, int, 1, model.n_layer), key="k")
        placement = (
            Placement(cpu_moe=True) if mode.startswith("--cpu-moe") else Placement(cpu_moe=False, n_cpu_moe=int(k))
        )
        ctx = st.number_input(
            "Context (-c)", 512, 1_048_576, url_value("ctx", 4096, int, 512, 1_048_576), step=512, key="ctx"
        )
        lowest = min_budget_mib(model, placement)
        full = full_budget_mib(model, placement)
        if lowest is None:
            st.warning("No layer has all of its experts in host memory: the cache would be disabled.")
            st.stop()
        budget = st.slider(
            "--moe-cache-mib", 0, int(full * 1.05), url_value("budget", 10000, int, 0, int(full * 1.05)), key="budget"
        )
        remember(mode=int(mode.startswith("--n")), k=int(k), ctx=int(ctx), budget=budget)
        c1, c2 = st.columns(2)
        c1.metric("starts from", f"{lowest} MiB", help="the smallest --moe-cache-mib with which llama-server starts")
        c2.metric("caches all at", f"{full} MiB", help="the smallest --moe-cache-mib that caches every expert")
        fits = max_budget_mib(model, hw, placement, int(ctx))
        st.metric(
            f"largest that fits a {hw.name}",
            f"{fits} MiB",
            help="with dense weights, KV cache and an "
            "estimated compute buffer on the GPU (VRAM accounting is an estimate, see the bar)",
        )
    report = plan_report(model, budget, placement)
    with right:
        if report["starts"]:
            st.success(
                f"starts: {sum(g['n_slots'] for g in report['groups']):,} slots, "
                f"{report['device_cache_mib']:.2f} MiB of VRAM"
            )
        else:
            st.error(f"llama-server refuses to start: {report['error']}")
        st.markdown("**What llama-server prints at `-lv 4`** (computed, not a log):")
        st.code("\n".join(report["log_lines"]) or "(cache disabled: --moe-cache-mib 0)", language="text")
        st.plotly_chart(plan_slots(plan_cache(model, budget, placement)), width="stretch", key="plan_chart")
    st.subheader(f"VRAM on a {hw.name} (estimate)")
    st.plotly_chart(vram_bar(breakdown(model, hw, placement, budget, int(ctx))), width="stretch", key="vram_chart")
    groups = pd.DataFrame(report["groups"])
    st.dataframe(groups, hide_index=True, width="stretch")
    flag = "--cpu-moe" if placement.cpu_moe else f"--n-cpu-moe {int(k)}"
    st.markdown("**Command line** (with `-lv 4` so you can check the slot lines yourself):")
    st.code(f"llama-server -m {source} {flag} --moe-cache-mib {budget} -c {int(ctx)} -lv 4", language="bash")
    st.download_button("plan as JSON", json.dumps(report, indent=1), file_name="moe-cache-plan.json", key="dl_plan")
    st.caption(
        f"Model: {model.name} ({model.architecture}, {model.file_type_name}), {model.n_layer} layers, "
        f"{model.n_expert} experts, {model.n_expert_used} used, {model.expert_bytes_total / 2**30:.2f} GiB of experts."
    )
