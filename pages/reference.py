"""Reference: every measured point beside the time model's prediction, fitted and with its machine left out."""

import pandas as pd
import streamlit as st

from moe_model.charts import left_out_predictions
from moe_model.fits.calibration import load_calibration
from moe_model.fits.log_timings import load_reference
from moe_model.fits.points import engines, field_rows, point_policy_tags
from ui.sidebar import sidebar_session
from ui.startup import through_app
from ui.tables import readable
from ui.widgets import friendly_errors

through_app()  # a link opened on a fresh server runs app.py first (ui.startup)

st.header("Reference measurements")
st.caption(
    "The seed articles' table, the real H200 runs and third-party field measurements (sources in the tables). "
    "Errors: the fit on every machine, and, the number to believe, the prediction of each machine by a fit "
    "that never saw it (leave one machine out)."
)

with friendly_errors():
    sidebar_session("This page lists every measured machine; the model and GPU above are kept for the other pages.")
    record = load_calibration()
    lomo = record["leave_one_machine_out"]
    st.subheader("Machines left out of the fit")
    st.dataframe(
        pd.DataFrame(
            {
                "machine": list(lomo),
                "points": [r["n_points"] for r in lomo.values()],
                "median |error| %": [round(100 * r["median_abs_error"], 1) for r in lomo.values()],
                "worst error %": [round(100 * r["worst_error"], 1) for r in lomo.values()],
            }
        ),
        hide_index=True,
    )
    errors = {name: err for r in lomo.values() for name, err in r["errors"].items()}
    st.plotly_chart(left_out_predictions(record["measured"], errors), width="stretch", key="left_out")
    chosen = st.multiselect("machines", list(lomo), key="machines")
    names = [n for n in record["fit_errors"] if not chosen or n.split("-")[0] in chosen]
    ran = engines()
    points = pd.DataFrame(
        {
            "point": names,
            "engine and build": [ran.get(n, "?") for n in names],
            "error in the fit %": [round(100 * record["fit_errors"][n], 1) for n in names],
            "error, machine left out %": [round(100 * errors.get(n, float("nan")), 1) for n in names],
        }
    )
    st.dataframe(points, hide_index=True, width="stretch")
    st.caption(
        f"Every point's hit rates come from {', '.join(point_policy_tags())}: the policy of its build (mainline, "
        "or a build carrying its #29887 cache, run as the build named above), except t4-fit-cache10: it matches "
        "the qvac-fabric fork (its --fit reserves 10 % of the expert bytes for its own cache), modelled here as "
        "mainline's LRU."
    )
    st.subheader("Cache verdicts (machine left out)")
    verdicts = pd.DataFrame(record["verdicts"]).round({"measured_ratio": 2, "predicted_ratio": 2})
    st.dataframe(readable(verdicts), hide_index=True, width="stretch")
    st.subheader("Rows left out, and why")
    st.dataframe(
        pd.DataFrame({"row": list(record["excluded_rows"]), "why": list(record["excluded_rows"].values())}),
        hide_index=True,
    )
    st.subheader("Sources")
    st.dataframe(readable(load_reference()), hide_index=True, width="stretch")
    st.dataframe(readable(field_rows()), hide_index=True, width="stretch")
