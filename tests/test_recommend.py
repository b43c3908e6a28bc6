"""Recommend: candidates ranked by predicted speed, the best starts and fits, with a verifiable command."""

from __future__ import annotations

from moe_model.calibration import params_for, synthetic_workload
from moe_model.hardware import preset
from moe_model.recommend import recommend
from moe_model.timing import Scenario


def test_recommend_ranks_options_and_gives_a_command_with_lv_4(qwen30b):
    hw = preset("Tesla T4")
    params, _ = params_for(hw.name)
    options = recommend(
        qwen30b, hw, params, Scenario(), lambda sc: synthetic_workload(qwen30b, sc, n_tokens=1500), "m.gguf"
    )
    runnable = [o for o in options if o.prediction.starts and o.prediction.vram.fits]
    speeds = [o.prediction.decode_tps for o in runnable]
    assert speeds == sorted(speeds, reverse=True) and len(runnable) >= 5
    best = options[0]
    assert best.command.startswith("llama-server -m m.gguf") and best.command.endswith("-lv 4")
    labels = " | ".join(o.label for o in options)
    assert "--fit" in labels and "--cpu-moe" in labels and "--n-cpu-moe" in labels and "CPU share" in labels
    # on the T4 the article's finding holds: --cpu-moe with a large cache beats --fit
    fit = next(o for o in options if o.label.startswith("--fit") and "no cache" in o.label)
    assert best.prediction.decode_tps > fit.prediction.decode_tps


def test_best_per_card_flags_a_slow_link_where_the_cache_is_a_net_loss():
    import numpy as np
    from conftest import QWEN235B_SHARD1

    from moe_model.model_spec import load_model
    from moe_model.recommend import best_per_card
    from moe_model.simulate import simulate_budgets
    from moe_model.slot_plan import Placement, full_budget_mib, min_budget_mib

    model = load_model(QWEN235B_SHARD1)
    work = synthetic_workload(model, Scenario(), n_tokens=1500)
    budgets = np.geomspace(min_budget_mib(model), full_budget_mib(model), 8).astype(int).tolist()
    curve = simulate_budgets(model, work, budgets, Placement())
    cards = [preset("eGPU RTX 4090, PCIe 3.0 x4"), preset("RTX 4090")]
    egpu, internal = best_per_card(model, cards, Scenario(), work, curve, "m.gguf", lambda n: params_for(n)[0])
    assert egpu["cache_is_net_loss"] and not egpu["fits_without_offload"]
    assert egpu["best_cache_tps"] < internal["best_cache_tps"]  # the x4 link hurts the cache most
