"""Hardware shopping: will this card run this model well? Best predicted setting per card, side by side."""

import pandas as pd
import streamlit as st

from moe_model.charts import shopping_bars
from moe_model.speed.calibration import default_time_model
from moe_model.speed.hardware import PRESETS, Hardware
from ui.cached import cached_recommend_cards
from ui.sidebar import sidebar_hardware, sidebar_model, sidebar_serving
from ui.state import HARDWARE, keep, kept
from ui.widgets import friendly_errors, model_flag_path, setting_input

st.header("Hardware shopping")
st.caption(
    "Predicted with the calibrated time model and simulated hit rates (a model, not a measurement). "
    "Parameters fitted across the measured machines; each range is the error on machines left out of the fit. "
    "Every card sits in your host (its RAM, in the sidebar)."
)
OTHERS = ["Tesla T4", "RTX 3060 12GB", "RTX 4080 16GB", "RTX 4090", "RTX 5090", "eGPU RTX 4090, PCIe 3.0 x4"]


def chosen_cards(gpu: str) -> list[str]:
    """The compared cards: kept across pages and in the URL (;-separated: names hold commas), the sidebar GPU first."""
    default = [gpu, *(c for c in OTHERS if c != gpu)]
    names = [c for c in kept("cards", ";".join(default)).split(";") if c in PRESETS]
    cards = st.multiselect("GPUs", list(PRESETS), default=names, key="cards")
    keep(cards=";".join(cards))
    return cards


def row(hw: Hardware, options) -> dict:
    best = options[0]
    p = best.prediction
    return {
        "GPU": hw.name,
        "link": hw.pcie_label,
        "best setting": best.label if best.usable else "nothing fits (VRAM or RAM)",
        "decode t/s": round(p.decode_tps, 1) if best.usable else 0.0,
        "low t/s": round(p.decode_tps_range[0], 1) if best.usable else 0.0,
        "high t/s": round(p.decode_tps_range[1], 1) if best.usable else 0.0,
        "cache verdict": best.verdict if best.usable else "",
        "RAM": best.host.verdict.split(":")[0] if best.host else "",
        "command": best.command if best.usable else "",
    }


with friendly_errors():
    model, source, model_key = sidebar_model()
    sidebar_hw, _, _ = sidebar_hardware()
    ctx, concurrency = sidebar_serving()
    cards = chosen_cards(sidebar_hw.name)
    st.caption(
        f"Context {ctx:,}, {concurrency} stream(s), {sidebar_hw.ram_gib:g} GiB host RAM (sidebar). Each pick compares "
        "mmap'd and pinned (--load-mode none) host experts."
    )
    with st.expander("custom card"):
        use_custom = st.toggle("add a custom card", False, key="custom_on")
        cc = st.columns(5)
        starts = {"vram_gib": 16.0, "gpu_bw_gbs": 500.0, "pcie_gen": 4, "pcie_lanes": 16, "cpu_bw_gbs": 50.0}
        fields = [setting_input(c, HARDWARE[n], v, f"c_{n}") for c, (n, v) in zip(cc, starts.items(), strict=True)]
        custom = Hardware("custom", *fields, source="user")
    hardware = [PRESETS[name] for name in cards] + ([custom] if use_custom else [])
    hardware = [hw.with_changes(ram_gib=sidebar_hw.ram_gib) for hw in hardware]
    if not hardware:
        st.info("Pick at least one GPU.")
        st.stop()
    tm, path = default_time_model(), model_flag_path(source, model_key)
    rows, bar, so_far = [], st.progress(0.0, "Simulating each card's candidates..."), st.empty()
    for hw, options in zip(hardware, cached_recommend_cards(model, path, hardware, tm, concurrency, ctx), strict=True):
        rows.append(row(hw, options))
        bar.progress(len(rows) / len(hardware), f"{len(rows)} of {len(hardware)} cards simulated")
        so_far.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")  # each card as soon as it is known
    bar.empty()
    so_far.empty()
    frame = pd.DataFrame(rows)
    st.plotly_chart(shopping_bars(frame), width="stretch", key="shop_chart")
    st.dataframe(frame, hide_index=True, width="stretch")
    st.caption(
        f"Time model: {tm.source}. Pinned host experts upload faster, but the CPU path over pinned memory can be "
        "slower and pinning needs the RAM; each pick says which won. CPU shares are a modelled policy, picked only "
        "when they win by more than the prediction's error."
    )
    st.download_button(
        "comparison as CSV", frame.to_csv(index=False), file_name="hardware-comparison.csv", key="dl_shop"
    )
