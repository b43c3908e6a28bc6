"""Recommend: candidates ranked by predicted speed, the best starts and fits, with a verifiable command."""

from __future__ import annotations

from moe_model.answers.recommend import recommend
from moe_model.answers.verdict import NOT_COMPARED, TOO_CLOSE_ON_READINGS, cache_verdict
from moe_model.fits.calibration import default_time_model
from moe_model.llama.slot_plan import Placement
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import preset
from moe_model.speed.ranges import POLICY_SOURCE
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import predict


def test_recommend_ranks_usable_options_first_and_gives_a_command_with_lv_4(qwen30b):
    hw, tm = preset("t4"), default_time_model()
    options = recommend(
        qwen30b, hw, tm.params, Scenario(), lambda sc: synthetic_workload(qwen30b, sc, n_tokens=800), "m.gguf",
        tm.ranges(),
    )  # fmt: skip
    usable = [o for o in options if o.prediction.usable]
    speeds = [o.prediction.decode_tps for o in usable]
    assert len(usable) >= 5 and options[: len(usable)] == usable
    exact = [o for o in usable if not o.prediction.scenario.cpu_share]
    assert speeds[1:] == sorted(speeds[1:], reverse=True) and options[0] in (usable[0], exact[0])
    best = options[0]
    assert best.command.startswith("llama-server -m m.gguf") and best.command.endswith("-lv 4")
    labels = " | ".join(o.label for o in options)
    assert "--fit" in labels and "--cpu-moe" in labels and "--n-cpu-moe" in labels and "--load-mode none" in labels
    assert "CPU share 0.5 (modelled policy)" in labels
    verdicts = {"helps", "hurts", "too close to call", TOO_CLOSE_ON_READINGS, "no cache", NOT_COMPARED, "does not fit"}
    assert {o.verdict for o in options} <= verdicts
    cached = [o for o in usable if o.prediction.scenario.budget_mib and not o.prediction.scenario.cpu_share]
    assert cached and all(o.as_dict()["policy_band"]["width_points"] >= 0 for o in cached)  # b12569: ClassLRU's band


def test_a_url_model_gets_mu_in_the_command():
    from moe_model.answers.recommend import command_line
    from moe_model.llama.slot_plan import Placement

    line = command_line("https://host/m.gguf", Scenario(budget_mib=100), Placement())
    assert line.startswith("llama-server -mu https://host/m.gguf --cpu-moe --moe-cache-mib 100")


def test_recommend_never_picks_pinned_experts_beyond_the_ram_and_prices_mmapd_ones_streaming_from_disk(qwen30b):
    from moe_model.answers.recommend import recommend
    from moe_model.fits.calibration import default_time_model
    from moe_model.pricing.workloads import synthetic_workload
    from moe_model.speed.hardware import preset
    from moe_model.speed.scenario import Scenario

    hw = preset("RTX 3060 12GB").with_changes(ram_gib=8.0)
    work = synthetic_workload(qwen30b, Scenario(), n_tokens=400)  # the RAM verdict, not the routing, is the point
    options = recommend(qwen30b, hw, default_time_model().params, Scenario(), lambda sc: work, "m.gguf")
    assert options and not any(o.usable for o in options if o.host.pinned and not o.host.fits)
    best = options[0].as_dict()
    assert best["usable"] and best["fits_ram"] is False and best["streams_from_disk"]
    assert options[0].prediction.breakdown_ms["disk"] > 0


def test_cards_share_one_replay_per_placement_and_answer_as_recommend_does_alone(qwen30b, monkeypatch):
    from moe_model.answers.recommend import replay_shared
    from moe_model.pricing import curve
    from moe_model.pricing.curve import ReplayMemo

    tm, base = default_time_model(), Scenario(build=11549)  # the exact LRU: every budget of a placement in one pass
    work = synthetic_workload(qwen30b, base, n_tokens=400)
    cards = [preset(name).with_changes(ram_gib=64) for name in ("t4", "rtx 4090", "rtx 5090")]
    alone = [recommend(qwen30b, hw, tm.params, base, lambda sc: work, "m.gguf", tm.ranges()) for hw in cards]
    replays = []
    real = curve.replay_counts
    monkeypatch.setattr(curve, "replay_counts", lambda *a: replays.append((a[2].policy_name, a[4])) or real(*a))
    memo = ReplayMemo(work)
    replay_shared(qwen30b, cards, base, memo)  # what Shopping runs first, then recommend per card
    shared = [recommend(qwen30b, hw, tm.params, base, memo, "m.gguf", tm.ranges()) for hw in cards]
    assert [[o.as_dict() for o in opts] for opts in shared] == [[o.as_dict() for o in opts] for opts in alone]
    cpu_moe = [p for name, p in replays if p.cpu_moe and name == base.policy_name]  # the build's own policy
    assert len(cpu_moe) == 1  # the --cpu-moe budgets of all three cards in one pass
    before = len(replays)
    again = recommend(qwen30b, cards[0], tm.params, base, memo, "m.gguf", tm.ranges())
    assert len(replays) == before  # a card answered before (a GPU switch back) replays nothing
    assert [o.as_dict() for o in again] == [o.as_dict() for o in alone[0]]


def test_recommend_never_picks_a_setting_too_close_to_call_for_vram():
    from conftest import MODELS

    from moe_model.answers.recommend import Option
    from moe_model.llama.slot_plan import Placement
    from moe_model.speed.vram import FIT_MARGIN_MIB

    # on an 8 GB card a cache soon eats the 1,024 MiB llama.cpp keeps free
    model = load_model(MODELS / "Qwen3.6-35B-A3B-UD-Q4_K_M.gguf")
    hw, tm = preset("3060 ti"), default_time_model()
    work = synthetic_workload(model, Scenario(), n_tokens=400)
    options = recommend(model, hw, tm.params, Scenario(), lambda sc: work, "m.gguf", tm.ranges())
    assert options[0].usable and all(o.prediction.vram.free_mib >= FIT_MARGIN_MIB for o in options if o.usable)
    tight = predict(model, hw, tm.params, Scenario(Placement(cpu_moe=False, n_cpu_moe=33), 2000), hit_rate=0.5)
    assert tight.vram.tight and tight.usable  # a speed is shown, with the warning
    said = cache_verdict(tight, None)
    assert not Option("ncmoe 33 + 2000 MiB", tight, "llama-server ...", said).usable  # but never picked


def test_a_deeper_context_slows_every_option_and_its_kv_cache_shrinks_the_budgets_offered(qwen30b):
    """What Shopping and Explore's best setting pass (the depth and the context raised to hold it) reaches every
    candidate: its decode, its VRAM verdict and the budgets that fit beside the deeper KV cache."""
    from moe_model.llama.slot_plan import Placement
    from moe_model.speed.scenario import cache_room_mib, context_for_depth
    from moe_model.speed.vram import kv_cache_mib

    hw, tm = preset("t4"), default_time_model()
    work = synthetic_workload(qwen30b, Scenario(), n_tokens=400)

    def options(depth: int) -> dict:
        base = Scenario(n_ctx=context_for_depth(4096, depth, 1), depth=depth)
        ranked = recommend(qwen30b, hw, tm.params, base, lambda sc: work, "m.gguf", tm.ranges())
        return {o.label: o for o in ranked}

    shallow, deep = options(512), options(32768)

    def largest_cpu_moe_budget(ranked: dict) -> int:
        return max(o.prediction.scenario.budget_mib for o in ranked.values() if o.prediction.layout.placement.cpu_moe)

    room = cache_room_mib(qwen30b, hw, Scenario(n_ctx=32768), Placement())
    assert largest_cpu_moe_budget(deep) == room < largest_cpu_moe_budget(shallow)
    both = shallow.keys() & deep.keys()
    assert sum(shallow[k].usable and deep[k].usable for k in both) >= 4  # no cache and the smallest budget, 2 modes
    best = [next(iter(ranked.values())).prediction for ranked in (shallow, deep)]
    assert best[1].decode_tps < best[0].decode_tps
    for label in both:
        p, q = shallow[label].prediction, deep[label].prediction
        assert q.scenario.context_depth == 32768 and q.scenario.n_ctx == 32768 and q.as_dict()["depth"] == 32768
        if p.usable and q.usable:
            assert q.decode_tps < p.decode_tps and q.vram.kv_mib == kv_cache_mib(qwen30b, 32768) > p.vram.kv_mib
        assert f"-c {q.scenario.n_ctx}" in deep[label].command  # the command starts the context the depth needs


def test_every_card_draws_its_cpu_moe_budgets_from_one_grid_and_classlru_replays_them_in_one_pass(qwen30b, monkeypatch):
    from moe_model.answers.recommend import budget_grid, candidates, replay_shared
    from moe_model.pricing import curve
    from moe_model.pricing.curve import ReplayMemo

    tm, base = default_time_model(), Scenario()  # the default build: ClassLRU, its budgets of a class in one pass
    assert base.policy_name.startswith("class-lru")
    cards = [preset(name).with_changes(ram_gib=64) for name in ("t4", "rtx 3060 12gb", "rtx 4080 16gb")]
    grid = budget_grid(qwen30b, Scenario(placement=Placement(cpu_moe=True)).placement)
    for hw in cards:
        own = {
            sc.budget_mib
            for sc in candidates(qwen30b, hw, base)
            if sc.placement.cpu_moe and sc.budget_mib and not sc.cpu_share
        }
        assert len(own - set(grid)) == 1 and own & set(grid) == {b for b in grid if b < max(own)}
    replays = []
    real = curve.replay_counts
    monkeypatch.setattr(curve, "replay_counts", lambda *a: replays.append((a[2].policy_name, a[4])) or real(*a))
    work = synthetic_workload(qwen30b, base, n_tokens=300)
    memo = ReplayMemo(work)
    replay_shared(qwen30b, cards, base, memo)
    for hw in cards:
        recommend(qwen30b, hw, tm.params, base, memo, "m.gguf", tm.ranges())
    assert [p for name, p in replays if p.cpu_moe and name == base.policy_name] == [Placement(cpu_moe=True)]


def test_recommend_with_a_picked_class_lru_reading_replays_it_alone_no_band_and_a_narrower_range(qwen30b):
    """Issue 30: the reading a calibrated machine's b12170+ logs picked reaches Shopping's recommender through its
    base scenario: each cached ClassLRU option is that reading's own replay, without the band."""
    import pytest

    from moe_model.policies.class_lru import BAND_READINGS, all_readings

    hw, tm = preset("t4"), default_time_model()
    work = synthetic_workload(qwen30b, Scenario(), n_tokens=400)

    def options(base: Scenario) -> dict:
        ranked = recommend(qwen30b, hw, tm.params, base, lambda sc: work, "m.gguf", tm.ranges())
        return {o.label: o.prediction for o in ranked if o.usable and o.prediction.scenario.budget_mib}

    banded = options(Scenario())
    default, *read = (options(Scenario(policy_reading=tuple(r.items()))) for r in (all_readings()[0], *BAND_READINGS))
    cached = [label for label, p in banded.items() if p.policy_band is not None]
    assert cached and all(label in r for r in (default, *read) for label in cached)
    for label in cached:  # the band is drawn around the default reading's own replay
        assert default[label].hit_rate == pytest.approx(banded[label].hit_rate, rel=1e-9)
    for r in (default, *read):
        for label in cached:
            alone, with_band = r[label], banded[label]
            assert alone.policy_band is None and POLICY_SOURCE not in {s.source for s in alone.range_sources}
            width = alone.decode_tps_range[1] - alone.decode_tps_range[0]
            assert width <= with_band.decode_tps_range[1] - with_band.decode_tps_range[0] + 1e-9
    assert any(read[0][label].hit_rate != read[1][label].hit_rate for label in cached)  # each reading its own


def test_a_class_lru_reading_given_as_a_knob_is_kept_and_leaves_out_the_cpu_share_candidates(qwen30b):
    """`recommend --knob clock=group`: the CPU share's policy takes no ClassLRU reading, so its candidates are not
    offered (they were refused with the reading before), and every candidate keeps the reading."""
    from moe_model.answers.recommend import candidates
    from moe_model.speed.scenario import Scenario

    base = Scenario(Placement(cpu_moe=True), 0, knobs=(("clock", "group"),))
    offered = candidates(qwen30b, preset("3060"), base)
    assert offered and all(dict(sc.knobs) == {"clock": "group"} for sc in offered)
    plain = candidates(qwen30b, preset("3060"), Scenario(Placement(cpu_moe=True), 0))
    assert any(sc.cpu_share > 0 for sc in plain)  # a current build offers the CPU share where no reading is given


def test_recommend_offers_the_users_own_cpu_share_beside_the_two_it_tries(qwen30b):
    """`recommend --cpu-share 0.8`: 0.8 is among the CPU-share candidates (it was dropped for 0.5 and 0.95)."""
    from moe_model.answers.recommend import candidates
    from moe_model.speed.scenario import Scenario

    offered = candidates(qwen30b, preset("3060"), Scenario(Placement(cpu_moe=True), 0, knobs=(("share", 0.8),)))
    assert {sc.cpu_share for sc in offered} == {0.0, 0.5, 0.8, 0.95}


def test_a_card_with_room_for_every_expert_lists_each_cache_outcome_once(qwen30b):
    """An H100 has room for more than the 16,746 MiB that cache every expert of Qwen3-30B: 81,920 MiB was offered
    beside 16,746 MiB with identical results. No budget above each placement's full one is offered now."""
    from moe_model.answers.recommend import candidates
    from moe_model.llama.slot_plan import full_budget_mib, plan_cache

    seen = set()
    for sc in candidates(qwen30b, preset("h100"), Scenario()):
        if sc.budget_mib and not sc.placement.fit:
            assert sc.budget_mib <= full_budget_mib(qwen30b, sc.placement)
            plan = plan_cache(qwen30b, sc.budget_mib, sc.placement)
            outcome = (sc.placement, sc.load_mode, sc.cpu_share, tuple(g.n_slots for g in plan.groups))
            assert outcome not in seen
            seen.add(outcome)
    assert (Placement(cpu_moe=True), "mmap", 0.0, (3072, 3072)) in seen  # the full cache is still offered
