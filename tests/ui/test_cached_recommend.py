"""The recommender as the pages call it (ui/cached_recommend.py), below the UI: Explore's best setting, Shopping's
pick and `recommend` answer one request, drafting included (issue 37: draft tokens fell off Explore's call)."""

from __future__ import annotations

import json

import pytest
from cli_runs import run_cli
from conftest import QWEN30B

from moe_model.fits.calibration import default_time_model
from moe_model.llama.slot_plan import Placement
from moe_model.speed.hardware import preset
from ui import cached_recommend
from ui.request import app_scenario

SERVING = {"n_ctx": 4096, "concurrency": 1, "depth": 512, "prompt_tokens": 512}  # the sidebar's defaults
DRAFT = {"accept_rate": 0.7}


def _cleared() -> None:
    for cache in (cached_recommend._cached_recommend, cached_recommend.recommend_memo):
        cache.clear()


@pytest.mark.parametrize("draft", [0, 3])
def test_explores_best_setting_is_shoppings_pick_and_recommends_at_the_pages_draft(qwen30b, draft):
    hw, tm, build = preset("t4"), default_time_model(), 12569
    cli = run_cli("recommend", "--model", str(QWEN30B), "--hardware", "t4", "--draft", str(draft), "--json")
    best = json.loads(cli.stdout)["best"]
    _cleared()
    placement = Placement(cpu_moe=False, n_cpu_moe=24)  # the page's own setting: the recommender picks its own
    explore = app_scenario(SERVING, build, placement, "none", 0.0, draft_tokens=draft, **DRAFT)
    explored = cached_recommend.cached_recommend(qwen30b, str(QWEN30B), hw, tm, explore)[0]
    _cleared()
    shopping = app_scenario(SERVING, build, cpu_share=0.0, draft_tokens=draft, **DRAFT)
    picked = next(cached_recommend.cached_recommend_cards(qwen30b, str(QWEN30B), [hw], [tm], shopping))[0]
    assert explored.label == picked.label == best["label"]
    assert explored.prediction.decode_tps == picked.prediction.decode_tps == pytest.approx(best["decode_tps"])
    assert explored.command == picked.command == best["command"]
    assert explored.prediction.scenario.draft_tokens == draft
    assert ("-max 3 " in best["command"]) == (draft == 3)  # the draft flag of llama-server's command
