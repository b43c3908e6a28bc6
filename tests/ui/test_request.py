"""One request per answer (ui/request.py): the only place pages and ui/ build a Scenario, from the sidebar and the
page's controls; a page without Explore's controls answers the request they set."""

from __future__ import annotations

import ast
from pathlib import Path

import streamlit as st

from moe_model.llama.builds import CPU_SHARE_BUILD
from moe_model.llama.slot_plan import Placement
from ui.request import app_scenario, kept_page_controls
from ui.state import SCENARIO

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "ui" / "request.py"
SERVING = {"n_ctx": 8192, "concurrency": 2, "depth": 1024, "prompt_tokens": 512}


def _scenario_calls(path: Path) -> list[int]:
    """Lines of `path` that call Scenario(...) (by name or as an attribute), i.e. construct one."""
    calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]
    named = [c for c in calls if getattr(c.func, "id", getattr(c.func, "attr", None)) == "Scenario"]
    return [c.lineno for c in named]


def test_pages_and_ui_build_no_scenario_outside_the_one_builder():
    sources = [*sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "ui").glob("*.py")), ROOT / "app.py"]
    found = {str(p.relative_to(ROOT)): _scenario_calls(p) for p in sources if p != BUILDER}
    assert {name: lines for name, lines in found.items() if lines} == {}
    assert _scenario_calls(BUILDER)  # the builder is where it is built


def test_the_scenario_check_sees_a_construction(tmp_path):
    """Positive control: a page that builds its own Scenario is caught, by name and through the module."""
    probe = tmp_path / "page.py"
    probe.write_text("from moe_model.speed import scenario\nfrom moe_model.speed.scenario import Scenario\n"
                     "a = Scenario(concurrency=2)\nb = scenario.Scenario()\n")  # fmt: skip
    assert _scenario_calls(probe) == [3, 4]


def test_the_request_carries_every_control_the_page_set():
    placement = Placement(cpu_moe=False, n_cpu_moe=4)
    sc = app_scenario(SERVING, CPU_SHARE_BUILD, placement, "none", 0.5, draft_tokens=3, accept_rate=0.6)
    assert (sc.n_ctx, sc.concurrency, sc.depth, sc.prompt_tokens) == (8192, 2, 1024, 512)
    assert (sc.build, sc.placement, sc.load_mode, sc.cpu_share) == (CPU_SHARE_BUILD, placement, "none", 0.5)
    assert (sc.draft_tokens, sc.accept_rate, sc.budget_mib) == (3, 0.6, 0)


def test_a_page_without_explores_controls_answers_the_request_they_set():
    st.session_state["kept"] = {SCENARIO[n].url_key: v for n, v in (("draft_tokens", 3), ("cpu_share", 0.5))}
    try:
        assert kept_page_controls(CPU_SHARE_BUILD) == {"cpu_share": 0.5, "draft_tokens": 3, "accept_rate": 0.7}
        assert kept_page_controls(CPU_SHARE_BUILD - 1)["cpu_share"] == 0.0  # the build has no CPU share
    finally:
        del st.session_state["kept"]
