"""The modelled CPU-share policy on ClassLRU's lists (b12191 runs on b12170's ClassLRU): share 0 is ClassLRU; a
share only starts once the pool is full; one default share for running and pricing."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import GROUNDTRUTH, GT_HEADER, QWEN30B

from moe_model.cli.main import main
from moe_model.llama.lru_kernel import MODE_CACHE
from moe_model.policies import CLASS_LRU, CPU_SHARE, class_lru, get_policy, run_policy
from moe_model.policies.cpu_share import share_applies, share_note, split_selections
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_recorded
from moe_model.settings import DEFAULT_CPU_SHARE


def share_run(model, work, budget, share):
    return run_policy(CPU_SHARE, model, work, [budget], share=share)[0]


def test_share_zero_equals_class_lru(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "np4_b25.npz")
    budgets = [15, 161, 403, 1614]
    plain, shared = (
        run_policy(CLASS_LRU, gt_model, work, budgets),
        run_policy(CPU_SHARE, gt_model, work, budgets, share=0),
    )
    for cls, share in zip(plain, shared, strict=True):
        assert np.array_equal(share.hits, cls.hits) and np.array_equal(share.uploads, cls.uploads)
        assert share.cpu.sum() == 0


def test_a_share_sends_that_share_of_misses_to_the_cpu_and_keeps_the_lookups(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    base, shared = share_run(gt_model, work, 403, 0.0), share_run(gt_model, work, 403, 0.8)
    misses = shared.cpu.sum() + shared.uploads.sum()
    assert shared.cpu.sum() / misses == pytest.approx(0.8, abs=0.05)  # warm-up fills the pool first
    assert np.array_equal(shared.lookups, base.lookups)  # same distinct experts per layer
    assert not np.array_equal(shared.hits, base.hits)  # misses kept out of the pool change what hits later


def test_with_every_expert_cached_the_share_never_applies(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    assert share_run(gt_model, work, 1614, 0.95).cpu.sum() == 0  # the pool never fills up


def test_naming_the_cpu_share_policy_without_a_share_runs_and_prices_its_one_default():
    from moe_model.speed.scenario import Scenario

    named, given = Scenario(policy=CPU_SHARE), Scenario(knobs=(("share", DEFAULT_CPU_SHARE),))
    assert get_policy(CPU_SHARE).knobs["share"] == DEFAULT_CPU_SHARE == named.cpu_share  # was 0 before
    assert named.policy_knobs == given.policy_knobs == {"share": DEFAULT_CPU_SHARE}
    assert get_policy(CPU_SHARE).cpu_fraction(**named.policy_knobs) == DEFAULT_CPU_SHARE  # what the time model prices
    assert Scenario(policy=CPU_SHARE, knobs=(("share", 0.9),)).cpu_share == 0.9  # a share given is kept


def test_predict_naming_the_cpu_share_policy_prices_the_default_share_as_the_flag_does(capsys):
    base = ["predict", "--model", str(QWEN30B), "--hardware", "Tesla T4", "--budget-mib", "10000"]
    outs = []
    for extra in (["--policy", CPU_SHARE], ["--cpu-share", str(DEFAULT_CPU_SHARE)], ["--cpu-share", "0"]):
        assert main([*base, "--hit-rate", "0.9", "--json", *extra]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    named, flag, none = outs
    assert named["scenario"]["cpu_share"] == flag["scenario"]["cpu_share"] == DEFAULT_CPU_SHARE
    assert named["decode_tps"] == flag["decode_tps"] != none["decode_tps"]  # priced with the share, not with 0


def test_the_share_splits_a_steps_missed_selections_whole_experts_first_lowest_crf_first():
    # misses chosen by 3, 1 and 2 tokens (lowest CRF first), share 0.5, 0.2 carried: 0.2 + 3 owed, 3 sent; the
    # first expert takes all 3, so it alone runs on the CPU and the 0.2 carries on
    first = split_selections([3, 1, 2], 0.5, 0.2)
    assert (first.cpu_only, first.cut, first.cpu_selections) == ((0,), None, 3)
    assert first.remainder == pytest.approx(0.2)
    # 1, 3, 2 tokens: 3 sent, the first expert whole, then the split cuts the second (2 of its 3 selections)
    second = split_selections([1, 3, 2], 0.5, 0.0)
    assert (second.cpu_only, second.cut, second.cpu_selections, second.remainder) == ((0,), 1, 3, 0.0)


def test_the_kernel_splits_selections_per_token_and_never_keeps_an_expert_only_the_cpu_computed():
    # one layer, 4 experts, 2 per token, 3 slots, share 0.75. Step 1 fills 0, 1; step 2 fills 2, 3 evicts 0 (the
    # share waits for a full pool). Step 3, tokens [0, 1], [0, 2]: expert 0 missed by 2 selections, 1.5 owed, 1
    # sent: the split cuts 0 (uploaded, evicting 3). Step 4, tokens [3, 1], [3, 2]: 3 missed by 2 selections,
    # 0.5 + 1.5 owed, 2 sent: 3 runs on the CPU alone and is not kept. A split of distinct experts would have
    # sent nothing at step 3 (0.75 of one miss)
    ntok = np.array([1, 1, 2, 2], dtype=np.int32)
    ids = np.array([0, 1, 2, 3, 0, 1, 0, 2, 3, 1, 3, 2], dtype=np.int32)
    off = np.array([0, 2, 4, 8])
    mode, large, layer = np.full(4, MODE_CACHE, np.int8), np.zeros(4, np.int8), np.zeros(4, np.int32)
    state = class_lru.new_state(np.array([3]), 1, 4, share=0.75)
    class_lru.feed(state, layer, ntok, off, mode, large, ids, 2, 4)
    cpu_only, cut, selections = (int(c.sum()) for c in class_lru.cpu_counts(state))
    assert (cpu_only, cut, selections) == (1, 1, 3)
    assert int(state.hits.sum()) == 4 and int(state.distinct.sum()) == 10  # 5 uploads: 0, 1, 2, 3, then 0 again
    assert set(np.flatnonzero(state.held()[0]).tolist()) == {0, 1, 2}  # 3 never uploaded
    assert [split_selections([2], 0.75, r).remainder for r in (0.0, 0.5)] == [0.5, 0.0]  # the reference agrees


def test_a_router_weight_before_the_ffn_is_named_and_priced_without_the_share(gt_model):
    from moe_model.speed.hardware import preset
    from moe_model.speed.rates import TimeParams
    from moe_model.speed.scenario import Scenario
    from moe_model.speed.time_model import predict

    llama4 = replace(gt_model, architecture="llama4")
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    assert share_applies(gt_model) and not share_applies(llama4)
    shared, plain = share_run(llama4, work, 403, 0.8), run_policy(CLASS_LRU, llama4, work, [403])[0]
    assert shared.cpu.sum() == 0 and np.array_equal(shared.hits, plain.hits)  # every miss uploaded
    hw, params = preset("t4"), TimeParams()
    with_share, without = (
        predict(llama4, hw, params, Scenario(budget_mib=403, knobs=(("share", s),)), hit_rate=0.5) for s in (0.8, 0.0)
    )
    assert with_share.decode_tps == without.decode_tps
    assert any("does not apply to this llama4 model" in n for n in with_share.notes)
    assert "LoRA" in share_note(gt_model) and "does not apply" not in share_note(gt_model)


def test_simulate_text_names_the_layers_the_share_does_not_apply_to(capsys):
    trace = GROUNDTRUTH / "traces" / "b25.npz"
    args = ["simulate", "--model", str(GT_HEADER), "--trace", str(trace), "--budget-mib", "403"]
    assert main([*args, "--policy", CPU_SHARE, "--knob", "share=0.8"]) == 0
    assert f"note ({CPU_SHARE}): {share_note(load_model(GT_HEADER))}" in capsys.readouterr().out


def test_a_watched_share_replay_stops_between_chunks_once_told(gt_model):
    """The recommender's CPU-share candidates run here, not through simulate: a page that is left stops them too."""
    from moe_model.progress import Watch, WorkStoppedError, watching

    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    stopped = Watch()
    stopped.stop.set()
    with watching(stopped), pytest.raises(WorkStoppedError):
        share_run(gt_model, work, 403, 0.5)
    with watching(Watch()) as watch:
        share_run(gt_model, work, 403, 0.5)
    assert watch.step == "replaying the cache" and watch.total == work.n_records
