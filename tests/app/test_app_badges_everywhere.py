"""Every figure Explore and Shopping show says how it is known (issue 38: "the badge is on every number of Explore,
Shopping and `predict`'s text"), walked in Streamlit's AppTest over the main area's rendered elements: markdown,
captions, boxes, metric cards, the charts' text and the dataframes.

A figure is a number with a unit (t/s, ms, s, MiB, GiB, GB, GB/s, %, hit-rate points). Not figures: a control's own
label or value, a number that restates what a control holds (the budget in "At 10,000 MiB", the RAM box's 32 GiB
in "your host: 32 GiB RAM"), the bold lead naming a setting ("**Best setting: ... 12544 MiB cache**"), commands.
Each line of an element that shows a figure must begin with a basis badge (which then labels the line), or else
each of its sentences with a figure must carry one: a basis word in prose ("calibrated", "measured machines") is
no badge. A chart with a figure anywhere in its text (title, subtitle, trace names, labels, hovers) has a basis
tag ('[modelled]', answers.basis.text_tag: a chart draws no badge) in its title or subtitle; a dataframe with
figures has a column of basis words beside them. Explore's policy comparison (from its subheader on) is another
section's and is left out here."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1.element_tree import Block
from test_app import SMALL_MODEL, _values, open_page
from test_app_host_run import SLOW_RUN, _upload

from moe_model.answers.basis import CALIBRATED, MEASURED, MODELLED, REPLAYED

WORDS = (MEASURED, REPLAYED, CALIBRATED, MODELLED)
BADGE = re.compile(rf":[a-z]+-badge\[({'|'.join(WORDS)})\]")
TAG = re.compile(rf"\[({'|'.join(WORDS)})\]")  # a basis word as text draws it (answers.basis.text_tag): charts
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.\-/])±?({NUMBER})(?:\s?[–-]\s?{NUMBER})?\s?(t/s|ms|s|MiB|GiB|GB/s|GB|%|(?:hit-rate )?points)(?![\w/])"
)
LEAD = re.compile(r"^\*\*.*?\*\*:?")  # "**At 10,000 MiB**:", "**Best setting: ...**": the setting, an input
POLICIES = "Replacement policies on this workload"  # Explore's policy comparison: its own section, left out
QWEN235 = "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"
TEXT_TYPES = {"markdown", "caption", "success", "warning", "error", "info"}


def sentences(text: str) -> list[str]:
    """`text` cut at each '. ' outside parentheses (a range's '(range 1.2–3.4; ...)' stays whole)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == "." and depth == 0 and text[i + 1 : i + 2] in (" ", ""):
            out.append(text[start : i + 1])
            start = i + 1
    return [*out, text[start:]]


def figures(text: str, inputs: set[float]) -> list[str]:
    """The figures `text` shows, less those restating a control's value."""
    found = [m for m in FIGURE.finditer(text) if float(m[1].replace(",", "")) not in inputs]
    return [m[0] for m in found]


def unlabelled(text: str, inputs: set[float]) -> list[str]:
    """The parts of an element's text that show a figure with no basis next to it (see the module's words)."""
    out = []
    for line in LEAD.sub("", text.strip()).splitlines():
        line = line.strip().removeprefix("- ")
        if BADGE.match(line):
            continue
        out += [s for s in sentences(line) if figures(s, inputs) and not BADGE.search(s)]
    return out


def _walk(node) -> list:
    """The elements under `node` in page order (blocks opened)."""
    out = []
    for e in node:
        out += _walk(e.children.values()) if isinstance(e, Block) else [e]
    return out


def page_elements(at) -> list:
    """The main area's elements in order, up to Explore's policy comparison."""
    shown = _walk(at.main.children.values())
    stop = next((i for i, e in enumerate(shown) if e.type == "subheader" and e.value == POLICIES), len(shown))
    return shown[:stop]


def control_values(at) -> set[float]:
    """Every number a control on the page holds (sidebar and main): figures restating them are inputs."""
    values = set()
    for e in _walk(at.sidebar.children.values()) + _walk(at.main.children.values()):
        value = (
            getattr(e, "value", None) if e.type in {"number_input", "slider", "select_slider", "selectbox"} else None
        )
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values.add(float(v))
    return values


def chart_text(fig: dict) -> tuple[str, list[str]]:
    """A plotly figure's title and subtitle, and every other text it shows (names, labels, hovers)."""
    title = fig["layout"].get("title", {})
    head = f"{title.get('text', '')} {title.get('subtitle', {}).get('text', '')}"
    shown = [a.get("text", "") for a in fig["layout"].get("annotations", [])]
    for trace in fig["data"]:
        for key in ("name", "text", "y", "x", "hovertemplate", "customdata"):
            values = _values(trace.get(key))
            shown += [v for v in np.ravel(np.array(values, dtype=object)) if isinstance(v, str)] if values else []
    return head, [re.sub(r"%\{[^}]*\}", "", s).replace("<br>", " ") for s in shown]


def frame_basis(frame: pd.DataFrame) -> bool:
    """Whether a frame's figures stand beside a column of basis words."""
    return len(frame) > 0 and any(frame[c].isin(WORDS).all() for c in frame.columns)


def frame_figures(frame: pd.DataFrame) -> bool:
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    return bool(numeric) or any(FIGURE.search(str(v)) for c in frame.columns for v in frame[c])


def unbadged(at) -> dict[str, list[str]]:
    """Every element of the page with a figure and no basis next to it, as 'type: start of its text' -> parts."""
    inputs, found = control_values(at), {}
    for e in page_elements(at):
        if e.type in TEXT_TYPES:
            missing = unlabelled(e.value, inputs)
        elif e.type == "metric":
            said = f"{e.value} {e.proto.delta}"
            missing = [said] if figures(said + " t/s", inputs) and not BADGE.search(e.label) else []
        elif e.type == "plotly_chart":
            head, shown = chart_text(json.loads(e.proto.spec))
            missing = [s for s in shown if figures(s, inputs)] if not TAG.search(head) else []
            e = type("Chart", (), {"type": "chart", "value": head})
        elif e.type in ("dataframe", "arrow_data_frame"):
            missing = ["a frame without a basis column"] if frame_figures(e.value) and not frame_basis(e.value) else []
        else:
            continue
        if missing:
            found[f"{e.type}: {str(e.value)[:60]}"] = missing[:3]
    return found


@pytest.fixture(scope="module")
def explore():
    """Explore's default view (Qwen3-30B-A3B on a Tesla T4) with the best setting shown."""
    at = open_page("pages/explore.py", best="True")
    assert not at.exception
    return at


@pytest.fixture(scope="module")
def shopping():
    at = open_page("pages/shopping.py")
    assert not at.exception
    return at


def test_when_no_card_runs_what_would_fit_on_shopping_says_how_it_is_known():
    """Qwen3-235B in 2 GiB of RAM: no card runs, the lead names the RAM each would need (the memory model's)."""
    cards = "RTX 4080 16GB;RTX 4090"
    at = open_page("pages/shopping.py", model=QWEN235, gpu="RTX 4090", ram="2", cards=cards)
    assert not at.exception and at.main.warning[0].value.startswith("Your RTX 4090: nothing runs (")
    assert unbadged(at) == {}


def test_every_figure_on_explore_says_how_it_is_known(explore):
    shown = page_elements(explore)
    assert {"metric", "markdown", "caption", "success", "plotly_chart"} <= {e.type for e in shown}
    assert len([e for e in shown if e.type == "plotly_chart"]) >= 6  # both ranges, speed, hits, uploads, ...
    assert unbadged(explore) == {}


def test_every_figure_on_shopping_says_how_it_is_known(shopping):
    shown = page_elements(shopping)
    assert {"info", "caption", "plotly_chart", "dataframe"} <= {e.type for e in shown} | {
        "info" if shopping.main.warning else ""
    }
    assert unbadged(shopping) == {}


def test_with_your_cpu_run_every_figure_on_shopping_still_says_how_it_is_known():
    """A host record calibrates every card and restates the host's RAM and threads as it measured them."""
    at = open_page("pages/shopping.py", model=SMALL_MODEL, gpu="RTX 3060 12GB")
    _upload(at, "host.json", SLOW_RUN.to_json().encode())
    assert not at.exception and set(at.dataframe[0].value["decode is"]) == {CALIBRATED}
    assert unbadged(at) == {}


def test_the_range_hints_name_the_apps_controls_never_a_command_line_flag(explore, shopping):
    """RangeSource.narrowed_by names CLI flags (--ram-kit, --hit-rate); the pages say the app's words."""
    flag = re.compile(r"(?<![\w-])--(ram-kit|cpu\b|slot|drive|disk-gbs|hit-rate|host)")
    hints = [e.value for at in (explore, shopping) for e in page_elements(at) if e.type == "caption"]
    hints = [h for h in hints if "widest source" in h.lower() or "range from" in h.lower()]
    assert hints and not [h for h in hints if flag.search(h) or "`calibrate`" in h]
    hovers = [
        s for e in page_elements(explore) if e.type == "plotly_chart" for s in chart_text(json.loads(e.proto.spec))[1]
    ]
    assert any("narrowed by" in s for s in hovers) and not [s for s in hovers if "narrowed by" in s and flag.search(s)]


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("Prompt 300 t/s. 4.2 t/s decode :orange-badge[modelled].", ["Prompt 300 t/s."]),
        (":orange-badge[modelled] Range from: time model 5.1–8.2 t/s. Widest source: 5.0-9.0 t/s.", []),
        ("Widest source: time model (52.5-80.5 t/s); the other sources alone span 51.2-70.1 t/s.", ["Widest"]),
        ("How each number is known: decode modelled (the time model, ±21 % left out).", ["How each"]),  # prose
        ("How each number is known: decode :orange-badge[modelled] (the time model, ±21 % left out).", []),
        ("**At 10,000 MiB**: fits in 32 GiB of RAM.", []),  # the budget and the RAM box: inputs
        (
            "**What would fit**:\n- 131 GiB of RAM :orange-badge[modelled]\n- 5 layers on the GPU, 2 GiB free",
            ["5 layers"],
        ),
        ("b12569, Qwen3-30B-A3B, -np 4, 2x32 GB DDR5-6000, PCIe 4.0 x16, 512 tokens", []),
    ],
)
def test_the_walk_finds_a_figure_without_its_basis_and_only_that(text, missing):
    """Positive and negative controls of the rule the pages are walked with."""
    found = unlabelled(text, {10_000.0, 32.0})
    assert len(found) == len(missing) and all(f.strip().startswith(m) for f, m in zip(found, missing, strict=True))
