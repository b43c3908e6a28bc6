"""Explore's headline (issue 38): four metric cards, usable / slow / unusable said by the box's colour, and a basis
badge on every figure of the headline area (the cards, the sentences at the chosen budget, the boxes)."""

from __future__ import annotations

import re

import pytest
from test_app import open_page

from moe_model.answers.basis import CALIBRATED, MEASURED, MODELLED, REPLAYED

QWEN235 = "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"
BADGE = re.compile(rf":[a-z]+-badge\[({MEASURED}|{REPLAYED}|{CALIBRATED}|{MODELLED})\]")
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:t/s|s\b|%|MiB|GiB)")  # a number with its unit
CARDS = ("decode t/s", "prompt t/s", "first token (s)", "hit rate")
LEAD = re.compile(r"^\*\*.*?\*\*:?")  # the bold lead names the setting ("**At 10,000 MiB**:"): inputs, not figures


def sentences(text: str) -> list[str]:
    """`text` cut at each '. ' outside parentheses (a range's '(range 1.2–3.4; ...)' stays whole)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == "." and depth == 0 and text[i + 1 : i + 2] in (" ", "\n", ""):
            out.append(text[start : i + 1])
            start = i + 1
    return [*out, text[start:]]


def unbadged(text: str) -> list[str]:
    """The sentences of `text` that show a figure and carry no basis badge."""
    return [s for s in sentences(LEAD.sub("", text.strip())) if FIGURE.search(s) and not BADGE.search(s)]


def headline_texts(at) -> list[str]:
    """The headline area's text: the sentences at the chosen budget and every box of the page's main area."""
    boxes = [*at.main.success, *at.main.warning, *at.main.error, *at.main.info]
    return [m.value for m in at.main.markdown if m.value.startswith("**At ")] + [b.value for b in boxes]


def assert_every_figure_badged(at) -> None:
    cards = at.main.metric
    assert tuple(c.label.split(" :")[0] for c in cards[:4]) == CARDS
    assert all(BADGE.search(c.label) for c in cards if re.search(r"\d", c.value)), [c.label for c in cards]
    texts = headline_texts(at)
    assert any(t.startswith("**At ") and FIGURE.search(t) for t in texts)
    assert {t[:40]: unbadged(t) for t in texts if unbadged(t)} == {}


@pytest.fixture(scope="module")
def t4():
    """The default view (Qwen3-30B-A3B on a Tesla T4) with the best setting shown."""
    at = open_page("pages/explore.py", best="True")
    assert not at.exception
    return at


def test_every_figure_of_explores_headline_carries_a_basis_badge(t4):
    assert_every_figure_badged(t4)


def test_the_walk_sees_a_figure_without_a_badge():
    """Positive control: a figure whose sentence has no badge is caught; its badged neighbour is not."""
    said = "**At 10 MiB**: 4.2 t/s decode :orange-badge[modelled]. Prompt 300 t/s. 12 layers in host memory."
    assert unbadged(said) == [" Prompt 300 t/s."]


def test_a_usable_t4_best_setting_is_a_success_box(t4):
    best = [s.value for s in t4.main.success if s.value.startswith("**Best setting: ")]
    assert len(best) == 1 and "This setting is usable" in best[0]
    assert any(s.value.startswith("This setting is usable") for s in t4.main.success)


@pytest.mark.slow
def test_the_235b_on_a_4090_with_64_gib_and_a_hdd_is_unusable_not_a_success_box():
    """The issue's case: 0.1 t/s and minutes to the first token were a green "Best setting"."""
    at = open_page("pages/explore.py", model=QWEN235, gpu="RTX 4090", ram="64", drive="HDD", best="True")
    assert not at.exception
    assert not [s.value for s in at.main.success if s.value.startswith(("**Best setting", "This setting is"))]
    best = next(e.value for e in [*at.main.error, *at.main.warning] if e.value.startswith("**Best setting: "))
    assert "This setting is unusable" in best and "GiB of RAM, so the experts stay in memory" in best
    assert any(e.value.startswith("This setting is unusable") for e in at.main.error)
    assert_every_figure_badged(at)
