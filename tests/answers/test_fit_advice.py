"""What would fit: each suggested change makes the setting fit, and it is the smallest of its kind (one step
less does not fit); recommend says what would fit when nothing does."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import QWEN235B_SHARD1

from moe_model.answers.fit_advice import (
    CTX_STEP,
    check_fit,
    ram_words,
    recommend_advice,
    run_state,
    smallest_change,
    would_fit,
)
from moe_model.answers.recommend import recommend
from moe_model.fits.calibration import default_time_model
from moe_model.llama.slot_plan import Placement
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario

RTX3060 = preset("RTX 3060 12GB")


@pytest.fixture(scope="module")
def qwen235b():
    return load_model(QWEN235B_SHARD1)


def _kinds(changes) -> dict:
    return {c.kind: c for c in changes}


def test_a_setting_that_fits_needs_no_change(qwen30b):
    sc = Scenario(Placement.parse("cpu-moe"), budget_mib=2000)
    assert check_fit(qwen30b, RTX3060, sc).fits  # positive control
    assert would_fit(qwen30b, RTX3060, sc) == []


def test_235b_on_64_gib_needs_exactly_the_ram_its_host_experts_take(qwen235b):
    hw = preset("RTX 4090").with_changes(ram_gib=64.0)
    sc = Scenario()  # --cpu-moe: VRAM fits, the host experts do not fit the RAM
    assert check_fit(qwen235b, hw, sc).layout.vram.fits and not check_fit(qwen235b, hw, sc).fits
    changes = would_fit(qwen235b, hw, sc)
    assert list(_kinds(changes)) == ["ram"]  # fewer layers in RAM cannot fit 24 GB of VRAM
    ram = changes[0].ram_gib
    assert check_fit(qwen235b, hw.with_changes(ram_gib=ram), sc).fits
    assert not check_fit(qwen235b, hw.with_changes(ram_gib=ram - 1), sc).fits
    assert changes[0].text.startswith(f"{ram} GiB of RAM for --cpu-moe")


def test_a_too_large_budget_gets_the_largest_budget_that_fits(qwen30b):
    sc = Scenario(Placement.parse("cpu-moe"), budget_mib=20_000)
    change = _kinds(would_fit(qwen30b, RTX3060, sc))["budget"]
    budget = change.scenario.budget_mib
    assert 0 < budget < 20_000 and check_fit(qwen30b, RTX3060, change.scenario).fits
    assert not check_fit(qwen30b, RTX3060, sc.with_budget(budget + 1)).layout.vram.fits
    assert change.text.startswith(f"--moe-cache-mib {budget} (from 20000)") and change.fits_alone


def test_all_on_the_gpu_gets_the_fewest_layers_in_ram_that_fit(qwen30b):
    sc = Scenario(Placement.parse("gpu"))
    change = _kinds(would_fit(qwen30b, RTX3060, sc))["n_cpu_moe"]
    k = change.placement.n_cpu_moe
    assert check_fit(qwen30b, RTX3060, change.scenario).fits
    assert not check_fit(qwen30b, RTX3060, replace(sc, placement=Placement(cpu_moe=False, n_cpu_moe=k - 1))).fits
    assert change.as_dict()["flags"] == ["--n-cpu-moe", str(k)]


def test_a_long_context_gets_the_longest_that_fits_and_a_q8_0_kv_cache(qwen30b):
    sc = Scenario(Placement.parse("cpu-moe"), budget_mib=2000, n_ctx=131_072)
    changes = _kinds(would_fit(qwen30b, RTX3060, sc))
    n_ctx = changes["context"].scenario.n_ctx
    assert n_ctx % CTX_STEP == 0 and check_fit(qwen30b, RTX3060, changes["context"].scenario).fits
    assert not check_fit(qwen30b, RTX3060, replace(sc, n_ctx=n_ctx + CTX_STEP)).fits
    kv = changes["kv_cache"]
    assert kv.scenario.kv_types == ("q8_0", "q8_0") and check_fit(qwen30b, RTX3060, kv.scenario).fits
    assert "-fa on" in kv.text  # a quantized V cache needs flash attention
    assert smallest_change(list(changes.values())).kind == "kv_cache"  # flags of this machine before more RAM


def test_a_shorter_context_is_never_offered_below_what_the_streams_at_the_depth_need(qwen30b):
    """Explore and Shopping raise the context to hold the depth: the advice must not cut it back (the scenario would
    refuse it), and with no room above the depth it offers other changes instead."""
    deep = Scenario(Placement.parse("cpu-moe"), budget_mib=2000, n_ctx=131_072, concurrency=2, depth=20_000)
    context = _kinds(would_fit(qwen30b, RTX3060, deep))["context"].scenario
    assert 40_000 <= context.n_ctx < 131_072 and check_fit(qwen30b, RTX3060, context).fits
    at_depth = replace(deep, n_ctx=131_072, concurrency=1, depth=131_072)
    changes = _kinds(would_fit(qwen30b, RTX3060, at_depth))
    assert "context" not in changes and changes  # -c cannot shrink below the depth; the KV cache type can


def test_recommend_says_nothing_fits_and_what_would(qwen30b):
    hw = RTX3060.with_changes(ram_gib=2.0)  # no page cache left beside the reserve: not even mmap'd experts run
    work = synthetic_workload(qwen30b, Scenario(), n_tokens=400)
    options = recommend(qwen30b, hw, default_time_model().params, Scenario(), lambda sc: work, "m.gguf")
    advice = recommend_advice(qwen30b, hw, options)
    assert not advice.fits and advice.would_fit
    assert advice.summary.startswith("nothing fits RTX 3060 12GB (12 GB) with 2 GiB of RAM; the smallest change")
    ram = min(c.ram_gib for c in advice.would_fit if c.kind == "ram")
    assert any(check_fit(qwen30b, hw.with_changes(ram_gib=ram), o.prediction.scenario).fits for o in options)
    roomy = RTX3060.with_changes(ram_gib=64.0)  # positive control: the same model fits with enough RAM
    fine = recommend_advice(qwen30b, roomy, recommend(qwen30b, roomy, default_time_model().params, Scenario(),
                                                      lambda sc: work, "m.gguf"))  # fmt: skip
    assert fine.fits and fine.summary.startswith("fits: ") and "; best: " in fine.summary and fine.would_fit == ()


def _answers(model, ram_gib: float, *cards: str):
    """Each card in a host of `ram_gib`, ranked by recommend on a short synthetic workload (the page's own path)."""
    from moe_model.answers.fit_advice import card_answer

    work = synthetic_workload(model, Scenario(), n_tokens=400)
    out = []
    for name in cards:
        hw = preset(name).with_changes(ram_gib=ram_gib)
        out.append(card_answer(model, hw, recommend(model, hw, default_time_model().params, Scenario(),
                                                    lambda sc: work, "m.gguf")))  # fmt: skip
    return out


def test_the_summary_says_the_state_first_streaming_from_disk_before_the_speed(qwen235b):
    """Issue 37: Qwen3-235B on a 4080 with 64 GiB: 'summary: best: ..., 1.1 t/s predicted' while every row streams
    from disk. The state leads, with the RAM that would end it; then the best and how many of them stream."""
    (answer,) = _answers(qwen235b, 64.0, "RTX 4080 16GB")
    summary, best = answer.advice.summary, answer.best
    assert summary.startswith(f"streams from disk: {best.host.needed_gib} GiB of RAM would end it (the machine has 64")
    assert summary.index("streams from disk") < summary.index(f"{best.prediction.decode_tps:.1f} t/s predicted")
    running = [o for o in answer.options if o.usable]
    assert all(o.host.streams for o in running)
    pinned = [o for o in answer.options if o.prediction.scenario.pinned]  # pinned memory cannot page: refused
    assert pinned and not any(o.usable for o in pinned) and all(o.host.pinned for o in pinned)
    n, m = len(running), len(answer.options)
    assert summary.endswith(f"{n} of {m} settings run on RTX 4080 16GB, {n} of them streaming from disk")


def test_the_state_of_a_setting_is_said_the_same_way_for_each_outcome(qwen30b):
    """run_state: what predict's first line and recommend's summary lead with."""
    from moe_model.speed.time_model import predict

    params = default_time_model().params

    def state(hw, sc):
        pred = predict(qwen30b, hw, params, sc, hit_rate=0.5)
        return run_state(pred, pred.layout.ram)

    cpu_moe = Scenario(Placement(cpu_moe=True), 2000)
    assert state(RTX3060.with_changes(ram_gib=32.0), cpu_moe).startswith("fits: ")
    assert state(RTX3060.with_changes(ram_gib=32.0), cpu_moe).endswith("of 32 GiB of RAM used")
    assert "RAM not stated: it needs " in state(RTX3060, cpu_moe)  # the preset's 32 GiB is no one's statement
    assert state(RTX3060.with_changes(ram_gib=8.0), cpu_moe).startswith("streams from disk: 19 GiB of RAM")
    pinned = replace(cpu_moe, load_mode="none")
    assert state(RTX3060.with_changes(ram_gib=8.0), pinned).startswith("does not fit in RAM: needs 19 GiB")
    assert state(RTX3060, Scenario(Placement(cpu_moe=True), 20_000)).startswith("does not fit: ")
    assert state(RTX3060, Scenario(Placement(cpu_moe=True), 10)).startswith("does not start: ")
    tight = state(RTX3060.with_changes(ram_gib=32.0), Scenario(Placement(cpu_moe=True), 9600))
    assert "MiB of VRAM free (too close to call: it leaves less than llama.cpp's 1,024 MiB margin)" in tight  # a verb


def test_shopping_says_the_cpu_shares_note_once_where_the_share_is_on_on_a_build_that_has_it(qwen30b):
    """Issue 30: predictions carry the share's note per card; Shopping says it once, for the model and the build."""
    from moe_model.answers.fit_advice import CardAnswer, shopping_share_note
    from moe_model.llama.builds import CPU_SHARE_BUILD, MAINLINE_BUILD
    from moe_model.policies.cpu_share import share_note

    answers = _answers(qwen30b, 128.0, "RTX 4080 16GB", "RTX 4090")
    assert not any(a.best.prediction.scenario.cpu_share for a in answers)  # no card's pick splits its misses
    assert shopping_share_note(qwen30b, answers, 0.0, MAINLINE_BUILD) is None
    assert shopping_share_note(qwen30b, answers, 0.5, MAINLINE_BUILD) == share_note(qwen30b)
    assert shopping_share_note(qwen30b, answers, 0.5, CPU_SHARE_BUILD - 1) is None  # a build without the flag
    shared = next(o for a in answers for o in a.options if o.usable and o.prediction.scenario.cpu_share)
    assert share_note(qwen30b) in shared.prediction.notes  # the line each such prediction carries
    picked = [*answers, CardAnswer(answers[0].hardware, (shared,), answers[0].advice)]
    assert shopping_share_note(qwen30b, picked, 0.0, MAINLINE_BUILD) == share_note(qwen30b)  # a pick uses a share


def test_a_verdict_names_no_ram_size_nobody_stated():
    plain = preset("RTX 4090")
    unstated = plain.with_changes(host=replace(plain.host, stated=()))
    assert ram_words(unstated) == "any RAM that holds it (RAM not stated)"
    assert ram_words(plain.with_changes(ram_gib=48.0)) == "48 GiB of RAM"
