"""The README's replacement-policy figure and tables, from the bundled real GPT-OSS-20B routing.

    python scripts/policy_figure.py        (PNG export: pip install "kaleido==0.2.1", it bundles Chromium)

The workload (one stream, llama-server's warm-up) is cut in two halves of its ubatches: the static hot
set is chosen on the first, and every policy replays the second. Prints the hit-rate table and the
seconds each policy took for all budgets (after a warm-up run that compiles the numba kernels).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import plotly

from moe_model.answers.policy_compare import compare
from moe_model.charts import policy_curves
from moe_model.llama.batching import build_workload
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.policies import POLICIES, REFERENCE
from moe_model.policies.static_set import split_workload
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_token_trace
from moe_model.workload import Batching

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "sample_data" / "models" / "gpt-oss-20b-MXFP4.gguf"
TRACE = ROOT / "sample_data" / "traces" / "gpt-oss-20b" / "routing.npz"
PNG = ROOT / "docs" / "policy-curves-gpt-oss-20b.png"
N_BUDGETS = 12
TABLE_BUDGETS = (1, 3, 6, 9)  # indices into the budgets printed in the README table
PNG_PX = (900, 520)  # width, height: the legend's rows under the axis


def write_png(fig, path: Path, subtitle: str) -> None:
    """The chart as the app draws it (its title, its legend below the axis), `subtitle` saying what was replayed;
    kaleido 0.2.1 (self-contained) driven with the plotly.js that plotly ships; plotly 7 wants kaleido >= 1."""
    from kaleido.scopes.plotly import PlotlyScope

    js = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
    fig.update_layout(width=PNG_PX[0], height=PNG_PX[1], title_subtitle_text=subtitle, margin_t=72)
    path.write_bytes(
        PlotlyScope(plotlyjs=js).transform(fig.to_plotly_json(), format="png", width=PNG_PX[0], height=PNG_PX[1])
    )


def main() -> None:
    model = load_model(MODEL)
    work = build_workload(load_token_trace(TRACE, "GPT-OSS-20B routing"), Batching(), model.n_expert)
    profile, replay = split_workload(work, 0.5)
    lo, hi = min_budget_mib(model), full_budget_mib(model)
    budgets = sorted({int(b) for b in np.linspace(lo, hi, N_BUDGETS)})
    knobs = {"static-hot-set": {"profile": profile}}
    compare(model, replay.prefix(2000), budgets[:2], knobs=knobs)  # compile the kernels
    result = compare(model, replay, budgets, knobs=knobs, threads=False)  # the table's seconds: each policy alone
    PNG.parent.mkdir(exist_ok=True)
    fig = policy_curves(result.budgets, result.hit_rates(), result.labels(), REFERENCE)
    write_png(fig, PNG, f"GPT-OSS-20B, real routing ({replay.decode_tokens:,} decode tokens replayed), --cpu-moe")
    print(f"{PNG.relative_to(ROOT)}: {PNG.stat().st_size / 1024:.0f} KiB; budgets {budgets}")
    rates = result.hit_rates()
    shown = [budgets[i] for i in TABLE_BUDGETS]
    print("\n| policy | label | " + " | ".join(f"{b:,} MiB" for b in shown) + f" | time, {len(budgets)} budgets |")
    print("|---|---|" + "---|" * (len(shown) + 1))
    for name, runs in rates.items():
        cells = " | ".join(f"{100 * runs[i]:.1f} %" for i in TABLE_BUDGETS)
        print(f"| `{name}` | {POLICIES[name].label} | {cells} | {result.seconds[name]:.2f} s |")


if __name__ == "__main__":
    main()
