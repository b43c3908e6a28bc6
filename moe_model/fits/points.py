"""Every measured configuration the time model is fitted and checked on, as points on their own machines.

- "t4": the seed article's Tesla T4 rows (moe_model/data/reference-measurements.csv, Qwen3-30B-A3B Q4_K_M).
- "h200": the real llama-server runs of sample_data/groundtruth (run1: a small synthetic qwen3moe;
  run3: Qwen3-30B-A3B-sized experts, one request per server; run5: run3's model, four requests per
  server, each its own point), read from their -lv 4 logs exactly as a user's logs are.
- the field machines: third-party rows of moe_model/data/field-measurements.csv, interpreted row by row
  in moe_model/data/field_rows.csv (placement, budget, flags, which value, which requests it timed, why a
  row is left out), on the machines of moe_model/data/machines.json (host figures stated or assumed).

Every point knows which requests its decode timing covers (`request`): a server's first request
(its pool starts empty: cold fills on top of the steady traffic), the later ones (steady state), or all
the requests the hit-rate counters cover. A log's counters span the server's life, so a log point's hit
rate is the steady one (the fills of empty slots removed) and the fills are counted apart.
Hit rates are the measured ones where a row has them (for one stream); otherwise simulated with the
model's routing preset (a model), and the point says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from moe_model.errors import MoeModelError
from moe_model.fits.log_timings import decode_tps_of, infer_budget, infer_placement, load_reference, run_build
from moe_model.limits import DEFAULT_CTX
from moe_model.llama.builds import EXACT_BUILD
from moe_model.llama.slot_plan import Placement
from moe_model.policies import policy_for_build
from moe_model.policies.wording import hit_rate_wording
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.logs import MAINLINE, LoggedStats, LogRun, parse_log
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.resources import data_path
from moe_model.speed.hardware import Hardware, preset
from moe_model.speed.scenario import Layout, Scenario, resolve
from moe_model.speed.time_model import cold_fills
from moe_model.speed.traffic import Traffic, from_hit_rate, from_workload, start_up_fills

if TYPE_CHECKING:
    import pandas as pd

MODELS = data_path("models")
GROUNDTRUTH = data_path("groundtruth")


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
    request: str = "all"  # the timed requests: "first" (cold pool), "steady" (later ones), "all" (every request)
    prefill_first: bool = False  # the timed prompt was a server's first (nothing cached yet)
    engine: str = MAINLINE  # which llama.cpp ran it: mainline, a fork, another engine (the rows' `engine` column)

    @property
    def engine_label(self) -> str:
        """The engine, its build and the policy its hit rates come from, e.g. 'mainline b11549 (lru-b11549, exact)'."""
        sc = self.scenario
        return f"{engine_build(self.engine, sc.build)} ({sc.hit_rate_wording.tag})"


def engine_build(engine: str, build: int) -> str:
    """'mainline b11549', or for another engine the build its cache is modelled as."""
    return f"{engine} b{build}" if engine == MAINLINE else f"{engine} (modelled as b{build})"


REQUESTS = ("first", "steady", "all", "unknown")  # "unknown" is compared with the steady state


def measured_kind_tps(point: Point, prediction) -> tuple[float, float]:
    """The predicted decode and prompt t/s of the requests the point timed (first request or steady state)."""
    first = prediction.first_request
    decode = first.decode_tps if point.request == "first" and first else prediction.decode_tps
    prefill = first.prefill_tps if point.prefill_first and first else prediction.prefill_tps
    return decode, prefill


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
    return load_model(data_path(*file.split("/")) if "/" in file else MODELS / file)


def _point(name, machine, model, hw, sc, decode, prefill, hit_rate, control=None, layout=None, **kw) -> Point:
    layout = layout or resolve(model, hw, sc)
    traffic, source = point_traffic(model, sc, layout, hit_rate)
    return Point(name, machine, model, hw, sc, layout, decode, prefill, traffic, control, source, **kw)


def decode_hit_rate(stats: LoggedStats, model: ModelSpec, layout: Layout, build: int) -> float:
    """The logged "ubatch <= 8" hit rate without llama-server `build`'s start-up, which the decode timings leave out:
    BOS+EOS (and the seq_rm probe where the build makes it) through every cached layer, all misses on the cold pool
    (docs section 5)."""
    misses = max(stats.misses - _start_up_fills(model, layout, build), 0.0)
    return stats.hits / (stats.hits + misses) if stats.hits + misses else stats.hit_rate


def _start_up_fills(model: ModelSpec, layout: Layout, build: int) -> float:
    """Slots llama-server's start-up fills before any request, at the layers that look the cache up."""
    return start_up_fills(model, layout.cached_mask(model, 1).nonzero()[0], build)


def log_fills(stats: LoggedStats, layout: Layout) -> int:
    """Misses into empty slots over a server's life: the first n_slots misses fill them (b11549's LRU hands out
    its never-used slots first and never empties one), so min(slots of the cached groups, misses)."""
    return min(layout.plan.n_slots_total, stats.misses)


def steady_hit_rate(stats: LoggedStats, layout: Layout) -> float:
    """The hit rate of a warm pool: the logged counts without the misses that filled empty slots (the warm-up's
    and a first request's cold start)."""
    lookups = stats.hits + stats.misses - log_fills(stats, layout)
    return stats.hits / lookups if lookups > 0 else 1.0


def _t4_rows() -> pd.DataFrame:
    """The seed's T4 rows that started and report a decode speed, with the --placement each one means."""
    table = load_reference()
    rows = table[(table["gpu"] == "Tesla T4") & table["starts"] & table["decode_tps"].notna()].copy()
    rows["placement_name"] = ["fit" if str(p).startswith("--fit") else "cpu-moe" for p in rows["placement"]]
    return rows


def t4_points() -> list[Point]:
    """The T4 rows that started; --fit placements as the tool itself computes them."""
    import pandas as pd  # ~0.5-1 s to import: only the reference tables need it

    hw, model = preset("Tesla T4"), _model("Qwen3-30B-A3B-Q4_K_M.gguf")
    points = []
    for _, row in _t4_rows().iterrows():
        placement = Placement.parse(row["placement_name"])
        sc = Scenario(placement, int(row["moe_cache_mib"]), int(row["parallel"]), build=int(row["build"]))
        rate = row["hit_rate_small_pct"] if pd.notna(row["hit_rate_small_pct"]) else row["hit_rate_pct"]
        hit = float(rate) / 100 if pd.notna(rate) else None
        prefill = float(row["prefill_tps"]) if pd.notna(row["prefill_tps"]) else None
        control = {"t4-fit-cache10": "t4-fit", "t4-cpumoe-50": "t4-cpumoe", "t4-cpumoe-10000": "t4-cpumoe"}.get(
            row["id"]
        )
        engine = row["engine"]
        points.append(
            _point(row["id"], "t4", model, hw, sc, float(row["decode_tps"]), prefill, hit, control, engine=engine)
        )
    return points


def t4_predict_argv() -> dict[str, tuple[list[str], float, float | None]]:
    """Each seed T4 row that started, as the plain `predict` command a user would type, with its measured decode
    and prompt t/s (the prompt's length is not stated: the command's default is used)."""
    import pandas as pd  # ~0.5-1 s to import: only the reference tables need it

    model = str(MODELS / "Qwen3-30B-A3B-Q4_K_M.gguf")
    out = {}
    for _, row in _t4_rows().iterrows():
        argv = ["predict", "--model", model, "--hardware", "t4", "--placement", row["placement_name"]]
        argv += ["--budget-mib", str(int(row["moe_cache_mib"])), "--concurrency", str(int(row["parallel"]))]
        argv += ["--build", str(int(row["build"])), "--json"]
        prompt = float(row["prefill_tps"]) if pd.notna(row["prefill_tps"]) else None
        out[row["id"]] = (argv, float(row["decode_tps"]), prompt)
    return out


def run7_predict_argv(placement: str, prompt_tokens: int, depth: int) -> list[str]:
    """One request of a run7 server as the plain `predict` command (groundtruth/run7/README: -ngl 99 -fa off -c 16384
    -np 1, mmap'd experts, no cache, 128 tokens decoded)."""
    argv = ["predict", "--model", str(GROUNDTRUTH / "run3" / "model-header.gguf"), "--hardware", "h200"]
    argv += ["--placement", placement, "--ctx", "16384", "--budget-mib", "0", "-fa", "off", "--n-predict", "128"]
    return argv + ["--prompt-tokens", str(prompt_tokens), "--depth", str(depth), "--json"]


def scenario_of_run(run: LogRun, model: ModelSpec, build: int | None = None) -> Scenario:
    """The scenario a llama-server log describes: placement, budget, streams, context, load mode, -fa, and the
    build (the log's own `build:` line, else `build`, else mainline)."""
    placement = infer_placement(run, model)
    budget = (infer_budget(run, model, placement) or 0) if run.devices else 0
    mode = "mmap" if "CPU_Mapped" in run.placement.get("model_buffers_mib", {}) else "none"
    n_ctx = int(run.placement.get("n_ctx", DEFAULT_CTX))
    fa = run.placement.get("flash_attn", "auto")
    streams = int(run.placement.get("n_seq_max", 1))
    return Scenario(
        placement, budget, streams, n_ctx=n_ctx, load_mode=mode, flash_attn=fa, build=run_build(run, build)[0]
    )


def check_engines(named_runs: list[tuple[str, LogRun]]) -> None:
    """Refuse, in one line, logs that mix the qvac-fabric fork with mainline llama.cpp (they cache differently)."""
    engines: dict[str, list[str]] = {}
    for name, run in named_runs:
        engines.setdefault(run.engine, []).append(name)
    if len(engines) > 1:
        said = "; ".join(f"{engine}: {', '.join(names)}" for engine, names in engines.items())
        raise MoeModelError(f"these logs mix engines that cache differently ({said}): give one engine's runs")


def _request_scenario(sc: Scenario, timings: list) -> Scenario:
    """The scenario of timed requests: their prompt, their decode length and the mean context it reads."""
    prompt = int(timings[0].prompt_tokens) or sc.prompt_tokens
    n_predict = max(1, round(sum(t.decode_tokens for t in timings) / len(timings)))
    return replace(sc, prompt_tokens=prompt, n_predict=n_predict, depth=prompt + n_predict // 2)


def _steady_scenario(sc: Scenario, timings: list) -> Scenario:
    """The scenario of a run's later requests together: the mean context their decoded tokens read."""
    tokens = sum(t.decode_tokens for t in timings)
    depth = sum((int(t.prompt_tokens) + t.decode_tokens / 2) * t.decode_tokens for t in timings) / tokens
    return replace(_request_scenario(sc, timings), depth=round(depth))


def _token_mean(timings: list) -> float:
    """Decode t/s over several requests of one stream, each weighted by the tokens it decoded."""
    return sum(t.decode_tps * t.decode_tokens for t in timings) / sum(t.decode_tokens for t in timings)


def log_points(
    runs: list[LogRun],
    model: ModelSpec,
    hw: Hardware,
    source: str,
    machine: str,
    per_request: bool = False,
    build: int | None = None,
    steady: bool = False,
) -> list[Point]:
    """Points from parsed log runs that started and report a decode speed, each named after its run; with
    `per_request`, one point per request of a single-stream run (named run/request); with `steady`, a
    single-stream run with later requests is timed on those alone (the steady state Explore predicts), else on
    its first. A run whose log names no build is taken as `build` (else mainline).

    A run whose timings include the server's first request is a "first" point: its steady hit rate and its
    cold fills come from the counters; later requests alone are "steady"."""
    points = []
    for run in runs:
        decode = decode_tps_of(run)
        if not decode or not run.starts:
            continue
        base = scenario_of_run(run, model, build)
        timed = [t for t in run.timings if t.decode_tps]
        groups = [[t] for t in timed] if per_request and base.concurrency == 1 else [timed]
        later = steady and base.concurrency == 1 and len(timed) > 1
        groups = [timed[1:]] if later else groups
        for i, group in enumerate(groups):
            sc = _steady_scenario(base, group) if later else _request_scenario(base, group)
            layout = resolve(model, hw, sc)
            first = group[0] is timed[0]
            hit = steady_hit_rate(run.small, layout) if run.small else None
            prefill = group[0].prompt_tps if sc.concurrency == 1 else None
            name = f"{source}#{run.index + 1}" + (f"/{i + 1}" if per_request else "")
            tps = _token_mean(group) if later else decode if not per_request else group[0].decode_tps
            point = _point(name, machine, model, hw, sc, tps, prefill, hit, layout=layout,
                           request="first" if first else "steady", prefill_first=first, engine=run.engine)  # fmt: skip
            if first and run.small and point.traffic.cached.any():
                start_up = min(layout.plan.n_slots_total, _start_up_fills(model, layout, sc.build))
                fills = log_fills(run.small, layout) - start_up
                cap = cold_fills(model, sc, layout) if per_request else fills  # later requests fill the rest
                point = replace(point, traffic=replace(point.traffic, fills=max(0.0, min(fills, cap))))
            points.append(point)
    return points


def _server_logs(folder: Path) -> list[tuple[str, Path]]:
    logs = (p for p in folder.glob("server_*.log") if "." not in p.stem)  # not the clients' server_x.client.log
    return sorted((p.stem.removeprefix("server_"), p) for p in logs)


def h200_points() -> list[Point]:
    """The ground-truth runs on the H200, from their logs (the no-cache run is each cache run's control):
    run1 and run3 one request per server, run5 four (warm, short1, short2, long), each request a point."""
    hw = preset("H200")
    points = []
    for run_name, folder, header, per_request in (
        ("run1", GROUNDTRUTH / "logs", "groundtruth/synthetic-qwen3moe-Q4_K_M-header.gguf", False),
        ("run3", GROUNDTRUTH / "run3" / "logs", "groundtruth/run3/model-header.gguf", False),
        ("run5", GROUNDTRUTH / "run5" / "logs", "groundtruth/run3/model-header.gguf", True),
    ):
        model = _model(header)
        for case, path in _server_logs(folder):
            runs = parse_log(path)
            for p in log_points(runs, model, hw, f"h200-{run_name}-{case}", "h200", per_request, EXACT_BUILD):
                name = f"h200-{run_name}-{case}" + (f"-{RUN5_REQUESTS[p.name[-1]]}" if per_request else "")
                control = None
                if p.scenario.budget_mib and p.scenario.concurrency == 1:
                    off = "mm_off" if run_name == "run5" else "off"
                    control = f"h200-{run_name}-{off}" + (name[name.rindex("-") :] if per_request else "")
                points.append(replace(p, name=name, control=control))
    return points


RUN5_REQUESTS = {"1": "warm", "2": "short1", "3": "short2", "4": "long"}  # run5's request order (its README)


def field_machines() -> dict[str, Hardware]:
    return {key: Hardware.from_dict(spec) for key, spec in json.loads(data_path("machines.json").read_text()).items()}


def field_rows() -> pd.DataFrame:
    """The field table joined with our reading of each row (field_rows.csv)."""
    import pandas as pd  # ~0.5-1 s to import: only the reference tables need it

    table = pd.read_csv(data_path("field-measurements.csv"))
    rows = pd.read_csv(data_path("field_rows.csv"))
    return rows.join(table[["gpu", "model", "hit_rate_small_pct", "source_url_or_repo_path"]], on="row")


def field_points() -> list[Point]:
    import pandas as pd  # ~0.5-1 s to import: only the reference tables need it

    machines = field_machines()
    points = []
    for _, r in field_rows().iterrows():
        if r["use"] == "no":
            continue
        fitted = r["use"] not in ("check",)
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
            depth=int(r["depth"]),
            flash_attn=r["flash_attn"],
            n_predict=int(r["n_predict"]),
            build=int(r["build"]),
        )
        hit = float(r["hit_rate_small_pct"]) / 100 if pd.notna(r["hit_rate_small_pct"]) else None
        decode = float(r["decode_tps"]) if pd.notna(r["decode_tps"]) and r["use"] in ("yes", "check") else None
        prefill = float(r["prefill_tps"]) if pd.notna(r["prefill_tps"]) else None
        control = f"{r['machine']}-{int(r['control_row'])}" if pd.notna(r["control_row"]) else None
        model = _model(r["model_file"])
        name = f"{r['machine']}-{int(r['row'])}"
        hw = machines[r["hardware"] if pd.notna(r["hardware"]) else r["machine"]]
        point = _point(name, r["machine"], model, hw, sc, decode, prefill, hit, control, request=r["request"])
        points.append(replace(point, fitted=fitted, engine=r["engine"]))
    return points


def _engines_and_builds() -> dict[str, tuple[str, int | None]]:
    """Each measured point's engine and the build its cache runs as (None: not stated), read from the tables."""
    table = load_reference()
    out = {r["id"]: (r["engine"], int(r["build"])) for _, r in _t4_rows().iterrows()}
    for run_name, folder in (("run1", GROUNDTRUTH / "logs"), ("run3", GROUNDTRUTH / "run3" / "logs")):
        out |= {f"h200-{run_name}-{case}": (MAINLINE, EXACT_BUILD) for case, _ in _server_logs(folder)}
    rows = field_rows()
    rows = rows[rows["use"] != "no"]
    out |= {f"{r['machine']}-{int(r['row'])}": (r["engine"], int(r["build"])) for _, r in rows.iterrows()}
    return out | {r["id"]: (r["engine"], None) for _, r in table.iterrows() if r["id"] not in out}


def engines() -> dict[str, str]:
    """Each measured point's engine and build, read from the tables without simulating (the Reference page)."""
    return {
        name: engine if build is None else engine_build(engine, build)
        for name, (engine, build) in _engines_and_builds().items()
    }


def point_policy_tags() -> list[str]:
    """The policies the measured points' hit rates are simulated with, as every output words them."""
    builds = sorted({build for _, build in _engines_and_builds().values() if build is not None})
    return list(dict.fromkeys(hit_rate_wording(policy_for_build(b), b).tag for b in builds))


def all_points() -> list[Point]:
    """Every measured point of every machine (a few seconds: rows without hit rates are simulated)."""
    return t4_points() + h200_points() + field_points()
