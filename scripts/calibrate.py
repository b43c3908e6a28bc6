"""Fit the time model on every measured machine, check it machine by machine, write moe_model/data/calibration.json.

Leave one machine out: fit on the other machines, predict the left-out machine's points (decode and prompt) and
its cache verdicts through the same `predict` a user runs. Then the seed's T4 rows and the H200 run5 servers
through the plain `predict` command. The tables are printed and written into docs/models-and-fits.md (between
its calibrate markers). About 15 minutes on 2 busy cores.

    python scripts/calibrate.py
    python scripts/calibrate.py --readme   # only the README's block, from the stored calibration.json (seconds)
    python scripts/calibrate.py --host-record   # only the host-record error, from the stored left-out fits
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from moe_model.cli.main import main as cli_main
from moe_model.fits.calibration import (
    CALIBRATION_JSON,
    MachineReport,
    RangeCoverage,
    cache_verdicts,
    decode_errors,
    fit,
    leave_one_machine_out,
    prefill_errors,
    range_coverage,
    relative_error,
)
from moe_model.fits.host_fit import apply_host_record
from moe_model.fits.points import (
    GROUNDTRUTH,
    all_points,
    field_rows,
    run7_predict_argv,
    scenario_of_run,
    steady_hit_rate,
    t4_predict_argv,
)
from moe_model.readers.host_record import HostRecordError, read_host_record
from moe_model.readers.logs import parse_log
from moe_model.resources import data_path
from moe_model.speed.hardware import preset
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import resolve

DOC = Path(__file__).resolve().parent.parent / "docs" / "models-and-fits.md"
README = DOC.parent.parent / "README.md"
BEGIN, END = "<!-- calibrate.py: begin -->", "<!-- calibrate.py: end -->"
README_BEGIN, README_END = "<!-- calibrate.py: readme begin -->", "<!-- calibrate.py: readme end -->"
MACHINE_NAMES = {
    "t4": "Tesla T4 (seed article, Qwen3-30B-A3B)",
    "h200": "H200 (ground-truth runs 1, 3 and 5)",
    "v620": "Radeon Pro V620, Vulkan (field)",
    "r9700": "Radeon AI PRO R9700, PCIe 4.0 x4, HIP (field)",
    "rtx5070ti": "RTX 5070 Ti, pinned (field)",
    "rtx4070": "RTX 4070, `--fit` (field; predicted, never fitted)",
    "egpu3060ti": "RTX 3060 Ti eGPU, PCIe 3.0/4.0 x4 (field, new)",
    "rtx4060ti": "RTX 4060 Ti 16GB in a VM (field, new; predicted, never fitted)",
}
RUN5 = GROUNDTRUTH / "run5"
# the machines whose own model was recorded on their own CPU (a host record), and what that recording was
HOST_RECORDS = {
    "h200": (
        ("groundtruth", "run11", "run11c", "host_default.json"),
        "a 16-core Xeon VM of the GPU machines' kind, run11c (run11's own record ran with OpenMP threads sleeping)",
    )
}
RUN3_HEADER = GROUNDTRUTH / "run3" / "model-header.gguf"
RUN6 = GROUNDTRUTH / "run6"
RUN7 = GROUNDTRUTH / "run7"


def _progress(label: str):
    return lambda f: print(f"\r{label}: {100 * f:5.1f} %", end="", file=sys.stderr, flush=True)


def _pct(x: float) -> str:
    return "-" if x is None or np.isnan(x) else f"{100 * x:+.0f} %"


def lomo_table(points, reports, verdicts) -> list[str]:
    lines = [
        "| machine left out | decode points | median abs. decode error | worst | prompt points | median abs. prompt "
        "error | cache verdicts right or too close (called) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        mine = [v for v in verdicts if v["point"].startswith(r.machine + "-")]
        called = sum(v["predicted"] != "too close to call" for v in mine)
        ok = f"{sum(v['ok'] for v in mine)}/{len(mine)} ({called} called)" if mine else "no paired control"
        prompt = np.abs(list(r.prefill_errors.values()))
        worst_prompt = f"{100 * np.median(prompt):.0f} %" if len(prompt) else "-"
        lines.append(
            f"| {MACHINE_NAMES.get(r.machine, r.machine)} | {r.n_points} | {100 * r.median_abs_error:.0f} % "
            f"| {_pct(r.worst_error)} | {len(prompt)} | {worst_prompt} | {ok} |"
        )
    prompt = [list(r.prefill_errors.values()) for r in reports if r.prefill_errors]
    return [*lines, "", summary_line([r.median_abs_error for r in reports], prompt, verdicts)]


def summary_line(decode_medians: list[float], prompt_errors: list[list[float]], verdicts: list[dict]) -> str:
    """The leave-one-machine-out medians over machines and the cache verdicts, in one sentence."""
    prompt = [np.median(np.abs(errors)) for errors in prompt_errors]
    called = sum(v["predicted"] != "too close to call" for v in verdicts)
    return (
        f"Median over machines: decode **{100 * np.median(decode_medians):.0f} %**, "
        f"prompt **{100 * np.median(prompt):.0f} %**; "
        f"cache verdicts right or too close to call: {sum(v['ok'] for v in verdicts)}/{len(verdicts)}, "
        f"{called} of them called."
    )


def _predict(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_main(argv)
    return json.loads(out.getvalue())


def t4_plain_runs() -> list[tuple[str, list[str], dict, float, float | None]]:
    """The seed's T4 rows through the plain `predict` command, exactly as a user runs it: (row, argv, its JSON,
    measured decode t/s, measured prompt t/s or None)."""
    return [
        (name, argv, _predict(argv), measured, prompt) for name, (argv, measured, prompt) in t4_predict_argv().items()
    ]


def _speed_cells(pred: dict, measured: float, prompt: float | None) -> str:
    """Decode and prompt, predicted / measured with the error, as table cells."""
    prompt_cells = (
        f"{pred['prefill_tps']:.0f} / {prompt:.0f} | {_pct(pred['prefill_tps'] / prompt - 1)}"
        if prompt
        else f"{pred['prefill_tps']:.0f} / - | -"
    )
    return f"{pred['decode_tps']:.1f} / {measured:.1f} | {_pct(pred['decode_tps'] / measured - 1)} | {prompt_cells}"


def t4_plain_table(runs) -> list[str]:
    lines = [
        "| seed row | command | host layers | decode predicted / measured t/s | error | prompt predicted / measured "
        "t/s | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, argv, pred, measured, prompt in runs:
        command = " ".join(argv[3:-1])
        lines.append(f"| {name} | `{command}` | {pred['host_layers']} | {_speed_cells(pred, measured, prompt)} |")
    return lines


def run5_plain_table() -> list[str]:
    """Each run5 server through the plain `predict` command: steady decode of the short and the long request,
    their ratio, the 6,084-token prompt, and the first request; the hit rate given is the log's steady one."""
    summary = pd.read_csv(RUN5 / "summary.csv")
    model_path, hw = str(RUN3_HEADER), preset("h200")
    from moe_model.readers.model_spec import load_model

    model = load_model(RUN3_HEADER)
    lines = [
        "| server | steady hit rate (log) | short decode pred. / meas. | err. | long decode pred. / meas. | err. | "
        "long/short pred. / meas. | 6k prompt pred. / meas. | err. | first request decode pred. / meas. | err. |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, rows in summary.groupby("run", sort=False):
        log = parse_log(RUN5 / "logs" / f"server_{run}.log")[0]
        layout = resolve(model, hw, scenario_of_run(log, model))
        hit = steady_hit_rate(log.small, layout) if log.small else None
        placement = "gpu" if run == "gpu" else "cpu-moe"
        base = ["predict", "--model", model_path, "--hardware", "h200", "--placement", placement, "--ctx", "16384"]
        base += ["--budget-mib", str(int(rows["budget_mib"].iloc[0])), "-fa", "off"]
        base += ["--hit-rate", f"{hit:.4f}"] if hit is not None else []
        short = _predict(base + ["--prompt-tokens", "135", "--depth", "263", "--n-predict", "64", "--json"])
        long = _predict(base + ["--prompt-tokens", "6084", "--depth", "6148", "--json"])
        by = rows.set_index("request")
        short_meas = (by.loc["short1", "decode_tps"] + by.loc["short2", "decode_tps"]) / 2
        long_meas, prompt_meas = by.loc["long", "decode_tps"], by.loc["long", "prompt_tps"]
        first_meas = by.loc["warm", "decode_tps"]
        first = short["first_request"]["decode_tps"]
        lines.append(
            f"| {run} | {'-' if hit is None else f'{100 * hit:.1f} %'} | {short['decode_tps']:.1f} / {short_meas:.1f} "
            f"| {_pct(short['decode_tps'] / short_meas - 1)} | {long['decode_tps']:.1f} / {long_meas:.1f} "
            f"| {_pct(long['decode_tps'] / long_meas - 1)} | {long['decode_tps'] / short['decode_tps']:.2f} / "
            f"{long_meas / short_meas:.2f} | {long['prefill_tps']:.0f} / {prompt_meas:.0f} "
            f"| {_pct(long['prefill_tps'] / prompt_meas - 1)} | {first:.1f} / {first_meas:.1f} "
            f"| {_pct(first / first_meas - 1)} |"
        )
    return lines


def _run6_argv(row, hit: float | None) -> list[str]:
    """The plain `predict` command of one run6 server (its README: -ngl 99 -c 16384 -np 1, mmap'd experts)."""
    argv = ["predict", "--model", str(RUN3_HEADER), "--hardware", "h200", "--placement", row["placement"]]
    argv += ["--ctx", "16384", "--budget-mib", str(int(row["budget_mib"])), "-fa", row["fa"]]
    argv += ["-ub", str(int(row["ubatch"]))] + (["--no-kv-offload"] if row["kv"] == "cpu" else [])
    return argv + (["--hit-rate", f"{hit:.4f}"] if hit is not None else [])


def run6_table() -> tuple[list[str], dict[tuple[str, str], list[float]]]:
    """Each run6 server (held out: never fitted) through the plain `predict` command: steady decode of the short
    requests, at ~4.1k and ~12.3k context, and the two long prompts; the hit rate given is the log's steady one."""
    from moe_model.readers.model_spec import load_model

    summary, model, hw = pd.read_csv(RUN6 / "summary.csv"), load_model(RUN3_HEADER), preset("h200")
    lines = [
        "| run / server | steady hit rate (log) | short decode pred. / meas. | 4k decode | 12k decode | 12k/short "
        "pred. / meas. | 4k prompt pred. / meas. | 12k prompt |",
        "|---|---|---|---|---|---|---|---|",
    ]
    errors: dict[tuple[str, str], list[float]] = {}
    for (run, server), rows in summary.groupby(["run", "server"], sort=False):
        log = parse_log(RUN6 / "logs" / run / f"server_{server}.log")[0]
        hit = steady_hit_rate(log.small, resolve(model, hw, scenario_of_run(log, model))) if log.small else None
        base, by = _run6_argv(rows.iloc[0], hit), rows.set_index("request")
        short = _predict(base + ["--prompt-tokens", "147", "--depth", "211", "--n-predict", "128", "--json"])
        cells = [
            f"{short['decode_tps']:.1f} / {(by.loc['short1', 'decode_tps'] + by.loc['short2', 'decode_tps']) / 2:.1f}"
        ]
        short_meas = (by.loc["short1", "decode_tps"] + by.loc["short2", "decode_tps"]) / 2
        errors.setdefault((run, "decode"), []).append(short["decode_tps"] / short_meas - 1)
        prompts, ratio = [], ""
        for request, tokens in (("d4k", 4016), ("d12k", 12167)):
            pred = _predict(base + ["--prompt-tokens", str(tokens), "--depth", str(tokens + 64), "--json"])
            decode, prompt = by.loc[request, "decode_tps"], by.loc[request, "prompt_tps"]
            errors[run, "decode"].append(pred["decode_tps"] / decode - 1)
            errors.setdefault((run, "prompt"), []).append(pred["prefill_tps"] / prompt - 1)
            cells.append(f"{pred['decode_tps']:.1f} / {decode:.1f} ({_pct(pred['decode_tps'] / decode - 1)})")
            prompts.append(f"{pred['prefill_tps']:.0f} / {prompt:.0f} ({_pct(pred['prefill_tps'] / prompt - 1)})")
            ratio = f"{pred['decode_tps'] / short['decode_tps']:.2f} / {decode / short_meas:.2f}"
        shown = "-" if hit is None else f"{100 * hit:.1f} %"
        lines.append(f"| {run} / {server} | {shown} | {' | '.join(cells)} | {ratio} | {' | '.join(prompts)} |")
    return lines, errors


def run7_table() -> list[str]:
    """run7 (held out: never fitted) through the plain `predict` command: the means of its interleaved short and
    6,085-token requests (the CPU path on two servers), against the predicted steady decode and prompt."""
    summary = pd.read_csv(RUN7 / "summary.csv")
    lines = [
        "| placement (servers) | short decode pred. / meas. (n) | long decode pred. / meas. (n) | long/short pred. / "
        "meas. | one pair's long/short | 6k prompt pred. / meas. |",
        "|---|---|---|---|---|---|",
    ]
    for placement, rows in summary[summary["request"] != "warm"].groupby("placement", sort=False):
        short = _predict(run7_predict_argv(placement, 147, 211))
        long = _predict(run7_predict_argv(placement, 6085, 6149))
        is_long = rows["request"].str.startswith("L")
        s_meas, l_meas = rows[~is_long]["decode_tps"], rows[is_long]["decode_tps"]
        by = rows.set_index(["server", "request"])["decode_tps"]
        pairs = [by[srv, f"L{i}"] / by[srv, f"s{i}"] for srv in rows["server"].unique() for i in range(1, 5)]
        lines.append(
            f"| {placement} ({rows['server'].nunique()}) | {short['decode_tps']:.1f} / {s_meas.mean():.1f} "
            f"({len(s_meas)}) | {long['decode_tps']:.1f} / {l_meas.mean():.1f} ({len(l_meas)}) | "
            f"{long['decode_tps'] / short['decode_tps']:.2f} / {l_meas.mean() / s_meas.mean():.2f} | "
            f"{min(pairs):.2f}-{max(pairs):.2f} | {long['prefill_tps']:.0f} / "
            f"{rows[is_long]['prompt_tps'].mean():.0f} |"
        )
    return lines


# Decode at depth against a short request on third-party machines, as their sources state it (field-measurements.csv
# notes): (row, short depth, long depth, measured short t/s, measured long t/s). R9700: the 4,702-token prompt's
# request against short ones; V620: the median cell at d0 against the median at d8000 (~5.8k tokens).
DEPTH_CHECKS = {
    "r9700-29": (150, 4702 + 64, 23.85, 18.86),
    "r9700-30": (150, 4702 + 64, 11.0, 7.91),
    "v620-0": (0, 5800 + 128, 13.8, 12.7),
}


def depth_table(points, params) -> list[str]:
    """Each depth check's long/short decode ratio, predicted (at the measured hit rate or the routing preset) and
    measured; never fitted (the field points are decoded at their short depth)."""
    from dataclasses import replace

    from moe_model.pricing.curve import price_traffic

    by_name = {p.name: p for p in points}
    lines = [
        "| field row | placement, budget | depth short / long | decode short / long measured | long/short pred. / "
        "meas. | attention of the whole ubatch, ms (pred., long depth) |",
        "|---|---|---|---|---|---|",
    ]
    for name, (short_depth, long_depth, short_tps, long_tps) in DEPTH_CHECKS.items():
        p = by_name[name]
        speeds, terms = [], {}
        for depth in (short_depth, long_depth):
            sc = replace(p.scenario, depth=depth, n_ctx=max(p.scenario.n_ctx, depth + 1))
            pred = price_traffic(p.model, p.hw, params, sc, resolve(p.model, p.hw, sc), p.traffic)
            speeds.append(pred.decode_tps)
            terms = pred.breakdown_ms
        grows = f"attention {terms['attention']:.2f} of {sum(terms.values()):.1f}"
        lines.append(
            f"| {name} | {p.scenario.placement.text}, {p.scenario.budget_mib} MiB | {short_depth} / {long_depth} "
            f"| {short_tps} / {long_tps} | {speeds[1] / speeds[0]:.2f} / {long_tps / short_tps:.2f} | {grows} |"
        )
    return lines


def _traced_windows(trace, size: int) -> float:
    """Mean distinct experts per layer in non-overlapping windows of `size` tokens inside each traced sequence."""
    counts = []
    for start, end in zip(trace.seq_offsets[:-1], trace.seq_offsets[1:], strict=True):
        for at in range(start, end - size + 1, size):
            window = trace.experts[at : at + size]
            counts += [len(np.unique(window[:, layer])) for layer in range(trace.n_layer)]
    return float(np.mean(counts)) if counts else float("nan")


def prompt_routing_table() -> list[str]:
    """Distinct experts per prompt-sized window: the routing model a prompt ubatch is priced with, against the two
    traces the project has (gpt-oss-20b's real routing; run3's random-weight model, its traced prompt ubatch)."""
    from moe_model.readers.traces import load_any, load_token_trace
    from moe_model.resources import data_path
    from moe_model.routing.synthetic import RANDOM_WEIGHT_KNOBS, load_presets, preset_for, window_distinct
    from moe_model.speed.traffic import independent_distinct

    lines = [
        "| routing | window (tokens) | traced | modelled | independent tokens |",
        "|---|---|---|---|---|",
    ]
    trace = load_token_trace(data_path("traces") / "gpt-oss-20b" / "routing.npz")
    knobs = preset_for("gpt-oss-20b").knobs
    for size in (32, 128, 256):
        lines.append(
            f"| gpt-oss-20b (real trace, 32 x 4; its preset) | {size} | {_traced_windows(trace, size):.1f} "
            f"| {window_distinct(32, 4, knobs, size):.1f} | {independent_distinct(32, 4, size):.1f} |"
        )
    for name, entry in load_presets().items():  # no prompt trace: what a 512-token ubatch is priced with
        shape, knobs = entry["shape"], preset_for(name).knobs
        n, k = shape["n_expert"], shape["k"]
        lines.append(
            f"| {name} preset ({n} x {k}; no trace) | 512 | - | {window_distinct(n, k, knobs, 512):.1f} "
            f"| {independent_distinct(n, k, 512):.1f} |"
        )
    work = load_any(GROUNDTRUTH / "run3" / "traces" / "run3_b25.npz")
    prompt = np.flatnonzero(work.rec_ntok >= 32)
    traced = np.mean([len(np.unique(work.ids[o : o + work.k * n])) for o, n in zip(
        work.rec_off[prompt], work.rec_ntok[prompt], strict=True)])  # fmt: skip
    size = int(work.rec_ntok[prompt[0]])
    lines.append(
        f"| run3 model (random weights, 128 x 8; skew fitted to this row) | {size} | {traced:.1f} "
        f"| {window_distinct(128, 8, RANDOM_WEIGHT_KNOBS, size):.1f} | {independent_distinct(128, 8, size):.1f} |"
    )
    return lines


def _routing_spread(p) -> float:
    """The hit-rate spread a point's plain prediction carries: none where its rate was measured or nothing is cached."""
    from moe_model.routing.synthetic import preset_for

    return preset_for(p.model).spread_points if p.hit_source.startswith("simulated") else 0.0


def coverage_line(coverage) -> str:
    return (
        f"The range a plain prediction carries (the time model's error, the routing's spread where the hit rate is "
        f"simulated, the host parts the machine leaves undescribed) holds **{100 * coverage.share:.0f} %** of the "
        f"{coverage.points} left-out decode measurements; its median half width is "
        f"±{100 * coverage.median_half_width:.0f} %."
    )


def write_block(path: Path, sections: list[str], begin: str = BEGIN, end: str = END) -> None:
    text = path.read_text()
    block = "\n".join([begin, *sections, end])
    if begin in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text += "\n" + block + "\n"
    path.write_text(text)


def readme_block(record: dict, runs) -> list[str]:
    """The README's figures: leave-one-machine-out medians from the stored calibration and the seed's T4 rows
    (decode and prompt) through the plain `predict`."""
    reports = record["leave_one_machine_out"].values()
    prompt = [list(r["prefill_errors"].values()) for r in reports if r["prefill_errors"]]
    lines = [summary_line([r["median_abs_error"] for r in reports], prompt, record["verdicts"]), ""]
    if "range_coverage" in record:
        lines += [coverage_line(RangeCoverage(**record["range_coverage"])), ""]
    lines += ["| seed T4 row | decode predicted / measured t/s | error | prompt predicted / measured t/s | error |"]
    lines += ["|---|---|---|---|---|"]
    return lines + [f"| {name} | {_speed_cells(pred, measured, p)} |" for name, _, pred, measured, p in runs]


def host_record_errors(points, reports) -> dict:
    """Each machine with a host record of its own, predicted by the fit that left it out with its host side taken
    from the record instead of its logs (the points of the recorded model; others are another model's)."""
    errors, about = {}, []
    for report in reports:
        path, what = HOST_RECORDS.get(report.machine, ((), ""))
        if not path or not data_path(*path).exists():
            continue
        record, params = read_host_record(data_path(*path)), report.params
        about.append(what)
        for p in (p for p in points if p.machine == report.machine and p.decode_tps):
            with contextlib.suppress(HostRecordError):
                errors |= decode_errors([p], params, apply_host_record(p.hw, record, p.model, params))
    rel = relative_error(list(errors.values())) if errors else None
    return {"rel_error": rel, "points": len(errors), "errors": errors, "about": "; ".join(about)}


def host_record_line(measured: dict) -> str:
    if not measured["points"]:
        return "No machine has a host record of its own yet: a prediction with one carries the plain error."
    errors = np.abs(list(measured["errors"].values()))
    return (
        f"With a host record ({measured['about']}) instead of the machine's logs, the fit without the machine predicts "
        f"its {measured['points']} decode points with median error {100 * np.median(errors):.0f} %: a prediction "
        f"with a host record carries ±{100 * measured['rel_error']:.0f} % (their 68th percentile)."
    )


def rewrite_host_record(points) -> None:
    """Only the host-record entry and its line, from the stored fits that left each machine out (minutes)."""
    record = json.loads(CALIBRATION_JSON.read_text())
    old = host_record_line(record["host_record"])
    reports = [
        MachineReport(**(r | {"params": TimeParams(**r["params"])})) for r in record["leave_one_machine_out"].values()
    ]
    record["host_record"] = host_record_errors(points, reports)
    CALIBRATION_JSON.write_text(json.dumps(record, indent=1, default=float) + "\n")
    DOC.write_text(DOC.read_text().replace(old, host_record_line(record["host_record"])))


def main() -> None:
    if "--readme" in sys.argv[1:]:
        record = json.loads(CALIBRATION_JSON.read_text())
        write_block(README, readme_block(record, t4_plain_runs()), README_BEGIN, README_END)
        return
    if "--host-record" in sys.argv[1:]:
        rewrite_host_record(all_points())
        return
    points = all_points()
    reports = leave_one_machine_out(points, progress=_progress("leave one machine out"))
    params = fit(points)
    rel = relative_error([e for r in reports for e in r.errors.values()])
    coverage = range_coverage(points, reports, rel, _routing_spread)
    verdicts = []
    for report in reports:
        verdicts += cache_verdicts([p for p in points if p.machine == report.machine], report.params, rel)
    excluded = field_rows()
    excluded = excluded[excluded["use"] == "no"]
    record = {
        "fitted_to": "every measured machine at once: seed T4 rows, the H200 ground-truth runs 1, 3 and 5 (each "
        "request of run5 a point), and the field rows of moe_model/data/field_rows.csv; decode and prompt speeds "
        "(prompt at half weight); machines weighted equally; squared log errors",
        "params": asdict(params),
        "rel_error": rel,
        "machines": sorted({p.machine for p in points}),
        "measured": {p.name: p.decode_tps for p in points if p.decode_tps},
        "requests": {p.name: p.request for p in points},
        "fit_errors": decode_errors(points, params),
        "fit_prefill_errors": prefill_errors(points, params),
        "leave_one_machine_out": {r.machine: asdict(r) for r in reports},
        "verdicts": verdicts,
        "range_coverage": asdict(coverage),
        "host_record": (host_measured := host_record_errors(points, reports)),
        "excluded_rows": {f"{r['machine']}-{r['row']}": r["why"] for _, r in excluded.iterrows()},
    }
    CALIBRATION_JSON.write_text(json.dumps(record, indent=1, default=float) + "\n")
    print(file=sys.stderr)
    sections = ["### Leave one machine out", "", *lomo_table(points, reports, verdicts), ""]
    sections += [f"Every prediction carries ±{100 * rel:.0f} % (the 68th percentile of left-out decode errors).", ""]
    sections += [coverage_line(coverage), ""]
    sections += [host_record_line(host_measured), ""]
    t4_runs = t4_plain_runs()
    sections += ["### The seed's T4 rows through plain `predict`", "", *t4_plain_table(t4_runs), ""]
    sections += ["### The H200 run5 servers through plain `predict`", "", *run5_plain_table(), ""]
    sections += ["### Decode at depth on third-party machines (never fitted)", "", *depth_table(points, params), ""]
    run6, run6_errors = run6_table()
    sections += ["### The H200 run6 servers through plain `predict` (held out: never fitted)", "", *run6, ""]
    medians = [
        f"{run} {kind} {100 * np.median(np.abs(errors)):.0f} % ({len(errors)})"
        for (run, kind), errors in run6_errors.items()
    ]
    sections += [f"run6, median absolute error (requests): {'; '.join(medians)}.", ""]
    sections += ["### The H200 run7 servers through plain `predict` (held out: repeated pairs)", "", *run7_table(), ""]
    sections += ["### Distinct experts per prompt window: routing model against traces", "", *prompt_routing_table()]
    print("\n".join(sections))
    write_block(DOC, sections)
    write_block(README, readme_block(record, t4_runs), README_BEGIN, README_END)


if __name__ == "__main__":
    main()
