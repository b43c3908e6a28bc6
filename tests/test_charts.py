"""Charts: a figure wrapped for a notebook carries an HTML fallback; logged hit rates overlay the hit curve; labels
in words, never on the plot area (the browser test measures them: tests/browser/test_chart_labels.py)."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from chart_cases import chart_cases, predictions
from plotly.offline import get_plotlyjs

from moe_model import charts, charts_range
from moe_model.charts import for_notebook, hit_rate_curve, overlay_logged_hits, shopping_bars
from moe_model.llama.builds import MAINLINE_BUILD
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies import class_lru_band, simulate_build
from moe_model.routing.logged import LoggedHitRate, LogRouting, RunLength
from moe_model.routing.synthetic import MATCH_MODEL, Knobs, RoutingPreset
from moe_model.routing.toy import toy_model, toy_workload
from moe_model.speed.term_words import term_words

FIG = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))


def test_a_notebook_figure_is_plotly_json_for_live_frontends_and_html_for_exports():
    bundle = for_notebook(FIG)._repr_mimebundle_()
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["y"] == [3, 4]
    html = bundle["text/html"]
    assert "Plotly.newPlot" in html and "<html>" not in html


def test_an_exported_notebook_figure_embeds_plotly_js_by_default_and_loads_nothing():
    html = for_notebook(FIG)._repr_html_()
    assert get_plotlyjs() in html  # the whole bundle, so the exported file draws offline
    assert not re.search(r"<script[^>]*\bsrc=", html)
    cdn = for_notebook(FIG, include_plotlyjs="cdn")._repr_html_()
    assert 'src="https://cdn.plot.ly' in cdn and len(cdn) < 100_000  # the small, online file on request


def _routing(placements: list[Placement]) -> LogRouting:
    points = tuple(LoggedHitRate(f"log{i}", 100 * (i + 1), p, 0.2 * (i + 1), 256, 1) for i, p in enumerate(placements))
    preset = RoutingPreset("test", Knobs(), 3.0, "a test", MATCH_MODEL)
    simulated = {p.name: p.hit_rate + 0.01 for p in points}
    return LogRouting(Knobs(), 1.5, 1.0, {}, simulated, points, RunLength(256, 256), preset)


def test_logged_hit_rates_are_drawn_on_the_hit_curve_with_where_the_routing_comes_from():
    cpu_moe, k10 = Placement(cpu_moe=True), Placement(cpu_moe=False, n_cpu_moe=10)
    routing = _routing([cpu_moe, cpu_moe, k10])
    fig = overlay_logged_hits(go.Figure(layout={"title": "Simulated hit rate"}), routing, cpu_moe)
    (markers,) = fig.data
    assert list(markers.x) == [100, 200] and list(markers.y) == [20.0, 40.0]  # only this placement's logs
    assert fig.layout.title.subtitle.text == "routing fitted to your 3 logs, ±1.5 points"
    assert len(overlay_logged_hits(go.Figure(), routing).data[0].x) == 3  # no placement given: every log


def test_figures_wear_plotly_white_whether_or_not_the_app_made_it_the_process_default(monkeypatch):
    import pandas as pd
    import plotly.io as pio

    from moe_model.charts import TEMPLATE, shopping_bars

    frame = pd.DataFrame({"GPU": ["T4"], "decode t/s": [20.0], "low t/s": [16.0], "high t/s": [24.0]})
    frame["best setting"] = "--cpu-moe"
    monkeypatch.setattr(pio.templates, "default", "plotly")  # a notebook's plotly: set on the figure
    own = shopping_bars(frame).layout.template
    monkeypatch.setattr(pio.templates, "default", TEMPLATE)  # the app's process (use_template_by_default)
    born = shopping_bars(frame).layout.template
    assert own.to_plotly_json() == born.to_plotly_json() == pio.templates[TEMPLATE].to_plotly_json()


def test_the_hit_rate_curve_of_a_class_lru_build_draws_its_readings_band_and_the_exact_lru_none():
    model, work = toy_model(), toy_workload(concurrency=4)
    budgets = [12, 24, 48]
    banded = hit_rate_curve(simulate_budgets(model, work, budgets, kernel=class_lru_band.band_kernel()))
    fills = [t for t in banded.data if t.fill == "tonexty"]
    assert len(fills) == 1 and "open readings" in fills[0].name
    edges = [t for t in banded.data if t.fill in ("tonexty", None) and t.showlegend is False]
    assert len(edges) == 1 and all(hi >= lo for hi, lo in zip(edges[0].y, fills[0].y, strict=True))
    exact = hit_rate_curve(simulate_budgets(model, work, budgets))
    assert not any(t.fill == "tonexty" for t in exact.data)


def test_a_hit_rate_curve_replayed_by_build_names_its_policy_and_build_the_default_builds_unless_told():
    model, work = toy_model(), toy_workload(concurrency=4)
    default = hit_rate_curve(simulate_build(model, work, [12, 24, 48]))
    assert default.layout.title.subtitle.text == f"class-lru-b12170 (modelled), llama.cpp b{MAINLINE_BUILD}"
    told = hit_rate_curve(simulate_build(model, work, [12, 24, 48], build=11549))
    assert told.layout.title.subtitle.text == "lru-b11549 (exact), llama.cpp b11549"


def test_shopping_bars_draw_classlru_readings_as_a_filled_band_where_a_card_has_one():
    frame = pd.DataFrame(
        {"GPU": ["A", "B"], "decode t/s": [20.0, 30.0], "low t/s": [15.0, 25.0], "high t/s": [25.0, 35.0],
         "best setting": ["a", "b"], "readings low t/s": [18.0, 0.0], "readings high t/s": [22.0, 0.0]}
    )  # fmt: skip
    band = [t for t in shopping_bars(frame).data if t.name == "ClassLRU's open readings"]
    assert len(band) == 1 and list(band[0].base) == [18.0, 0.0] and list(band[0].y) == [4.0, 0.0]
    none = frame.assign(**{"readings low t/s": 0.0, "readings high t/s": 0.0})
    assert not [t for t in shopping_bars(none).data if t.name == "ClassLRU's open readings"]


@pytest.fixture(scope="module")
def drawn() -> dict[str, go.Figure]:
    return {name: draw() for name, draw in chart_cases().items()}


def test_the_label_cases_draw_every_chart_builder_of_charts_py(drawn):
    builders = {
        name for module in (charts, charts_range) for name, f in inspect.getmembers(module, inspect.isfunction)
        if f.__module__ == module.__name__ and not name.startswith("_")
        and inspect.signature(f).return_annotation in ("go.Figure", go.Figure)
        and name not in ("shade_unfit", "with_basis", "figure_layout")  # each changes a drawn figure
    }  # fmt: skip
    assert builders - {"overlay_logged_hits"} <= set(drawn)


def test_no_chart_writes_a_label_on_the_plot_area_where_it_could_meet_another(drawn):
    """Words sit in the legend (at the figure's foot, below the x axis's title), the axes' ticks or inside bars;
    annotations pinned to data or paper points met each other ("--fit, no cac8376 MiB")."""
    for name, fig in drawn.items():
        assert not fig.layout.annotations, name
        assert fig.layout.legend.yref == "container" and fig.layout.legend.yanchor == "bottom", name
        assert fig.layout.xaxis.automargin and fig.layout.yaxis.automargin, name


IDENTIFIER = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")  # experts_gpu, cuda_reserve_assumed: names, not words


def _shown_text(fig: go.Figure) -> list[str]:
    layout = fig.layout
    said = [layout.title.text, layout.title.subtitle.text, layout.xaxis.title.text, layout.yaxis.title.text]
    for t in fig.data:
        said += [t.name, getattr(t, "hovertemplate", None)]
        for key in ("text", "x", "y"):
            values = getattr(t, key, None)
            said += [v for v in ([] if values is None else list(np.ravel(values))) if isinstance(v, str)]
    return [re.sub(r"%\{[^}]*\}", "", s) for s in said if s]  # plotly's %{customdata} is no word on screen


def test_no_chart_shows_a_variable_name(drawn):
    for name, fig in drawn.items():
        found = [m for text in _shown_text(fig) for m in IDENTIFIER.findall(text)]
        assert not found, (name, found)


def test_the_range_bar_draws_the_whole_range_on_top_then_each_source_with_what_narrows_it(drawn):
    fig = drawn["range_bar"]
    pred = predictions()["--cpu-moe + 9,470 MiB"]
    bars, mark = fig.data
    (lo, hi), sources = pred.decode_tps_range, pred.range_sources
    assert bars.y[0].startswith("whole range") and [y.rsplit(": ", 1)[0] for y in bars.y[1:]] == [
        s.source for s in sources
    ]
    assert list(bars.base) == pytest.approx([lo, *(s.low_tps for s in sources)])
    assert [b + w for b, w in zip(bars.base, bars.x, strict=True)] == pytest.approx(
        [hi, *(s.high_tps for s in sources)]
    )
    assert all(  # in the app's words: its controls, no command-line flag
        s.narrowed(app=True)[:30] in hover.replace("<br>", " ")
        for s, hover in zip(sources, bars.customdata[1:], strict=True)
    )
    assert not [hover for hover in bars.customdata if re.search(r"(?<![\w-])--[a-z]", hover)]
    subtitle = fig.layout.title.subtitle.text
    assert set(mark.x) == {pred.decode_tps} and f"{pred.decode_tps:.1f} t/s" in subtitle.replace("<br>", " ")
    assert subtitle.startswith("[modelled]") and all("[modelled]" in hover for hover in bars.customdata)


def test_the_time_breakdown_is_one_horizontal_bar_per_configuration_in_words_summing_to_its_ms_per_token(drawn):
    fig = drawn["time_breakdown"]
    preds = predictions()
    assert {t.orientation for t in fig.data} == {"h"} and len(fig.data[0].y) == len(preds)
    for row, p in enumerate(preds.values()):
        total = sum(p.breakdown_ms.values()) / p.scenario.decoded_per_ubatch
        assert sum(t.x[row] for t in fig.data) == pytest.approx(total)
    words = {term_words(t) for p in preds.values() for t in p.breakdown_ms}
    assert {t.name for t in fig.data} <= words | {"other"} and fig.layout.legend.traceorder == "normal"


def test_shopping_bars_write_each_cards_decode_speed_above_its_whisker():
    frame = pd.DataFrame({"GPU": ["A", "B"], "decode t/s": [20.0, 30.0], "low t/s": [15.0, 25.0],
                          "high t/s": [25.0, 35.0], "best setting": ["a", "b"]})  # fmt: skip
    (labels,) = [t for t in shopping_bars(frame).data if getattr(t, "mode", None) == "text"]
    assert list(labels.text) == ["20.0 t/s", "30.0 t/s"] and list(labels.y) == [25.0, 35.0]


def test_a_charts_basis_leads_its_subtitle_as_text_tags_and_keeps_what_it_said(drawn):
    before = drawn["time_breakdown"]
    fig = charts.with_basis(go.Figure(before), "calibrated", ("measured", "diamonds"))
    said = before.layout.title.subtitle.text.replace("<br>", " ")
    assert fig.layout.title.subtitle.text.replace("<br>", " ") == f"[calibrated], [measured] diamonds; {said}"
    assert fig.layout.margin.t >= before.layout.margin.t  # room for the subtitle's lines
    assert charts.with_basis(go.Figure(), "modelled").layout.title.subtitle.text == "[modelled]"
