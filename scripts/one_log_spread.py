"""How far a routing fitted to ONE log predicts the same model's decode hit rates at other budgets; writes
moe_model/data/one_log_spread.json (the spread a single logged point carries: routing.logged.fit_to_logs) and the
table in docs/models-and-fits.md (between its one_log_spread markers). About a minute on 2 busy cores.

Every bundled set of real llama-server -lv 4 logs of one model at several budgets (SETS). Each log alone is fitted
as the Logs page fits a user's one log (its decode hit rate, warm-up removed, from the model's routing preset:
speed.log_routing), and every other log of its set is predicted with the fitted knobs through the simulation the
fit uses (routing.logged.one_log_errors). The error of a pair is simulated minus logged, in hit-rate points. The
models have random weights: their routing is close to uniform, not a trained model's.

    python scripts/one_log_spread.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from calibrate import write_block

from moe_model.fits.routing_from_logs import logged_hit_rates
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.routing.logged import (
    ONE_LOG_SPREAD_JSON,
    CrossPrediction,
    RunLength,
    one_log_errors,
    simulated_hit_rates,
)
from moe_model.routing.synthetic import fallback_spread, load_presets, preset_for
from moe_model.speed.hardware import preset

GT = data_path("groundtruth")
DOC = Path(__file__).resolve().parent.parent / "docs" / "models-and-fits.md"
BEGIN, END = "<!-- one_log_spread.py: begin -->", "<!-- one_log_spread.py: end -->"
# the larger budget of a pair over the smaller: 10/25/50/75/100 % budgets give x1.3-2, x2.5-4 and x5-10
RATIO_BINS = ((2.2, "near (x1.3-2)"), (4.5, "middle (x2.5-4)"), (float("inf"), "far (x5-10)"))


@dataclass(frozen=True)
class LogSet:
    """Real logs of one model at several budgets, on the hardware they ran on."""

    name: str
    about: str
    header: Path
    hardware: str
    logs: dict[str, Path]  # case -> llama-server -lv 4 log


def _cases(folder: Path, prefix: str, cases: tuple[str, ...]) -> dict[str, Path]:
    return {case: folder / f"{prefix}{case}.log" for case in cases}


SETS = (
    LogSet(
        "run1",
        "groundtruth/README.md: 14-layer synthetic qwen3moe (128 x 8), one 256-token request",
        GT / "synthetic-qwen3moe-Q4_K_M-header.gguf",
        "h200",
        _cases(GT / "logs", "server_", ("b10", "b25", "b50", "full")),
    ),
    LogSet(
        "run3",
        "groundtruth/run3: 24 layers of Qwen3-30B-A3B's expert size (128 x 8), one 256-token request",
        GT / "run3" / "model-header.gguf",
        "h200",
        _cases(GT / "run3" / "logs", "server_", ("b10", "b25", "b50", "b75", "full")),
    ),
    LogSet(
        "run5",
        "groundtruth/run5: run3's model, four requests (704 tokens, one at 6.1k context), mmap'd experts",
        GT / "run3" / "model-header.gguf",
        "h200",
        _cases(GT / "run5" / "logs", "server_mm_", ("b10", "b25", "b50", "b75", "full")),
    ),
    LogSet(
        "run6b",
        "groundtruth/run6: run3's header, random data (out_scale 0.01), six requests to 12k context",
        GT / "run3" / "model-header.gguf",
        "h200",
        _cases(GT / "run6" / "logs" / "run6b", "server_", ("b25_fa0", "b50_fa0")),
    ),
)
EXCLUDED = {
    "the seed's T4 logs (sample_data/logs)": "assembled examples, not recorded, and only t4-cpumoe-10000 has a hit "
    "rate (one budget): no pair to predict",
    "run6a (groundtruth/run6)": "one budget with a cache (its routing collapses onto few experts)",
    "run6b -ub 128 / -ub 2048": "the same budget as run6b b50_fa0 (a prompt-ubatch variant): no other budget",
    "run7 (groundtruth/run7)": "no cache (the CPU path and all on the GPU)",
}


@dataclass(frozen=True)
class SetErrors:
    """One set's pairs, and its model's routing preset on the same logs with no log fitted (the baseline)."""

    pairs: list[CrossPrediction]
    preset_points: list[float]  # the preset's simulated minus logged hit rate, each log (points, signed)


def set_errors(log_set: LogSet) -> SetErrors:
    """Every (fitted log, other log) pair of one set, and the preset's error on each log."""
    model = load_model(log_set.header)
    hw = preset(log_set.hardware)
    points = [p for case, path in log_set.logs.items() for p in logged_hit_rates(parse_log(path), model, hw, case)]
    start = preset_for(model)
    rates = simulated_hit_rates(model, start.knobs, points, RunLength.of(points))
    return SetErrors(one_log_errors(model, points, start), [100 * (rates[p.name] - p.hit_rate) for p in points])


def _bin(ratio: float) -> str:
    spread = max(ratio, 1 / ratio)
    return next(label for edge, label in RATIO_BINS if spread <= edge)


def summary(errors: list[float]) -> dict:
    values = np.asarray(errors)
    return {
        "pairs": len(values),
        "rms_points": round(float(np.sqrt(np.mean(values**2))), 2),
        "mean_points": round(float(values.mean()), 2),
        "max_abs_points": round(float(np.abs(values).max()), 2),
    }


def by_bin(pairs: list[CrossPrediction]) -> dict[str, dict]:
    bins = {label: [p.error_points for p in pairs if _bin(p.budget_ratio) == label] for _, label in RATIO_BINS}
    return {label: summary(errors) for label, errors in bins.items() if errors}


def _pair(p: CrossPrediction) -> dict:
    return asdict(p) | {"budget_ratio": round(p.budget_ratio, 3), "error_points": round(p.error_points, 2)}


def _cell(stats: dict | None) -> str:
    return f"{stats['rms_points']:.1f} ({stats['pairs']})" if stats else "-"


def table(record: dict) -> list[str]:
    labels = [label for _, label in RATIO_BINS]
    lines = [
        f"| log set | {' | '.join(labels)} | all pairs | mean (bias) | worst | preset, no log (logs) |",
        "|---|" + "---|" * (len(labels) + 4),
    ]
    rows = [(name, s["by_ratio"], s["all"], s["preset"]) for name, s in record["sets"].items()]
    for name, bins, total, start in rows + [("**every set**", record["by_ratio"], record["all"], record["preset"])]:
        cells = " | ".join(_cell(bins.get(label)) for label in labels)
        worst = f"{total['mean_points']:+.1f} | {total['max_abs_points']:.1f}"
        lines.append(f"| {name} | {cells} | {_cell(total)} | {worst} | {_cell(start)} |")
    return lines


def where_it_applies(spread: float) -> str:
    """Which spreads a single logged point's measured figure widens (the smaller ones: fit_to_logs takes the larger)."""
    carried = {name: float(p["spread_points"]) for name, p in load_presets().items()}
    carried |= {
        "no preset of its own (nearest shape)": fallback_spread(),
        "known only by name": fallback_spread(shape_known=False),
    }
    replaced = [f"{name} (±{v:.1f})" for name, v in carried.items() if v > spread]
    kept = [f"{name} (±{v:.1f})" for name, v in carried.items() if v <= spread]
    return f"Kept (wider already): {', '.join(replaced) or 'none'}; widened to it: {', '.join(kept) or 'none'}."


def doc_block(record: dict) -> list[str]:
    spread = record["spread_points"]
    return [
        "RMS error (hit-rate points; pairs in brackets) of a routing fitted to one log predicting each other log of",
        "the same model, by the ratio of their budgets; the last column is the model's routing preset on the same",
        "logs with none fitted (scripts/one_log_spread.py; random-weight models' routing):",
        "",
        *table(record),
        "",
        f"A single logged point carries ±{spread:.1f} points (every pair), or its preset's spread where that is wider. "
        f"{where_it_applies(spread)} On these logs one log at another budget cuts the preset's actual error from "
        f"±{record['preset']['rms_points']:.1f} to ±{spread:.1f}, but the presets' own spreads were measured on the "
        "trained models they were fitted to: whether one log narrows a trained model's range is not measured here "
        "(no bundled trained-model logs at several budgets).",
    ]


def _logs(log_set: LogSet) -> dict[str, str]:
    return {case: str(path.relative_to(data_path("groundtruth").parent)) for case, path in log_set.logs.items()}


def record_of(results: dict[str, SetErrors]) -> dict:
    """What one_log_spread.json stores: the spread a single logged point carries, what it was measured on, and
    the table's figures."""
    every = [p for r in results.values() for p in r.pairs]
    return {
        "spread_points": summary([p.error_points for p in every])["rms_points"],
        "what": "RMS error (hit-rate points) of a routing fitted to one llama-server log (its decode hit rate, warm-up "
        "removed, from the model's preset) predicting the decode hit rate of the same model's logs at other budgets, "
        "over every pair; signed errors are simulated minus logged; 'preset': the preset on each log, none fitted",
        "caveat": "measured on random-weight synthetic models (H200, llama.cpp b11549, sample_data/groundtruth): "
        "their routing is close to uniform, not a trained model's, whose one-log error may differ",
        "written_by": "scripts/one_log_spread.py",
        "measured_on": {s.name: {"about": s.about, "hardware": s.hardware, "logs": _logs(s)} for s in SETS},
        "excluded": EXCLUDED,
        "all": summary([p.error_points for p in every]),
        "by_ratio": by_bin(every),
        "preset": summary([e for r in results.values() for e in r.preset_points]),
        "sets": {
            name: {"all": summary([p.error_points for p in r.pairs]), "by_ratio": by_bin(r.pairs)}
            | {"preset": summary(r.preset_points)}
            for name, r in results.items()
        },
        "pairs": {name: [_pair(p) for p in r.pairs] for name, r in results.items()},
    }


def main() -> None:
    results = {}
    for log_set in SETS:
        print(f"{log_set.name}: fitting each of {len(log_set.logs)} logs alone", file=sys.stderr, flush=True)
        results[log_set.name] = set_errors(log_set)
    record = record_of(results)
    ONE_LOG_SPREAD_JSON.write_text(json.dumps(record, indent=1) + "\n")
    block = doc_block(record)
    print("\n".join(block))
    write_block(DOC, block, BEGIN, END)


if __name__ == "__main__":
    main()
