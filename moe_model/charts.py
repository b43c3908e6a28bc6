"""Plotly figure builders: plain results in, `plotly.graph_objects.Figure` out (Streamlit or Jupyter).

Colours come from the Okabe-Ito palette, which stays distinguishable with colour-vision deficiency.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from moe_model.answers.basis import text_tag
from moe_model.fits.log_timings import request_label
from moe_model.llama.simulate import SimResult
from moe_model.llama.slot_plan import CachePlan, Placement
from moe_model.policies.wording import hit_rate_wording
from moe_model.routing.logged import LogRouting
from moe_model.speed.streams import speed_label, total_over_streams
from moe_model.speed.term_words import term_words
from moe_model.speed.time_model import Prediction
from moe_model.speed.vram import VramBreakdown

OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
HOT, COLD, MISS = "#D55E00", "#0072B2", "#E69F00"
TEMPLATE = "plotly_white"


def use_template_by_default() -> None:
    """Make TEMPLATE plotly's default in this process (the app, which draws figures on every rerun): plotly then
    gives each new figure the template unvalidated, ~3 ms a figure instead of ~25 ms for setting it on each."""
    pio.templates.default = TEMPLATE


@dataclass(frozen=True)
class NotebookFigure:
    """A figure that draws itself in Jupyter and in an exported HTML notebook: plotly's JSON for a live frontend,
    HTML with plotly.js for everything else (`include_plotlyjs`: True embeds it, ~4.8 MB, so an exported file draws
    offline; "cdn" loads it from plotly's CDN for a small file that needs the network)."""

    figure: go.Figure
    include_plotlyjs: bool | str = True

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {
            "application/vnd.plotly.v1+json": json.loads(self.figure.to_json()),
            "text/html": self._repr_html_(),
        }

    def _repr_html_(self) -> str:
        return self.figure.to_html(full_html=False, include_plotlyjs=self.include_plotlyjs)


def for_notebook(fig: go.Figure, include_plotlyjs: bool | str = True) -> NotebookFigure:
    """Wrap a figure for a notebook cell's last line, so that nbconvert's HTML export shows it too, offline (a bare
    plotly figure there leaves only a JSON blob the exported page cannot draw)."""
    return NotebookFigure(fig, include_plotlyjs)


BUDGET_AXIS = "expert cache budget (--moe-cache-mib, MiB)"
LEGEND_BELOW = {"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 0, "yanchor": "bottom"}


SUBTITLE_CHARS = 50  # a subtitle's line: fits a 340 px column (Explore's half width at a 1400 px window)


def _top_px(subtitle: str) -> int:
    """The top margin: the title's line and each of the subtitle's."""
    return 54 + 16 * len(textwrap.wrap(subtitle, SUBTITLE_CHARS))


def figure_layout(fig: go.Figure, title: str, x: str, y: str, subtitle: str = "") -> go.Figure:
    """Title (short: it is never wrapped; details go in the smaller `subtitle`), axis titles and the legend placed
    so none covers another: axes make room for their labels (automargin) and the legend sits at the figure's foot,
    under the x axis's title, never on it."""
    if pio.templates.default != TEMPLATE:  # else the figure was born with it (use_template_by_default)
        fig.update_layout(template=TEMPLATE)
    fig.update_layout(
        title={
            "text": title,
            "x": 0,
            "xanchor": "left",
            "xref": "container",
            "pad": {"l": 10},
            "font": {"size": 16},
            "subtitle": {"text": wrap(subtitle, SUBTITLE_CHARS), "font": {"size": 12}},
        },
        xaxis_title=x,
        yaxis_title=y,
        height=380,
        margin={"l": 60, "r": 20, "t": _top_px(subtitle), "b": 50},
        legend=LEGEND_BELOW,
    )
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def with_basis(fig: go.Figure, *said: str | tuple[str, str]) -> go.Figure:
    """The figure with how its numbers are known leading its subtitle, as text tags (a chart draws no badge): each
    of `said` a basis word ('modelled'), or a word and what it covers (('measured', 'diamonds'))."""
    tags = ", ".join(text_tag(w) if isinstance(w, str) else f"{text_tag(w[0])} {w[1]}" for w in said)
    subtitle = (fig.layout.title.subtitle.text or "").replace("<br>", " ")
    text = f"{tags}; {subtitle}" if subtitle else tags
    fig.update_layout(title_subtitle_text=wrap(text, SUBTITLE_CHARS), margin_t=_top_px(text))
    return fig


def wrap(text: str, width: int = 60) -> str:
    """Plotly draws one line per <br>: a long sentence wrapped for a hover box or a label."""
    return "<br>".join(textwrap.wrap(text, width)) or text


def _legend_line(fig: go.Figure, name: str, color: str, dash: str = "solid") -> None:
    """A legend entry for a line drawn as a shape (shapes have none): words in the legend, not on the plot."""
    fig.add_scatter(x=[None], y=[None], mode="lines", name=name, line={"color": color, "dash": dash},
                    hoverinfo="skip")  # fmt: skip


def _mark(fig: go.Figure, budget_mib: float | None) -> None:
    """The chosen budget: a dotted line, named in the legend (a label on the plot met the other labels there)."""
    if budget_mib is not None:
        fig.add_vline(x=budget_mib, line_dash="dot", line_color="#555")
        _legend_line(fig, f"your budget: {budget_mib:,.0f} MiB", "#555", "dot")


def shade_unfit(fig: go.Figure, fits_mib: float, end_mib: float) -> go.Figure:
    """Grey out the budgets past the largest that fits the GPU's memory, named in the legend."""
    if fits_mib < end_mib:
        fig.add_vrect(x0=fits_mib, x1=end_mib, fillcolor="#999999", opacity=0.2, line_width=0)
        fig.add_scatter(
            x=[None], y=[None], mode="markers", name=f"does not fit VRAM (over {fits_mib:,.0f} MiB)",
            marker={"symbol": "square", "size": 12, "color": "rgba(153, 153, 153, 0.4)"}, hoverinfo="skip",
        )  # fmt: skip
    return fig


DECODE_HITS = "decoding (llama.cpp's ubatch <= 8)"
PROMPT_HITS = "prompts (llama.cpp's ubatch > 8)"


def hit_rate_curve(results: Sequence[SimResult], mark_budget: float | None = None) -> go.Figure:
    """Hit rate against budget, split like llama.cpp's statistics (ubatch <= 8 and > 8)."""
    fig = go.Figure()
    budgets = [r.budget_mib for r in results]
    for name, attr, color in ((DECODE_HITS, "small", OKABE_ITO[4]), (PROMPT_HITS, "large", OKABE_ITO[5])):
        rates = [getattr(r, attr).hit_rate for r in results]
        if any(v is not None for v in rates):
            fig.add_scatter(
                x=budgets,
                y=[None if v is None else 100 * v for v in rates],
                name=name,
                mode="lines+markers",
                line={"color": color},
            )
    _readings_band(fig, results)
    _mark(fig, mark_budget)
    fig.update_yaxes(range=[0, 100])
    build = results[0].build if results else None  # chosen by build (policies.simulate_build): named under the title
    policy = f"{hit_rate_wording(results[0].policy, build).tag}, llama.cpp b{build}" if build else ""
    return figure_layout(fig, "Simulated hit rate", BUDGET_AXIS, "hit rate (%)", policy)


def _readings_band(fig: go.Figure, results: Sequence[SimResult]) -> None:
    """A modelled policy's open readings (b12170+'s ClassLRU) as a filled band of the hit rate, where it has one."""
    banded = [r for r in results if r.band is not None]
    if not banded:
        return
    budgets = [r.budget_mib for r in banded]
    high, low = ([100 * getattr(r.band, edge) for r in banded] for edge in ("hit_rate_high", "hit_rate_low"))
    line = {"width": 0, "color": OKABE_ITO[4]}
    fig.add_scatter(x=budgets, y=high, mode="lines", line=line, showlegend=False, hoverinfo="skip")
    fig.add_scatter(
        x=budgets, y=low, mode="lines", line=line, fill="tonexty", fillcolor="rgba(0, 114, 178, 0.15)",
        name="ClassLRU's open readings (all lookups)",
    )  # fmt: skip


def overlay_logged_hits(fig: go.Figure, routing: LogRouting, placement: Placement | None = None) -> go.Figure:
    """The logged decode hit rates (warm-up removed) the routing was fitted to, as markers on a hit-rate curve,
    and where the curve's routing comes from in the title; only the logs of `placement` when one is given."""
    points = [p for p in routing.points if placement is None or p.placement == placement]
    if points:
        fig.add_scatter(
            x=[p.budget_mib for p in points],
            y=[100 * p.hit_rate for p in points],
            name="your logs (measured)",
            mode="markers",
            marker={"symbol": "diamond", "size": 11, "color": OKABE_ITO[7]},
            customdata=[[p.name, 100 * routing.simulated[p.name]] for p in points],
            hovertemplate="%{customdata[0]}: %{y:.1f} % logged at %{x:,} MiB, %{customdata[1]:.1f} % fitted"
            "<extra></extra>",
        )
    said = f"routing {routing.fitted_to}, ±{routing.spread_points:.1f} points"
    fig.update_layout(title_subtitle_text=wrap(said, SUBTITLE_CHARS), margin_t=_top_px(said))
    return fig


def upload_curve(results: Sequence[SimResult], mark_budget: float | None = None) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(
        x=[r.budget_mib for r in results],
        y=[r.uploaded_bytes_per_token() / 2**20 for r in results],
        name="uploaded per decoded token",
        mode="lines+markers",
        line={"color": MISS},
    )
    _mark(fig, mark_budget)
    return figure_layout(fig, "Uploads over the host link (simulated)", BUDGET_AXIS, "MiB per decoded token")


def _with_request(measured: pd.DataFrame) -> list[str]:
    """Each measured point's name and the request its speed is of ("first request", "steady state") where known."""
    requests = measured["request"] if "request" in measured else [None] * len(measured)
    pairs = zip(measured["id"], requests, strict=True)
    return [f"{name} ({req})" if isinstance(req, str) else str(name) for name, req in pairs]


def speed_curve(
    budgets: Sequence[float],
    decode_tps: Sequence[float | None],
    baselines: dict[str, float],
    measured: pd.DataFrame | None = None,
    mark_budget: float | None = None,
    ranges: Sequence[tuple[float, float] | None] | None = None,
    concurrency: int = 1,
) -> go.Figure:
    """Predicted decode t/s against budget with its range as a band, the no-cache baselines as lines,
    measured points as markers; at `-np > 1` every speed is the total over the streams, and says so."""
    fig = go.Figure()
    total = speed_label("", concurrency)  # " (total over N streams)" at -np > 1, else ""
    steady = request_label(first=False)  # what the time model predicts: the requests after a server's first
    if ranges is not None:
        for i, name in enumerate(("low end of the range", "high end of the range")):
            fig.add_scatter(
                x=list(budgets),
                y=[None if r is None else r[i] for r in ranges],
                name=name,
                mode="lines",
                line={"width": 0, "color": OKABE_ITO[4]},
                fill="tonexty" if i else None,
                fillcolor="rgba(0, 114, 178, 0.15)",
                showlegend=False,
                hovertemplate="%{x:,} MiB: %{y:.1f} t/s" + total + " (" + name + ")<extra></extra>",
            )
    fig.add_scatter(
        x=list(budgets),
        y=list(decode_tps),
        name="predicted (model)",
        mode="lines+markers",
        line={"color": OKABE_ITO[4]},
        hovertemplate=f"%{{x:,}} MiB: %{{y:.1f}} t/s decode{total} (model, {steady})<extra></extra>",
    )
    for i, (name, value) in enumerate(baselines.items()):  # in the legend: labels at the lines' ends collided
        fig.add_scatter(
            x=[budgets[0], budgets[-1]] if len(budgets) else [], y=[value, value], mode="lines",
            name=f"{name}: {value:.1f} t/s", line={"dash": "dash", "color": OKABE_ITO[(i + 5) % 8]},
            hovertemplate=f"{name}: {value:.1f} t/s decode{total} (model)<extra></extra>",
        )  # fmt: skip
    if measured is not None and len(measured):
        fig.add_scatter(
            x=measured["moe_cache_mib"],
            y=measured["decode_tps"],
            name="measured",
            mode="markers",
            marker={"symbol": "diamond", "size": 11, "color": OKABE_ITO[7]},
            text=_with_request(measured),
            hovertemplate="%{text}: %{y} t/s" + total + " at %{x} MiB",
        )
    _mark(fig, mark_budget)
    return figure_layout(fig, "Decode speed", BUDGET_AXIS, speed_label("tokens / s", concurrency))


def layer_hit_rates(result: SimResult) -> go.Figure:
    lookups = np.maximum(result.layer_lookups, 1)
    rate = np.where(result.layer_lookups > 0, 100 * result.layer_hits / lookups, np.nan)
    fig = go.Figure(go.Bar(x=np.arange(len(rate)), y=rate, marker_color=COLD, name="hit rate"))
    fig.update_xaxes(tick0=0, dtick=max(1, round(len(rate) / 10)))  # whole layers: no -0.5 tick in the corner
    return figure_layout(fig, f"Hit rate per layer at {result.budget_mib:,} MiB (simulated)", "layer", "hit rate (%)")


SMALL_SHARE = 0.08  # a term under this share of every bar's time is grouped as "other" (its parts in the hover)


def _per_token_ms(p: Prediction) -> dict[str, float]:
    return {t: ms / max(p.scenario.decoded_per_ubatch, 1e-9) for t, ms in p.breakdown_ms.items() if ms > 0}


def time_breakdown(predictions: dict[str, Prediction]) -> go.Figure:
    """Milliseconds per decoded token, one horizontal bar per configuration, each term a segment labelled in
    words (term_words) where the label fits, and in the legend; terms small in every bar are one "other" segment,
    its parts named in its hover."""
    fig = go.Figure()
    ms = {name: _per_token_ms(p) for name, p in predictions.items()}
    totals = {name: sum(terms.values()) or 1.0 for name, terms in ms.items()}
    rows = [f"{name}<br>{sum(ms[name].values()):.1f} ms per token" for name in ms]
    order = sorted({t for terms in ms.values() for t in terms}, key=lambda t: -max(v.get(t, 0.0) for v in ms.values()))
    big = [t for t in order if any(ms[n].get(t, 0.0) >= SMALL_SHARE * totals[n] for n in ms)]
    for i, term in enumerate(big):
        words = term_words(term)
        values = [ms[n].get(term, 0.0) for n in ms]
        fig.add_bar(
            y=rows, x=values, orientation="h", name=words, marker_color=OKABE_ITO[i % 8],
            text=[wrap(words, 14) if v >= SMALL_SHARE * totals[n] else "" for v, n in zip(values, ms, strict=True)],
            textposition="inside", insidetextanchor="middle", textangle=0,
            customdata=[100 * v / totals[n] for v, n in zip(values, ms, strict=True)],
            hovertemplate=f"{words}: %{{x:.2f}} ms per token (%{{customdata:.0f}} %)<extra></extra>",
        )  # fmt: skip
    small = [t for t in order if t not in big]
    if small:
        parts = [[", ".join(f"{term_words(t)} {ms[n].get(t, 0.0):.2f} ms" for t in small)] for n in ms]
        fig.add_bar(
            y=rows, x=[sum(ms[n].get(t, 0.0) for t in small) for n in ms], orientation="h", name="other",
            marker_color="#BBBBBB", customdata=parts, text=["other"] * len(rows), textposition="inside", textangle=0,
            hovertemplate="other: %{x:.2f} ms per token (%{customdata[0]})<extra></extra>",
        )  # fmt: skip
    fig = figure_layout(fig, "Time per decoded token (model)", "ms per decoded token", "",
                  "labels where they fit; every part in the legend and on hover")  # fmt: skip
    fig.update_yaxes(autorange="reversed")
    legend_px = 22 * (len(big) + bool(small))  # room for one entry a row (a narrow column) so it never scrolls
    fig.update_layout(barmode="stack", height=150 + 70 * len(rows) + legend_px, legend_traceorder="normal",
                      uniformtext={"minsize": 9, "mode": "hide"})  # fmt: skip
    return fig


VRAM_PART_WORDS = {
    "dense": "dense weights",
    "experts_on_gpu": "experts kept on the GPU",
    "kv_cache": "KV cache (the context)",
    "compute_buffers_estimate": "compute buffers (estimate)",
    "moe_cache": "expert cache (--moe-cache-mib)",
    "cuda_reserve_assumed": "reserved by CUDA (assumed)",
    "free": "free",
}


def vram_bar(vram: VramBreakdown) -> go.Figure:
    """The GPU's memory as one bar of its parts in words, the card's size and the part llama.cpp keeps free as
    lines named in the legend."""
    fig = go.Figure()
    parts = {k: v for k, v in vram.as_dict().items() if k in VRAM_PART_WORDS and v > 0}
    for key, mib in parts.items():
        name, i = VRAM_PART_WORDS[key], list(VRAM_PART_WORDS).index(key)  # a part keeps its colour when one is 0
        fig.add_bar(
            y=[""], x=[max(mib, 0.0)], name=name, orientation="h",
            marker_color="#EEEEEE" if key == "free" else OKABE_ITO[i % 8],
            hovertemplate=f"{name}: %{{x:,.0f}} MiB<extra></extra>",
        )  # fmt: skip
    fig.add_vline(x=vram.vram_mib, line_color="#000000")
    _legend_line(fig, f"the GPU's {vram.vram_mib:,.0f} MiB", "#000000")
    fig.add_vline(x=vram.vram_mib - vram.margin_mib, line_color="#555555", line_dash="dot")
    _legend_line(fig, f"llama.cpp keeps {vram.margin_mib:,.0f} MiB free (--fit)", "#555555", "dot")
    fig.update_layout(barmode="stack")
    fig = figure_layout(fig, f"GPU memory: {vram.used_mib:,.0f} of {vram.vram_mib:,.0f} MiB used", "MiB", "")
    fig.update_layout(height=200 + 20 * len(fig.data), legend_traceorder="normal")  # one entry a row fits
    return fig


def plan_slots(plan: CachePlan) -> go.Figure:
    """Slots per group against the group's experts: what share of each pool the budget buys."""
    fig = go.Figure()
    names = [f"GPU {g.device}: {g.type_name} experts<br>({g.n_layers} layers)" for g in plan.groups]
    fig.add_bar(x=names, y=[g.n_slots if plan.starts else 0 for g in plan.groups], name="slots", marker_color=HOT)
    fig.add_bar(
        x=names,
        y=[g.max_slots - (g.n_slots if plan.starts else 0) for g in plan.groups],
        name="not cached",
        marker_color="#BBBBBB",
    )
    fig.update_layout(barmode="stack")
    return figure_layout(fig, "Cache slots per group of layers", "", "experts (one per layer and expert)")


def left_out_predictions(measured: dict[str, float], errors: dict[str, float]) -> go.Figure:
    """Measured against predicted decode t/s, each machine predicted by a fit that left it out (log axes)."""
    fig = go.Figure()
    names = [n for n in measured if n in errors]
    top = max(max(measured[n], measured[n] * (1 + errors[n])) for n in names) * 1.3 if names else 1.0
    fig.add_scatter(x=[1, top], y=[1, top], mode="lines", line={"dash": "dot", "color": "#888"}, name="equal")
    for i, machine in enumerate(sorted({n.split("-")[0] for n in names})):
        mine = [n for n in names if n.split("-")[0] == machine]
        fig.add_scatter(
            x=[measured[n] for n in mine],
            y=[measured[n] * (1 + errors[n]) for n in mine],
            mode="markers",
            name=machine,
            text=mine,
            marker={"size": 9, "color": OKABE_ITO[i % len(OKABE_ITO)]},
            hovertemplate="%{text}: measured %{x:.1f} t/s, predicted %{y:.1f} t/s<extra></extra>",
        )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    said = "each machine predicted by a fit that never saw it"
    return figure_layout(fig, "Left-out predictions", "measured decode t/s", "predicted decode t/s", said)


POOL_STATES = (  # value, name in the legend, colour (Okabe-Ito blue/orange/purple for the marked cells)
    (0, "empty slot", "#F2F2F2"),
    (1, "cached expert", "#BFD9EC"),
    (2, "guard slot (never used)", "#666666"),
    (3, "uploaded this step (miss)", MISS),
    (4, "hit this step", COLD),
    (5, "next eviction (least recently used)", "#CC79A7"),
)


def _pool_state(i: int, key: int, highlight: dict[int, str], next_out: int | None) -> int:
    kind = highlight.get(i)
    if kind in ("hit", "fill"):
        return 4 if kind == "hit" else 3
    if key >= 0 and i == next_out:
        return 5
    return 1 if key >= 0 else 0


def pool_heatmap(
    slots: np.ndarray, n_expert: int, highlight: dict[int, str], order: Sequence[int] = (), extra: Sequence[str] = ()
) -> go.Figure:
    """The slot pool as cells: the (layer, expert) each holds, its place in the eviction order (1: evicted next),
    this step's hits and uploads, the next eviction and the guard slot llama.cpp allocates past the end; `extra`
    adds a line per slot (ClassLRU: its class and CRF)."""
    rank = {slot: r + 1 for r, slot in enumerate(order)}
    next_out = next((s for s in order if slots[s] >= 0), None) if len(order) else None
    labels = [f"L{key // n_expert} E{key % n_expert}" if key >= 0 else "empty" for key in slots] + ["guard"]
    labels = [f"{lab}<br>{extra[i]}" if i < len(extra) and extra[i] else lab for i, lab in enumerate(labels)]
    state = [_pool_state(i, int(key), highlight, next_out) for i, key in enumerate(slots)] + [2]
    cells = [f"{lab}<br>LRU {rank[i]}" if i in rank else lab for i, lab in enumerate(labels)]
    hover = [
        f"slot {i}: {lab}" + (f", LRU position {rank[i]} of {len(rank)} (1: evicted next)" if i in rank else "")
        for i, lab in enumerate(labels)
    ]
    width = max(4, int(np.ceil(np.sqrt(len(labels) * 2))))
    rows = int(np.ceil(len(labels) / width))
    z = np.full((rows, width), np.nan)
    text = np.full((rows, width), "", dtype=object)
    tips = np.full((rows, width), "", dtype=object)
    for i, (value, cell, tip) in enumerate(zip(state, cells, hover, strict=True)):
        z[i // width, i % width], text[i // width, i % width], tips[i // width, i % width] = value, cell, tip
    n = len(POOL_STATES)
    colorscale = [[edge, colour] for v, _, colour in POOL_STATES for edge in (v / n, (v + 1) / n)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            customdata=tips,
            texttemplate="%{text}",
            colorscale=colorscale,
            zmin=-0.5,
            zmax=n - 0.5,
            showscale=False,
            xgap=3,
            ygap=3,
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    for _, name, colour in POOL_STATES:  # the heatmap has no legend of its own
        fig.add_scatter(
            x=[None], y=[None], mode="markers", name=name, marker={"symbol": "square", "size": 12, "color": colour}
        )
    fig.update_yaxes(autorange="reversed", showticklabels=False, showgrid=False, zeroline=False)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig = figure_layout(fig, "Slot pool", "", "")
    fig.update_layout(height=max(240, 70 * rows + 150) + 22 * len(POOL_STATES), margin={"l": 10, "r": 10})
    return fig


def measured_curves(frame: pd.DataFrame) -> go.Figure:
    """Measured decode speed against the budget, one line per model, GPU and concurrency (never across them)."""
    fig = go.Figure()
    curve = frame.dropna(subset=["moe_cache_mib", "decode_tps"]).sort_values("moe_cache_mib")
    for i, ((model, gpu, parallel), group) in enumerate(curve.groupby(["model", "gpu", "parallel"], dropna=False)):
        name = f"{model or 'unknown model'} on {gpu or 'unknown GPU'}, -np {parallel}"
        name += f" ({total_over_streams(int(parallel))})" if parallel > 1 else ""
        fig.add_scatter(
            x=group["moe_cache_mib"],
            y=group["decode_tps"],
            mode="lines+markers",
            name=wrap(name, 40),
            marker_color=OKABE_ITO[i % len(OKABE_ITO)],
            customdata=_with_request(group.assign(id=group["source"])),
            hovertemplate="%{x:,} MiB: %{y:.1f} t/s decode (measured)<br>%{customdata}<extra>" + name + "</extra>",
        )
    return figure_layout(fig, "Measured decode speed from these runs", BUDGET_AXIS, "decode tokens / s")


def shopping_bars(frame: pd.DataFrame, concurrency: int = 1) -> go.Figure:
    """Each card's best predicted decode speed (at `-np > 1` the total over the streams, said on the axis), its
    range as an error bar, the setting in the hover."""
    total = speed_label("", concurrency)  # " (total over N streams)" at -np > 1, else ""
    fig = go.Figure()
    fig.add_bar(
        x=frame["GPU"],
        y=frame["decode t/s"],
        name="best decode t/s",
        marker_color=OKABE_ITO[4],
        customdata=frame["best setting"],
        error_y={
            "type": "data",
            "symmetric": False,
            "array": frame["high t/s"] - frame["decode t/s"],
            "arrayminus": frame["decode t/s"] - frame["low t/s"],
        },
        hovertemplate="%{x}: %{y:.1f} t/s decode" + total + " (model)<br>%{customdata}<extra></extra>",
    )
    _readings_bars(fig, frame)
    fig.add_scatter(  # each card's speed above its whisker: readable on a short bar, never on the whisker
        x=frame["GPU"], y=frame[["high t/s", "decode t/s"]].max(axis=1), mode="text", textposition="top center",
        text=[f"{v:.1f} t/s" for v in frame["decode t/s"]], showlegend=False, hoverinfo="skip", cliponaxis=False,
    )  # fmt: skip
    title, said = "Best decode speed per card (model)", "whiskers: the range; hover a bar for its setting"
    return figure_layout(fig, title, "", speed_label("decode tokens / s", concurrency), said)


def _readings_bars(fig: go.Figure, frame: pd.DataFrame) -> None:
    """Where a card's speed depends on b12170+ ClassLRU's open readings: the speeds they span, a filled band."""
    if "readings low t/s" not in frame or not (frame["readings high t/s"] > frame["readings low t/s"]).any():
        return
    fig.add_bar(
        x=frame["GPU"],
        base=frame["readings low t/s"],
        y=frame["readings high t/s"] - frame["readings low t/s"],
        width=0.3,
        marker_color="rgba(0, 0, 0, 0.25)",
        name="ClassLRU's open readings",
        hovertemplate="%{x}: %{base:.1f} t/s under one reading of ClassLRU, more under another<extra></extra>",
    )
    fig.update_layout(barmode="overlay")


def policy_curves(
    budgets: Sequence[int],
    series: dict[str, Sequence[float | None]],
    labels: dict[str, str],
    reference: str,
    y_title: str = "hit rate (%)",
    mark_budget: float | None = None,
) -> go.Figure:
    """One line per replacement policy against budget; the reference (llama.cpp's LRU) thick and black,
    exact policies solid, modelled ones dashed. Hit rates (0..1) are drawn in percent."""
    fig = go.Figure()
    percent = y_title.endswith("(%)")
    others = [n for n in series if n != reference]
    for i, name in enumerate([reference, *others] if reference in series else others):
        ref = name == reference
        color = OKABE_ITO[7] if ref else OKABE_ITO[i % 7]
        fig.add_scatter(
            x=list(budgets),
            y=[None if v is None else (100 * v if percent else v) for v in series[name]],
            name=f"{name} ({labels.get(name, '?')})",
            mode="lines+markers",
            line={"color": color, "width": 4 if ref else 2, "dash": "solid" if labels.get(name) == "exact" else "dash"},
            marker={"size": 5},
        )
    _mark(fig, mark_budget)
    if percent:
        fig.update_yaxes(range=[0, 100])
    return figure_layout(fig, "Replacement policies on the same workload", BUDGET_AXIS, y_title)
