"""Every measured configuration the time model is fitted and checked on, as points on their own machines.

- "t4": the seed article's Tesla T4 rows (moe_model/data/reference-measurements.csv, Qwen3-30B-A3B Q4_K_M).
- "h200": the real llama-server runs of moe_model/data/groundtruth (run1: a small synthetic qwen3moe;
  run3: Qwen3-30B-A3B-sized experts), read from their -lv 4 logs exactly as a user's logs are.
- "v620", "r9700", "rtx5070ti", "rtx4070": third-party rows of moe_model/data/field-measurements.csv,
  interpreted row by row in moe_model/data/field_rows.csv (placement, budget, flags, which value, why a
  row is left out), on the machines of moe_model/data/machines.json.

Hit rates are the measured ones where a row has them (for one stream); otherwise simulated with the
model's routing preset (a model), and the point says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import pandas as pd

from moe_model.limits import DEFAULT_CTX
from moe_model.llama.batching import build_workload
from moe_model.llama.slot_plan import Placement
from moe_model.readers.logs import LoggedStats, LogRun, parse_log
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.resources import data_path
from moe_model.routing.synthetic import Shape, generate, preset_for
from moe_model.speed.hardware import Hardware, preset
from moe_model.speed.measurements import decode_tps_of, infer_budget, infer_placement, load_reference
from moe_model.speed.scenario import Layout, Scenario, resolve
from moe_model.speed.traffic import Traffic, from_hit_rate, from_workload, independent_distinct
from moe_model.workload import Batching, Workload

SAMPLE = data_path()
MODELS = SAMPLE / "models"
GROUNDTRUTH = SAMPLE / "groundtruth"
SYNTHETIC_TOKENS = 4000


@dataclass(frozen=True, eq=False)
class Point:
    """A measured decode (and optionally prompt) speed of a scenario on a machine, with its traffic."""

    name: str
    machine: str
    model: ModelSpec
    hw: Hardware
    scenario: Scenario
    layout: Layout
    decode_tps: float | None
    prefill_tps: float | None
    traffic: Traffic
    control: str | None = None  # the same placement without a cache, for the cache verdict
    hit_source: str = "measured"
    fitted: bool = True  # False: predicted and reported, kept out of every fit (field_rows.csv says why)


def synthetic_workload(
    model: ModelSpec, sc: Scenario, seed: int = 0, n_tokens: int = SYNTHETIC_TOKENS, prompts: bool = False
) -> Workload:
    """The model's routing preset (a model), batched as the scenario's server would; with `prompts`, each
    sequence first processes sc.prompt_tokens of prompt in ubatches of sc.n_ubatch."""
    preset = preset_for(model)
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    trace = generate(shape, preset.knobs, n_tokens, seed=seed, label=f"synthetic ({preset.name} preset)")
    prompt = sc.prompt_tokens if prompts else 0
    batching = Batching(sc.concurrency, sc.draft_tokens, sc.accept_rate, prompt, sc.n_ubatch)
    return build_workload(trace, batching, model.n_expert)


def point_traffic(model: ModelSpec, sc: Scenario, layout: Layout, hit_rate: float | None) -> tuple[Traffic, str]:
    """Measured hit rate for one plain stream; otherwise simulated batches (scaled to a measured rate).
    Batches of several tokens take their distinct experts from the routing preset (tokens share experts)."""
    if sc.tokens_per_ubatch == 1 and (sc.budget_mib == 0 or not layout.plan.starts):
        return from_hit_rate(model, layout, sc, 0.0), "no cache"
    if hit_rate is not None and sc.tokens_per_ubatch == 1:
        return from_hit_rate(model, layout, sc, hit_rate), "measured"
    simulated = from_workload(model, layout, sc, synthetic_workload(model, sc))
    if sc.budget_mib == 0:
        return simulated, "no cache; batch sizes simulated"
    if hit_rate is None:
        return simulated, "simulated (routing preset)"
    scaled = replace(simulated, hits=simulated.distinct * hit_rate * simulated.cached)
    return scaled, "measured rate, simulated batch sizes"


@cache
def _model(file: str) -> ModelSpec:
    return load_model(MODELS / file if "/" not in file else SAMPLE / file)


def _point(name, machine, model, hw, sc, decode, prefill, hit_rate, control=None, layout=None) -> Point:
    layout = layout or resolve(model, hw, sc)
    traffic, source = point_traffic(model, sc, layout, hit_rate)
    return Point(name, machine, model, hw, sc, layout, decode, prefill, traffic, control, source)


def decode_hit_rate(stats: LoggedStats, model: ModelSpec, layout: Layout) -> float:
    """The logged "ubatch <= 8" hit rate without llama-server's warm-up, which the decode timings leave out:
    BOS+EOS through every cached layer (the last with 1 token), all misses on the cold pool (docs section 5)."""
    k, n = model.n_expert_used, model.n_expert
    cached = layout.cached_mask(model, 1).nonzero()[0]
    warm = sum(independent_distinct(n, k, 1 if il == model.n_layer - 1 else 2) for il in cached)
    misses = max(stats.misses - warm, 0.0)
    return stats.hits / (stats.hits + misses) if stats.hits + misses else stats.hit_rate


def _t4_rows() -> pd.DataFrame:
    """The seed's T4 rows that started and report a decode speed, with the --placement each one means."""
    table = load_reference()
    rows = table[(table["gpu"] == "Tesla T4") & table["starts"] & table["decode_tps"].notna()].copy()
    rows["placement_name"] = ["fit" if str(p).startswith("--fit") else "cpu-moe" for p in rows["placement"]]
    return rows


def t4_points() -> list[Point]:
    """The T4 rows that started; --fit placements as the tool itself computes them."""
    hw, model = preset("Tesla T4"), _model("Qwen3-30B-A3B-Q4_K_M.gguf")
    points = []
    for _, row in _t4_rows().iterrows():
        placement = Placement.parse(row["placement_name"])
        sc = Scenario(placement, int(row["moe_cache_mib"]), int(row["parallel"]))
        rate = row["hit_rate_small_pct"] if pd.notna(row["hit_rate_small_pct"]) else row["hit_rate_pct"]
        hit = float(rate) / 100 if pd.notna(rate) else None
        prefill = float(row["prefill_tps"]) if pd.notna(row["prefill_tps"]) else None
        control = {"t4-fit-cache10": "t4-fit", "t4-cpumoe-50": "t4-cpumoe", "t4-cpumoe-10000": "t4-cpumoe"}.get(
            row["id"]
        )
        points.append(_point(row["id"], "t4", model, hw, sc, float(row["decode_tps"]), prefill, hit, control))
    return points


def t4_predict_argv() -> dict[str, tuple[list[str], float]]:
    """Each seed T4 row that started, as the plain `predict` command a user would type, with its measured t/s."""
    model = str(MODELS / "Qwen3-30B-A3B-Q4_K_M.gguf")
    out = {}
    for _, row in _t4_rows().iterrows():
        argv = ["predict", "--model", model, "--hardware", "t4", "--placement", row["placement_name"]]
        argv += ["--budget-mib", str(int(row["moe_cache_mib"])), "--concurrency", str(int(row["parallel"])), "--json"]
        out[row["id"]] = (argv, float(row["decode_tps"]))
    return out


def scenario_of_run(run: LogRun, model: ModelSpec) -> Scenario:
    """The scenario a llama-server log describes: placement, budget, streams, context, load mode."""
    placement = infer_placement(run, model)
    budget = (infer_budget(run, model, placement) or 0) if run.devices else 0
    mode = "mmap" if "CPU_Mapped" in run.placement.get("model_buffers_mib", {}) else "none"
    n_ctx = int(run.placement.get("n_ctx", DEFAULT_CTX))
    return Scenario(placement, budget, int(run.placement.get("n_seq_max", 1)), n_ctx=n_ctx, load_mode=mode)


def log_points(runs: list[LogRun], model: ModelSpec, hw: Hardware, source: str, machine: str) -> list[Point]:
    """Points from parsed log runs that started and report a decode speed, each named after its run."""
    points = []
    for run in runs:
        decode = decode_tps_of(run)
        if not decode or not run.starts:
            continue
        sc = scenario_of_run(run, model)
        prompt = [t.prompt_tps for t in run.timings if t.prompt_tps]
        prompt_n = [t.prompt_tokens for t in run.timings if t.prompt_tps]
        if prompt_n:
            sc = replace(sc, prompt_tokens=int(prompt_n[0]))
        layout = resolve(model, hw, sc)
        hit = decode_hit_rate(run.small, model, layout) if run.small else None
        prefill = prompt[0] if prompt and sc.concurrency == 1 else None
        name = f"{source}#{run.index + 1}"
        points.append(_point(name, machine, model, hw, sc, decode, prefill, hit, layout=layout))
    return points


def _server_logs(folder: Path) -> list[tuple[str, Path]]:
    return sorted((p.stem.removeprefix("server_"), p) for p in folder.glob("server_*.log"))


def h200_points() -> list[Point]:
    """Both ground-truth runs on the H200, from their logs (the no-cache run is each cache run's control)."""
    hw = preset("H200")
    points = []
    for run_name, folder, header in (
        ("run1", GROUNDTRUTH / "logs", "groundtruth/synthetic-qwen3moe-Q4_K_M-header.gguf"),
        ("run3", GROUNDTRUTH / "run3" / "logs", "groundtruth/run3/model-header.gguf"),
    ):
        model = _model(header)
        for case, path in _server_logs(folder):
            for p in log_points(parse_log(path), model, hw, f"h200-{run_name}-{case}", "h200"):
                control = f"h200-{run_name}-off" if p.scenario.budget_mib and p.scenario.concurrency == 1 else None
                points.append(replace(p, name=f"h200-{run_name}-{case}", control=control))
    return points


def field_machines() -> dict[str, Hardware]:
    return {key: Hardware(**spec) for key, spec in json.loads((SAMPLE / "machines.json").read_text()).items()}


def field_rows() -> pd.DataFrame:
    """The field table joined with our reading of each row (field_rows.csv)."""
    table = pd.read_csv(SAMPLE / "field-measurements.csv")
    rows = pd.read_csv(SAMPLE / "field_rows.csv")
    return rows.join(table[["gpu", "model", "hit_rate_small_pct", "source_url_or_repo_path"]], on="row")


def field_points() -> list[Point]:
    machines = field_machines()
    points = []
    for _, r in field_rows().iterrows():
        if r["use"] == "no":
            continue
        fitted = r["use"] != "check"
        sc = Scenario(
            Placement.parse(r["placement"]),
            int(r["budget_mib"]),
            draft_tokens=int(r["draft_tokens"]),
            accept_rate=float(r["accept_rate"]),
            n_ctx=int(r["n_ctx"]),
            prompt_tokens=int(r["prompt_tokens"]),
            n_ubatch=int(r["n_ubatch"]),
            load_mode=r["load_mode"],
            cache_type_k=r["kv_type"],
            cache_type_v=r["kv_type"],
            fit_target_mib=512 if r["placement"] == "fit" else 1024,
        )
        hit = float(r["hit_rate_small_pct"]) / 100 if pd.notna(r["hit_rate_small_pct"]) else None
        decode = float(r["decode_tps"]) if pd.notna(r["decode_tps"]) and r["use"] in ("yes", "check") else None
        prefill = float(r["prefill_tps"]) if pd.notna(r["prefill_tps"]) else None
        control = f"{r['machine']}-{int(r['control_row'])}" if pd.notna(r["control_row"]) else None
        model = _model(r["model_file"])
        name = f"{r['machine']}-{int(r['row'])}"
        point = _point(name, r["machine"], model, machines[r["machine"]], sc, decode, prefill, hit, control)
        points.append(replace(point, fitted=fitted))
    return points


def all_points() -> list[Point]:
    """Every measured point of every machine (a few seconds: rows without hit rates are simulated)."""
    return t4_points() + h200_points() + field_points()
