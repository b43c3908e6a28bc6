"""recommend's printed llama-server command, read back by this tool, is the recommendation: same Scenario, same
layout, same price (issue 37: the command dropped --no-kv-offload, -ub and -fa)."""

from __future__ import annotations

import pytest

from moe_model.answers.recommend import recommend
from moe_model.fits.calibration import default_time_model
from moe_model.pricing.curve import curve
from moe_model.pricing.workloads import synthetic_workload
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.server_command import read_command

REQUEST = Scenario(n_ctx=65536, no_kv_offload=True, n_ubatch=4096, flash_attn="off", draft_tokens=3)


@pytest.mark.parametrize("gpu", ["H100 PCIe", "RTX 3060 12GB"])
def test_every_recommended_command_read_back_prices_as_recommended(qwen30b, gpu):
    hw, tm = preset(gpu), default_time_model()
    request = REQUEST if gpu == "H100 PCIe" else Scenario(n_ctx=65536, no_kv_offload=True)  # the 3060 fits this
    work = synthetic_workload(qwen30b, request, n_tokens=400)
    options = recommend(qwen30b, hw, tm.params, request, lambda sc: work, "m.gguf", tm.ranges())
    assert options and any(o.usable for o in options)
    for option in options:
        pred = option.prediction
        read = read_command(option.command, request)
        assert read.model_path == "m.gguf" and read.scenario == pred.scenario, option.command
        layout, recommended = resolve(qwen30b, hw, read.scenario), pred.layout
        for part in ("placement", "plan", "vram", "host_layers", "cpu_layers"):
            assert getattr(layout, part) == getattr(recommended, part), (part, option.command)
        priced = curve(qwen30b, hw, tm.params, read.scenario, [read.scenario.budget_mib], lambda sc: work)
        again = priced.points[0].prediction
        assert again.decode_tps == pytest.approx(pred.decode_tps, rel=1e-9), option.command
        assert again.vram.fits == pred.vram.fits
    for flags in (" --no-kv-offload", " -c 65536 "):
        assert all(flags in o.command for o in options)
    if request.n_ubatch == 4096:
        assert all(" -ub 4096 -b 4096" in o.command and " -fa off" in o.command for o in options)
        assert all("--spec-draft-n-max 3" in o.command for o in options)
