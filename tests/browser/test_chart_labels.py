"""Every chart of charts.py drawn by plotly.js in Chromium at a narrow and a wide width: no two labels (title,
axis titles, tick labels of different axes, legend entries, annotations, texts on bars and cells) cover each
other, and none leaves the figure."""

from __future__ import annotations

import pytest
from chart_cases import chart_cases
from plotly.offline import get_plotlyjs

pytestmark = pytest.mark.browser

WIDTHS_PX = (340, 700, 1400)  # Explore's half column at a 1400x900 window (341 px), its main column (697), wide

# Each visible text element's box and its group: tick labels of one axis may sit side by side, nothing else may.
LABEL_BOXES = """
(div) => {
  const groups = [['.gtitle', 'title'], ['.gtitle-subtitle', 'subtitle'], ['.g-xtitle text', 'xtitle'],
    ['.g-ytitle text', 'ytitle'],
    ['.legend .legendtext', 'legend'], ['.annotation-text', 'annotation'], ['.bartext', 'bartext'],
    ['.textpoint text', 'celltext'], ['.heatmaplayer text', 'celltext']];
  const out = [];
  for (const [sel, group] of groups)
    div.querySelectorAll(sel).forEach((el, i) => out.push([el, group + (group.endsWith('text') ? i : '')]));
  div.querySelectorAll('.xaxislayer-above .xtick text, .yaxislayer-above .ytick text').forEach(el => {
    const axis = el.closest('.xaxislayer-above') ? 'xticks' : 'yticks';
    out.push([el, axis]);
  });
  return out.map(([el, group]) => {
    const r = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return {group, text: el.textContent, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom,
            shown: r.width > 0 && r.height > 0 && style.display !== 'none' && style.opacity !== '0'
                   && style.visibility !== 'hidden' && el.textContent.trim() !== ''};
  }).filter(b => b.shown);
}
"""
SLACK_PX = 1.0  # glyph boxes of neighbouring lines touch by a pixel without covering each other


def _overlaps(boxes: list[dict]) -> list[str]:
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if a["group"] == b["group"] and a["group"] in ("xticks", "yticks", "legend"):
                continue  # one axis's ticks and the legend's entries are laid out by plotly.js itself
            if min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > SLACK_PX and (
                min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > SLACK_PX
            ):
                found.append(f"{a['text']!r} ({a['group']}) over {b['text']!r} ({b['group']})")
    return found


def _outside(boxes: list[dict], frame: dict) -> list[str]:
    return [
        f"{b['text']!r} ({b['group']})" for b in boxes if b["x0"] < frame["x0"] - SLACK_PX
        or b["x1"] > frame["x1"] + SLACK_PX or b["y0"] < frame["y0"] - SLACK_PX or b["y1"] > frame["y1"] + SLACK_PX
    ]  # fmt: skip


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """One page per width with every chart, plotly.js embedded (no network)."""
    folder = tmp_path_factory.mktemp("charts")
    (folder / "plotly.js").write_text(get_plotlyjs())
    figures = {name: draw() for name, draw in chart_cases().items()}
    pages = {}
    for width in WIDTHS_PX:
        divs = "".join(
            f'<div id="{name}" style="width:{width}px">'
            + fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{name}", default_width=f"{width}px")
            + "</div>"
            for name, fig in figures.items()
        )
        page = folder / f"charts-{width}.html"
        page.write_text(
            f'<!doctype html><html><head><script src="plotly.js"></script></head><body>{divs}</body></html>'
        )
        pages[width] = page
    return pages


@pytest.mark.parametrize("width", WIDTHS_PX)
def test_no_chart_draws_a_label_over_another_or_outside_its_figure(browser, drawn, width):
    tab = browser.new_page(viewport={"width": width + 40, "height": 900})
    tab.goto(drawn[width].as_uri())
    tab.wait_for_function(  # every figure drawn
        "[...document.querySelectorAll('.plotly-graph-div')].every(d => d.querySelector('.main-svg'))"
    )
    tab.wait_for_timeout(500)  # plotly.js lays out the auto-margins in a second pass
    problems = {}
    for div in tab.locator(".plotly-graph-div").all():
        name = div.get_attribute("id").removeprefix("plot-")
        boxes = div.evaluate(LABEL_BOXES)
        r = div.bounding_box()
        frame = {"x0": r["x"], "y0": r["y"], "x1": r["x"] + r["width"], "y1": r["y"] + r["height"]}
        found = _overlaps(boxes) + [f"outside: {o}" for o in _outside(boxes, frame)]
        if found:
            problems[name] = found
    tab.close()
    assert not problems, problems
