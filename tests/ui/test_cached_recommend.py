"""The recommender as the pages call it (ui/cached_recommend.py), below the UI: Explore's best setting, Shopping's
pick and `recommend` answer one request, drafting included (issue 37: draft tokens fell off Explore's call); the
work runs on page-work threads and stops once its session leaves the page (issue 38)."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest
from cli_runs import run_cli
from conftest import QWEN30B

from moe_model.answers import recommend
from moe_model.fits.calibration import default_time_model
from moe_model.llama.slot_plan import Placement
from moe_model.progress import WorkStoppedError
from moe_model.speed.hardware import preset
from ui import background, cached_recommend
from ui.request import app_scenario

SERVING = {"n_ctx": 4096, "concurrency": 1, "depth": 512, "prompt_tokens": 512}  # the sidebar's defaults
DRAFT = {"accept_rate": 0.7}


def _cleared() -> None:
    for cache in (
        cached_recommend._cached_recommend,
        cached_recommend.recommend_memo,
        cached_recommend._shared_replays,
    ):
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


class _RerunError(Exception):
    """What st.rerun raises in a script run: here it ends the waiting thread."""


@pytest.fixture
def held_replays(monkeypatch):
    """One session ("a") with fresh page-work registries; every replay of the recommender waits for the returned
    event once it has started (`entered`), so the test acts while the work is mid-way."""
    for name in ("_JOBS", "_WANTED", "_PAGE"):
        monkeypatch.setattr(background, name, {})
    monkeypatch.setattr(background, "_session_id", lambda: "a")
    monkeypatch.setattr(background.st, "rerun", lambda: (_ for _ in ()).throw(_RerunError()))
    entered, gate, replay = threading.Event(), threading.Event(), recommend.replay

    def held(*args, **kwargs):
        entered.set()
        gate.wait(60)
        return replay(*args, **kwargs)

    monkeypatch.setattr(recommend, "replay", held)
    _cleared()
    yield entered, gate
    gate.set()


def _page_waiting(ask) -> threading.Thread:
    """The page's script thread: asks, and waits with its progress (ends when the work it waits for stops)."""

    def run() -> None:
        with contextlib.suppress(_RerunError):
            ask()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("n_cards", [1, 2])  # one card: its own ranking; two: first the replays they share
def test_shoppings_work_stops_mid_replay_once_the_session_goes_to_another_page(qwen30b, held_replays, n_cards):
    entered, gate = held_replays
    hardware = [preset("t4"), preset("4090")][:n_cards]
    tm, request = default_time_model(), app_scenario(SERVING, 12569, cpu_share=0.0)
    page = _page_waiting(
        lambda: list(cached_recommend.cached_recommend_cards(qwen30b, "m.gguf", hardware, tm, request))
    )
    assert entered.wait(120)
    (job,) = background._JOBS.values()  # the shared replays, or the one card's ranking
    assert job.key[0] == ("_shared_replays" if n_cards > 1 else "_cached_recommend") and job.owners == {"a"}
    background.on_page("learn")
    gate.set()
    with pytest.raises(WorkStoppedError):  # not finished for nobody: stopped at the replay's next checkpoint
        job.future.result(timeout=120)
    page.join(60)
    assert not page.is_alive() and not background._JOBS
    assert not cached_recommend._cached_recommend.is_cached(
        qwen30b, "m.gguf", hardware[0], tm, recommend.request_of(request)
    )


@pytest.mark.parametrize("how", ["another page", "switched off"])
def test_explores_best_setting_stops_mid_replay_once_unwanted(qwen30b, held_replays, how):
    entered, gate = held_replays
    hw, tm, request = preset("t4"), default_time_model(), app_scenario(SERVING, 12569, cpu_share=0.0)
    page = _page_waiting(lambda: cached_recommend.cached_recommend(qwen30b, "m.gguf", hw, tm, request))
    assert entered.wait(120)
    (job,) = background._JOBS.values()
    background.on_page("shopping") if how == "another page" else cached_recommend.no_best_setting()
    gate.set()
    with pytest.raises(WorkStoppedError):
        job.future.result(timeout=120)
    page.join(60)
    assert not page.is_alive() and not background._JOBS
