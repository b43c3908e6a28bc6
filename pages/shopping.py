"""Hardware shopping: will this card run this model well? Best predicted setting per card, side by side."""

import numpy as np
import pandas as pd
import streamlit as st

from moe_model.calibration import params_for
from moe_model.charts import shopping_bars
from moe_model.hardware import PRESETS, Hardware
from moe_model.recommend import best_per_card
from moe_model.slot_plan import Placement, full_budget_mib, min_budget_mib
from moe_model.timing import Scenario
from ui.common import cached_curve, cached_synthetic, friendly_errors, sidebar_model

st.header("Hardware shopping")
st.caption(
    "Predicted with the calibrated time model and simulated hit rates (a model, not a measurement). "
    "Cards never measured use the T4-calibrated overheads."
)

with friendly_errors():
    model, source, model_key = sidebar_model()
    default = ["Tesla T4", "RTX 3060 12GB", "RTX 4090", "RTX 5090", "eGPU RTX 4090, PCIe 3.0 x4"]
    cards = st.multiselect("GPUs", list(PRESETS), default=default, key="cards")
    c1, c2, c3 = st.columns(3)
    concurrency = c1.slider("concurrent streams", 1, 8, 1, key="shop_np")
    ctx = c2.number_input("context", 512, 262144, 8192, 512, key="shop_ctx")
    pinned = c3.toggle("pinned host experts", False, key="shop_pinned")
    with st.expander("custom card"):
        use_custom = st.toggle("add a custom card", False, key="custom_on")
        cc = st.columns(5)
        custom = Hardware(
            "custom",
            cc[0].number_input("VRAM GiB", 4.0, 200.0, 16.0, key="c_vram"),
            cc[1].number_input("GB/s", 100.0, 8000.0, 500.0, key="c_bw"),
            int(cc[2].selectbox("PCIe gen", [3, 4, 5], 1, key="c_gen")),
            int(cc[3].selectbox("lanes", [4, 8, 16], 2, key="c_lanes")),
            cc[4].number_input("host GB/s", 5.0, 500.0, 50.0, key="c_host"),
            source="user",
        )
    hardware = [PRESETS[name].with_changes(pinned=pinned) for name in cards] + (
        [custom.with_changes(pinned=pinned)] if use_custom else []
    )
    if not hardware:
        st.info("Pick at least one GPU.")
        st.stop()
    placement = Placement(cpu_moe=True)
    lo, hi = min_budget_mib(model, placement) or 1, full_budget_mib(model, placement) or 1
    budgets = tuple(sorted(set(np.geomspace(lo, hi, 20).astype(int).tolist())))
    work = cached_synthetic(model, concurrency, 0, 0.7)
    curve = cached_curve(model, model_key, work, f"synthetic:{model_key}:{concurrency}:0:0.7", budgets, placement)
    rows = best_per_card(
        model,
        hardware,
        Scenario(concurrency=concurrency, n_ctx=int(ctx)),
        work,
        curve,
        source,
        lambda name: params_for(name)[0],
    )
    frame = pd.DataFrame(rows)
    st.plotly_chart(shopping_bars(frame), width="stretch", key="shop_chart")
    st.dataframe(frame, hide_index=True, width="stretch")
    for _, row in frame.iterrows():
        if row.get("fits_without_offload"):
            st.info(
                f"{row['gpu']}: the whole model fits in VRAM, so --fit keeps every expert on the GPU: no cache needed."
            )
        elif row.get("cache_is_net_loss"):
            st.warning(
                f"{row['gpu']}: the cache is a net loss here ({row['best_cache_tps']:.1f} t/s with the best budget "
                f"against {row['no_cache_tps']:.1f} without): the link is too slow for the misses."
            )
    st.download_button(
        "comparison as CSV", frame.to_csv(index=False), file_name="hardware-comparison.csv", key="dl_shop"
    )
