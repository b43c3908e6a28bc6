"""Hardware shopping: will this card run this model well? Best predicted setting per card, side by side."""

import pandas as pd
import streamlit as st

from moe_model.calibration import default_time_model
from moe_model.charts import shopping_bars
from moe_model.hardware import PRESETS, Hardware
from moe_model.measured import synthetic_workload
from moe_model.recommend import recommend
from moe_model.scenario import Scenario
from moe_model.synthetic import preset_for
from ui.common import friendly_errors, sidebar_model

st.header("Hardware shopping")
st.caption(
    "Predicted with the calibrated time model and simulated hit rates (a model, not a measurement). "
    "Cards never measured use the T4-calibrated overheads."
)


@st.cache_data(show_spinner=False, max_entries=16)
def cached_work(_model, concurrency: int, model_name: str = ""):
    return synthetic_workload(_model, Scenario(concurrency=concurrency))


with friendly_errors():
    model, source, model_key = sidebar_model()
    default = ["Tesla T4", "RTX 3060 12GB", "RTX 4090", "RTX 5090", "eGPU RTX 4090, PCIe 3.0 x4"]
    cards = st.multiselect("GPUs", list(PRESETS), default=default, key="cards")
    c1, c2, c3 = st.columns(3)
    concurrency = c1.slider("concurrent streams", 1, 8, 1, key="shop_np")
    ctx = c2.number_input("context", 512, 262144, 8192, 512, key="shop_ctx")
    c3.caption("Each card's pick compares mmap'd and pinned (--load-mode none) host experts.")
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
    hardware = [PRESETS[name] for name in cards] + ([custom] if use_custom else [])
    if not hardware:
        st.info("Pick at least one GPU.")
        st.stop()
    tm, spread = default_time_model(), preset_for(model).spread_points
    base = Scenario(concurrency=concurrency, n_ctx=int(ctx))
    rows, bar = [], st.progress(0.0, "Simulating each card's candidates...")
    for i, hw in enumerate(hardware):
        options = recommend(
            model,
            hw,
            tm.params,
            base,
            lambda sc: cached_work(model, sc.concurrency, model_key),
            source,
            tm.rel_error,
            spread,
        )
        best = options[0]
        p = best.prediction
        rows.append(
            {
                "gpu": hw.name,
                "link": hw.pcie_label,
                "setting": best.label if p.usable else "nothing fits",
                "decode_tps": p.decode_tps if p.usable else 0.0,
                "decode_tps_low": p.decode_tps_range[0] if p.usable else 0.0,
                "decode_tps_high": p.decode_tps_range[1] if p.usable else 0.0,
                "verdict": best.verdict,
                "command": best.command if p.usable else "",
            }
        )
        bar.progress((i + 1) / len(hardware))
    bar.empty()
    frame = pd.DataFrame(rows)
    st.plotly_chart(shopping_bars(frame), width="stretch", key="shop_chart")
    st.dataframe(frame, hide_index=True, width="stretch")
    st.caption(
        f"Time model: {tm.source}. Pinned host experts upload faster, but the CPU path over pinned memory can be "
        "slower and pinning needs the RAM; each pick says which won."
    )
    st.download_button(
        "comparison as CSV", frame.to_csv(index=False), file_name="hardware-comparison.csv", key="dl_shop"
    )
