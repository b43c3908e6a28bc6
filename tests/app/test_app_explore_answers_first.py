"""Explore's "simulate prompts too" and "compare policies" answer first (issue 38), every figure of their answers
badged by the rules test_app_badges_everywhere walks the rest of the page with."""

from __future__ import annotations

import test_app_badges_everywhere as walk
from test_app import open_page


def test_the_prompts_answer_and_the_whole_policy_comparison_badge_every_figure(monkeypatch):
    at = open_page("pages/explore.py")
    at.toggle(key="sim_prompts").set_value(True).run()
    at.toggle(key="compare_policies").set_value(True).run()
    assert not at.exception
    (said,) = [c.value for c in at.caption if c.value.startswith("Simulating the first 512 prompt tokens")]
    assert walk.figures(said, set()) and walk.unbadged(at) == {}  # the page up to the comparison, this caption in it
    shown = walk._walk(at.main.children.values())
    start = next(i for i, e in enumerate(shown) if e.type == "subheader" and e.value == walk.POLICIES)
    section = [e for e in shown[start:] if e.type in ("markdown", "caption", "plotly_chart")]
    assert [e.type for e in section if e.type != "caption"] == ["markdown", "plotly_chart", "plotly_chart"]
    table = section[[e.type for e in section].index("markdown")].value  # each policy at the budget, before the curves
    assert len(walk.figures(table, walk.control_values(at))) == 2 * len(at.multiselect(key="policies").value)
    monkeypatch.setattr(walk, "page_elements", lambda _: section)
    assert walk.unbadged(at) == {}


def test_compare_policies_draws_its_table_before_the_curve_charts_it_left_as_they_were(monkeypatch):
    import ui.background
    import ui.reused

    at = open_page("pages/explore.py")  # the curve known: the toggle's run redraws the same charts
    order = []
    awaited, reused = ui.background.awaited, ui.reused.reused

    def noting_awaited(job, label, box=None):
        order.append(label)
        return awaited(job, label, box)

    def noting_reused(slot, *args):
        order.append(slot)
        return reused(slot, *args)

    monkeypatch.setattr(ui.background, "awaited", noting_awaited)
    monkeypatch.setattr(ui.reused, "reused", noting_reused)
    at.toggle(key="compare_policies").set_value(True).run()
    assert not at.exception
    table = next(i for i, what in enumerate(order) if what.startswith("Replaying each policy at"))
    assert table < order.index("explore:charts")
