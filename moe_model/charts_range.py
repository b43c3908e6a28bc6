"""The decode range drawn (issue 38): the whole range and each of its sources as bars on a log scale, the
prediction marked, what narrows each source in its hover, in the app's words (speed.ranges); how the range is known
leads the subtitle. Split from charts.py, whose layout and palette it uses."""

from __future__ import annotations

import plotly.graph_objects as go

from moe_model.answers.basis import text_tag
from moe_model.charts import OKABE_ITO, figure_layout, with_basis, wrap
from moe_model.speed.ranges import largest_step, tps_text
from moe_model.speed.streams import speed_label
from moe_model.speed.time_model import Prediction

RANGE_WHOLE = "whole range"
RANGE_TITLE = "Decode range by source"


def _source_hover(s, tps: float, tag: str) -> str:
    if s.settled:
        return f"{wrap(s.narrowed(app=True))} {tag}"
    lo, hi = s.without_tps
    return (
        f"narrowed by: {wrap(s.narrowed(app=True))}<br>settled, the range would be at best {lo:.1f}-{hi:.1f} t/s {tag}"
    )


def range_bar(pred: Prediction, basis: str) -> go.Figure:
    """The decode range as drawn bars on a log scale: the whole range on top, each source under it (largest first)
    spanning the speeds it alone allows, the prediction marked; what narrows each source in its hover (grey: a
    source no step narrows). `basis`: the decode's basis word (answers.basis), which every figure of it shares."""
    tps, (lo, hi), tag = pred.decode_tps, pred.decode_tps_range, text_tag(basis)
    names = [RANGE_WHOLE, *(s.source for s in pred.range_sources)]
    lows, highs = [lo, *(s.low_tps for s in pred.range_sources)], [hi, *(s.high_tps for s in pred.range_sources)]
    rows = [f"{n}: {tps_text(a)}-{tps_text(b)} t/s" for n, a, b in zip(names, lows, highs, strict=True)]
    whole = wrap(f"{largest_step(tps, pred.range_sources, app=True) or 'every source at its worst together'} {tag}")
    fig = go.Figure()
    fig.add_bar(
        y=rows, base=lows, x=[b - a for a, b in zip(lows, highs, strict=True)], orientation="h", width=0.6,
        marker_color=[OKABE_ITO[4]] + ["#999999" if s.settled else OKABE_ITO[1] for s in pred.range_sources],
        customdata=[whole, *(_source_hover(s, tps, tag) for s in pred.range_sources)], showlegend=False,
        hovertemplate="%{y} " + tag + "<br>%{customdata}<extra></extra>",
    )  # fmt: skip
    fig.add_scatter(
        y=rows, x=[tps] * len(rows), mode="markers", name=f"the prediction: {tps:.1f} t/s",
        marker={"symbol": "line-ns", "size": 18, "line": {"width": 3, "color": OKABE_ITO[7]}}, showlegend=False,
        hovertemplate=f"the prediction: {tps:.1f} t/s {tag}<extra></extra>",
    )  # fmt: skip
    axis = speed_label("t/s", pred.scenario.concurrency) + " (log scale)"
    fig = figure_layout(fig, RANGE_TITLE, axis, "",
                  f"black line: the prediction, {tps:.1f} t/s; hover a bar: what narrows it")  # fmt: skip
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(type="log")  # the sources multiply: on a log scale each bar's length is its share of the range
    fig.update_layout(height=170 + 34 * len(rows))
    return with_basis(fig, basis)
