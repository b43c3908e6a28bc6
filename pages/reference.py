"""Reference: the measured table (cited sources), each row beside the model's prediction and residual."""

import streamlit as st

from moe_model.calibration import CPU_SHARE_STANDIN, load_calibrations, reference_predictions
from moe_model.charts import reference_residuals
from ui.common import MODELS, cached_model, friendly_errors

st.header("Reference measurements")
st.caption(
    "Measured by the seed articles (sources in the table; the unload-blog rows are unverified claims of a "
    "different policy). Predictions come from the time model with the calibrations below."
)


@st.cache_data(show_spinner="Predicting every row...")
def table():
    return reference_predictions(
        cached_model(str(MODELS / "Qwen3-30B-A3B-Q4_K_M.gguf")), cached_model(str(MODELS / CPU_SHARE_STANDIN[0]))
    )


with friendly_errors():
    frame = table()
    sources = st.multiselect("source", sorted(frame["source"].unique()), key="sources")
    gpus = st.multiselect("GPU", sorted(frame["gpu"].dropna().unique()), key="gpus")
    shown = frame
    if sources:
        shown = shown[shown["source"].isin(sources)]
    if gpus:
        shown = shown[shown["gpu"].isin(gpus)]
    first = [
        "id",
        "gpu",
        "model",
        "placement",
        "moe_cache_mib",
        "parallel",
        "cpu_share",
        "decode_tps",
        "predicted_tps",
        "residual",
        "basis",
    ]
    st.dataframe(
        shown[first + [c for c in shown.columns if c not in first and c != "measured_tps"]],
        hide_index=True,
        width="stretch",
        column_config={"residual": st.column_config.NumberColumn(format="percent")},
    )
    plotted = shown.dropna(subset=["predicted_tps", "decode_tps"])
    if len(plotted):
        st.plotly_chart(reference_residuals(plotted), width="stretch", key="residuals")
    st.download_button("table as CSV", shown.to_csv(index=False), file_name="reference.csv", key="dl_ref")
    st.subheader("Calibrations (fitted parameters and residuals)")
    for name, record in load_calibrations().items():
        with st.expander(f"{name}: {record['fitted_to']}", expanded=name == "Tesla T4"):
            st.write({"accepted": record["accepted"], "worst decode error": f"{100 * record['max_error']:.1f} %"})
            st.json(
                {
                    "params": record["params"],
                    "decode residuals": record["residuals"],
                    "prompt residuals": record["prefill_residuals"],
                }
            )
