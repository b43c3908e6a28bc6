"""Fit the time model on every measured machine, check it machine by machine, write moe_model/data/calibration.json.

Leave one machine out: fit on the other machines, predict the left-out machine's points (and its cache
verdicts) through the same `predict` a user runs. Prints the README's table. A few minutes on 2 cores.

    python scripts/calibrate.py
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import asdict

import numpy as np

from moe_model.cli.main import main as cli_main
from moe_model.speed.calibration import (
    CALIBRATION_JSON,
    cache_verdicts,
    decode_errors,
    fit,
    leave_one_machine_out,
    prefill_errors,
    relative_error,
)
from moe_model.speed.measured import all_points, field_rows, t4_predict_argv

MACHINE_NAMES = {
    "t4": "Tesla T4 (seed article)",
    "h200": "H200 (ground-truth runs 1 and 3)",
    "v620": "Radeon Pro V620 (field)",
    "r9700": "Radeon AI PRO R9700, PCIe 4.0 x4 (field)",
    "rtx5070ti": "RTX 5070 Ti (field)",
    "rtx4070": "RTX 4070 (field)",
}


def _progress(label: str):
    return lambda f: print(f"\r{label}: {100 * f:5.1f} %", end="", file=sys.stderr, flush=True)


def main() -> None:
    points = all_points()
    params = fit(points)
    reports = leave_one_machine_out(points, progress=_progress("leave one machine out"))
    rel = relative_error(reports)
    verdicts = []
    for report in reports:
        verdicts += cache_verdicts([p for p in points if p.machine == report.machine], report.params, rel)
    excluded = field_rows()
    excluded = excluded[excluded["use"] == "no"]
    record = {
        "fitted_to": "every measured machine at once: seed T4 rows, the H200 ground-truth runs 1 and 3, and the "
        "field rows of moe_model/data/field_rows.csv; machines weighted equally; squared log errors",
        "params": asdict(params),
        "rel_error": rel,
        "machines": sorted({p.machine for p in points}),
        "measured": {p.name: p.decode_tps for p in points if p.decode_tps},
        "fit_errors": decode_errors(points, params),
        "fit_prefill_errors": prefill_errors(points, params),
        "leave_one_machine_out": {r.machine: asdict(r) for r in reports},
        "verdicts": verdicts,
        "excluded_rows": {f"{r['machine']}-{r['row']}": r["why"] for _, r in excluded.iterrows()},
    }
    CALIBRATION_JSON.write_text(json.dumps(record, indent=1, default=float) + "\n")
    print("\n| machine | points | median abs. error | worst | cache verdicts right or too close |")
    print("|---|---|---|---|---|")
    for r in reports:
        mine = [v for v in verdicts if v["point"].startswith(r.machine + "-")]
        ok = f"{sum(v['ok'] for v in mine)}/{len(mine)}" if mine else "no paired control"
        print(
            f"| {MACHINE_NAMES.get(r.machine, r.machine)} | {r.n_points} | {100 * r.median_abs_error:.0f} % "
            f"| {100 * r.worst_error:+.0f} % | {ok} |"
        )
    medians = [r.median_abs_error for r in reports]
    print(f"\nmedian over machines: {100 * np.median(medians):.0f} %; range carried by predictions: ±{100 * rel:.0f} %")
    t4_plain_table()


def t4_plain_table() -> None:
    """The seed's T4 rows through the plain `predict` command, exactly as a user runs it."""
    print("\n| seed row | command | host layers | predicted t/s | measured t/s | error |")
    print("|---|---|---|---|---|---|")
    for name, (argv, measured) in t4_predict_argv().items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cli_main(argv)
        pred = json.loads(out.getvalue())
        command = " ".join(argv[3:-1])
        print(
            f"| {name} | `{command}` | {pred['host_layers']} | {pred['decode_tps']:.1f} | {measured:.1f} "
            f"| {100 * (pred['decode_tps'] / measured - 1):+.0f} % |"
        )


if __name__ == "__main__":
    main()
