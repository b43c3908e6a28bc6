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
