"""The figure of ClassLRU's readings band as Explore draws it (charts.hit_rate_curve): the real GPT-OSS-20B routing
with 4-token ubatches (-np 4), 24 budgets from the smallest that starts to every expert cached, --cpu-moe.

    python scripts/class_lru_band_figure.py      (PNG export: pip install "kaleido==0.2.1", it bundles Chromium)
"""

from __future__ import annotations

import numpy as np
from policy_figure import MODEL, ROOT, TRACE, write_png

from moe_model.charts import hit_rate_curve
from moe_model.llama.batching import workload_from
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.policies import class_lru_band
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_trace
from moe_model.workload import Batching

PNG = ROOT / "docs" / "class-lru-band-gpt-oss-20b.png"
N_BUDGETS = 24


def main() -> None:
    model = load_model(MODEL)
    work = workload_from(load_trace(TRACE), Batching(concurrency=4), model.n_expert)
    budgets = sorted({int(b) for b in np.linspace(min_budget_mib(model), full_budget_mib(model), N_BUDGETS)})
    results = simulate_budgets(model, work, budgets, None, class_lru_band.band_kernel())
    fig = hit_rate_curve(results)
    write_png(fig, PNG, "GPT-OSS-20B, real routing, -np 4, b12569: ClassLRU's default reading and its band")
    widest = max(results, key=lambda r: r.band.width_points)
    print(f"{PNG.relative_to(ROOT)}: widest band {widest.band.width_points:.1f} points at {widest.budget_mib} MiB")


if __name__ == "__main__":
    main()
