"""Measured configurations: one schema for the reference table and for points parsed from logs.

Also the cross-check of a log against the plan computed from the model's header, which is how a
user verifies the calculator on their own machine.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from moe_model.llama.builds import MAINLINE_BUILD, build_of_mib_only_log, has_cache, has_cpu_share
from moe_model.llama.slot_plan import CachePlan, Placement, full_budget_mib, min_budget_mib, plan_cache, smallest_budget
from moe_model.policies import policy_for_build
from moe_model.policies.wording import hit_rate_wording
from moe_model.readers.logs import FORK, LogRun, Timing
from moe_model.readers.model_spec import ModelSpec
from moe_model.resources import data_path

if TYPE_CHECKING:
    import pandas as pd

REFERENCE_CSV = data_path("reference-measurements.csv")
COLUMNS = (
    "id", "source", "gpu", "gpu_vram_gib", "pcie", "model", "quant", "model_file_gb", "placement", "moe_cache_mib",
    "parallel", "spec_draft_tokens", "cpu_share", "hit_rate_small_pct", "hit_rate_large_pct", "hit_rate_pct",
    "uploaded_mib_per_token", "decode_tps", "decode_tps_per_stream", "request", "prefill_tps", "starts", "notes",
    "engine", "build",
)  # fmt: skip


def load_reference(path: Path = REFERENCE_CSV) -> pd.DataFrame:
    """The measured reference table (cited sources), in the shared schema: a copy of the file as read once a
    process (read each time it cost Explore 0.1 s before its headline), the caller's to change."""
    stat = Path(path).stat()
    return _read_reference(path, stat.st_mtime_ns, stat.st_size).copy()


@functools.lru_cache(maxsize=4)
def _read_reference(path: Path, _mtime_ns: int, _size: int) -> pd.DataFrame:  # a changed file is read again
    import pandas as pd  # ~0.5-1 s to import: only the reference tables need it

    frame = pd.read_csv(path)
    frame["decode_tps_per_stream"] = frame["decode_tps"] / frame["parallel"].fillna(1)  # decode_tps: the total
    for column in COLUMNS:
        if column not in frame:
            frame[column] = pd.NA
    return frame[list(COLUMNS)]


def timed_requests(run: LogRun) -> list[Timing]:
    """The requests a run's decode speed is measured on: the first n_seq_max of several concurrent ones
    (they ran together), else every request."""
    timed = [t for t in run.timings if t.decode_tps]
    if run.placement.get("n_seq_max", 1) > 1 and len(timed) > 1:
        return timed[: run.placement["n_seq_max"]]
    return timed


def times_first_request(run: LogRun) -> bool:
    """Whether the decode speed includes the server's first request after start (not steady state: with
    mmap'd experts it pays the first touch of their pages)."""
    timed = timed_requests(run)
    return bool(timed) and timed[0] is run.timings[0]


def decode_tps_of(run: LogRun) -> float | None:
    """Decode tokens/s: per request for one stream, summed over concurrent requests (aggregate)."""
    timed = timed_requests(run)
    if not timed:
        return None
    if run.placement.get("n_seq_max", 1) > 1 and len(timed) > 1:
        return sum(t.decode_tps for t in timed)
    return sum(t.decode_tps * t.decode_tokens for t in timed) / sum(t.decode_tokens for t in timed)


def request_label(first: bool) -> str:
    """How every page names the request a speed is of: a server's first after start, or the later ones."""
    return "first request" if first else "steady state"


def logged_decode(run: LogRun) -> tuple[float | None, bool]:
    """The decode t/s a page draws for a run and whether it is of the first request: a single-stream run's later
    requests where it has them (the steady state Explore predicts), else what decode_tps_of measures."""
    timed = timed_requests(run)
    if run.placement.get("n_seq_max", 1) == 1 and len(timed) > 1:
        later = timed[1:]
        return sum(t.decode_tps * t.decode_tokens for t in later) / sum(t.decode_tokens for t in later), False
    return decode_tps_of(run), times_first_request(run)


def decode_tps_per_stream_of(run: LogRun) -> float | None:
    """One stream's decode tokens/s: the mean of concurrent requests where decode_tps_of sums them."""
    timed, total = timed_requests(run), logged_decode(run)[0]
    summed = run.placement.get("n_seq_max", 1) > 1 and len(timed) > 1
    return None if total is None else total / len(timed) if summed else total


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 2)


def point_from_run(run: LogRun, source: str, budget_mib: int | None = None) -> dict:
    """A measured point from one log run (fields the log cannot tell are left empty)."""
    small, large = run.small, run.large
    total = sum(st.hits + st.misses for st in (small, large) if st)
    hits = sum(st.hits for st in (small, large) if st)
    uploaded = sum(st.uploaded_mib for st in (small, large) if st)
    prompt = [t.prompt_tps for t in run.timings if t.prompt_tps]
    budget = budget_mib if budget_mib is not None else run.flag("--moe-cache-mib")
    return {
        "id": f"{source}#{run.index + 1}",  # runs count from 1, as every page and the calibration name them
        "source": source,
        "gpu": run.placement.get("gpu"),
        "model": run.model.get("name"),
        "quant": run.model.get("file_type"),
        "placement": _placement_label(run),
        "moe_cache_mib": None if budget is None else int(budget),
        "parallel": run.placement.get("n_seq_max", 1),
        "hit_rate_small_pct": _pct(small.hit_rate) if small else None,
        "hit_rate_large_pct": _pct(large.hit_rate) if large else None,
        "hit_rate_pct": _pct(hits / total) if total else None,
        "uploaded_mib_per_token": uploaded / run.decode_tokens if run.decode_tokens and total else None,
        "decode_tps": logged_decode(run)[0],
        "decode_tps_per_stream": decode_tps_per_stream_of(run),
        "request": request_label(logged_decode(run)[1]) if timed_requests(run) else None,
        "prefill_tps": sum(prompt) / len(prompt) if prompt else None,
        "starts": run.starts,
        "notes": "; ".join(run.notes()),
        "engine": run.engine,
        "build": run.build,
    }


def _placement_label(run: LogRun) -> str | None:
    if run.command:
        for flag in ("--cpu-moe", "-cmoe"):
            if flag in run.command.split():
                return "--cpu-moe"
        if (k := run.flag("--n-cpu-moe", "-ncmoe")) is not None:
            return f"--n-cpu-moe {k}"
    n_layer = run.model.get("n_layer")
    cached = sum(g.n_layers for g in run.groups)
    if isinstance(n_layer, int) and cached:
        return "--cpu-moe" if cached == n_layer else f"{cached} of {n_layer} layers' experts in host memory"
    return None


@dataclass(frozen=True)
class Derived:
    """What a log's statistics say in the simulator's terms."""

    hit_rate_small: float | None
    hit_rate_large: float | None
    uploaded_mib_per_token: float | None
    small_lookup_share: float | None


def derive(run: LogRun) -> Derived:
    small, large = run.small, run.large
    n_small = small.hits + small.misses if small else 0
    n_large = large.hits + large.misses if large else 0
    uploaded = (small.uploaded_mib if small else 0.0) + (large.uploaded_mib if large else 0.0)
    return Derived(
        small.hit_rate if small else None,
        large.hit_rate if large else None,
        uploaded / run.decode_tokens if run.decode_tokens and (n_small + n_large) else None,
        n_small / (n_small + n_large) if n_small + n_large else None,
    )


# --- cross-check against the plan from the header ---


@dataclass(frozen=True)
class CheckLine:
    """One logged fact beside what the header predicts; `comparable` is False for information only."""

    what: str
    logged: str
    predicted: str
    comparable: bool = True

    @property
    def ok(self) -> bool | None:
        return self.logged == self.predicted if self.comparable else None


def infer_placement(run: LogRun, model: ModelSpec) -> Placement:
    """The placement the log implies: its command line if shown, else from how many layers were cached."""
    if run.command and (k := run.flag("--n-cpu-moe", "-ncmoe")) is not None:
        return Placement(cpu_moe=False, n_cpu_moe=int(k))
    cached = sum(g.n_layers for g in run.groups)
    moe_layers = len(model.moe_layers)
    if run.command and {"--cpu-moe", "-cmoe"} & set(run.command.split()):
        return Placement(cpu_moe=True)
    if not cached:
        return _placement_from_buffers(run, model)
    if cached == moe_layers:
        return Placement(cpu_moe=True)
    return Placement(cpu_moe=False, n_cpu_moe=model.moe_layers[cached - 1] + 1)


HOST_BUFFERS = ("CPU_Mapped", "CUDA_Host", "CPU_REPACK", "CPU")


def _placement_from_buffers(run: LogRun, model: ModelSpec) -> Placement:
    """Without a cache line: the K whose first layers' experts best match the host model buffers."""
    buffers = run.placement.get("model_buffers_mib", {})
    host_mib = sum(v for k, v in buffers.items() if k in HOST_BUFFERS) - model.input_bytes / 2**20
    cumulative = [0.0]
    for layer in model.layers:
        cumulative.append(cumulative[-1] + layer.expert_bytes_total / 2**20)
    k = min(range(len(cumulative)), key=lambda i: abs(cumulative[i] - host_mib))
    return Placement(cpu_moe=True) if k == model.n_layer else Placement(cpu_moe=False, n_cpu_moe=k)


def infer_budget(run: LogRun, model: ModelSpec, placement: Placement) -> int | None:
    """The --moe-cache-mib value: from the command line, else the smallest budget reproducing the slots."""
    if (flag := run.flag("--moe-cache-mib")) is not None:
        return int(flag)
    target = next(((i, g.n_slots) for i, g in enumerate(run.groups) if g.n_slots > 0), None)
    if target is None:
        return None
    index, slots = target
    lo = smallest_budget(
        model, placement, lambda p: p.starts and index < len(p.groups) and p.groups[index].n_slots >= slots
    )
    if lo is None:  # the header cannot give that many slots: another model or quant
        return None
    logged = [g.n_slots for g in run.groups]
    for budget in range(lo, max(lo, full_budget_mib(model, placement) or lo) + 1):
        plan = plan_cache(model, budget, placement)  # other groups may need a few MiB more than the first one
        if [g.n_slots for g in plan.groups] == logged:
            return budget
        if plan.groups[index].n_slots > slots:
            break
    return lo


def _check_lines(devices: list[tuple], groups: list[tuple], n_warnings: int, starts: bool) -> list[tuple[str, str]]:
    """The facts compared, each as (what, text): devices (name, cache MiB, host MiB), groups (layers, type,
    slots, percent), how many warnings, whether it starts."""
    lines = [(f"{name} cache", f"{cache:.2f} MiB for {host:.2f} MiB of host experts") for name, cache, host in devices]
    lines += [
        (f"group {i + 1}", f"{n} layers, {kind}: {slots} slots ({pct:.1f}%)")
        for i, (n, kind, slots, pct) in enumerate(groups)
    ]
    return lines + [("warnings", str(n_warnings)), ("starts", str(starts))]


def _logged_lines(run: LogRun) -> list[tuple[str, str]]:
    devices = [(d.name, d.cache_mib, d.host_experts_mib) for d in run.devices]
    groups = [(g.n_layers, g.type, g.n_slots, g.percent) for g in run.groups]
    return _check_lines(devices, groups, len(run.warnings), run.starts)


def _plan_lines(plan: CachePlan) -> list[tuple[str, str]]:
    """What llama.cpp would log for the plan: no device or group lines when it refuses to start."""
    devices = [(d.name, d.buffer_bytes / 2**20, d.host_bytes / 2**20) for d in plan.devices] if plan.starts else []
    groups = [(g.n_layers, g.type_name, g.n_slots, g.percent) for g in plan.groups] if plan.starts else []
    return _check_lines(devices, groups, len(plan.warnings), plan.starts)


def lines_build(run: LogRun, default: int | None = None) -> int | None:
    """The build a run's own lines show: its `build:` line, else a plain-LRU build when its cache size line is
    b11549's form (`default` when that is one, llama.builds); None when they show neither."""
    if run.build is not None:
        return run.build
    if run.engine != FORK and run.devices and all(d.mib_only for d in run.devices):
        return build_of_mib_only_log(default)
    return None


def run_build(run: LogRun, default: int | None = None) -> tuple[int, str]:
    """The build a run ran (its log's `build:` line; else a plain-LRU build when its cache size line is b11549's
    form; else `default`, else mainline) and where that came from."""
    if run.build is not None:
        return run.build, "logged"
    if (shown := lines_build(run, default)) is not None:
        return shown, "not logged: its cache size line is b11480-b12169's (plain LRU)"
    return (default, "given") if default is not None else (MAINLINE_BUILD, "not logged: mainline assumed")


def _policy_line(run: LogRun, build: int | None) -> CheckLine:
    """Which policy the run's hit rates come from: its build decides (b12170+ ClassLRU)."""
    number, origin = run_build(run, build)
    if not has_cache(number):
        return CheckLine("replacement policy", f"b{number} ({origin})", "no MoE cache in this build", comparable=False)
    try:
        share = float(run.flag("--moe-cache-cpu-share") or 0)
    except ValueError:
        share = 0.0
    share = share if has_cpu_share(number) and 0.0 <= share <= 1.0 else 0.0
    wording = hit_rate_wording(policy_for_build(number, share), number, share)
    return CheckLine("replacement policy", f"b{number} ({origin})", wording.tag, comparable=False)


def _fork_lines(run: LogRun) -> list[CheckLine]:
    """The qvac-fabric fork sizes and fills its cache its own way: mainline's plan is not compared."""
    cache = run.fork_cache
    logged = f"{cache.get('cache_mib', '?')} MiB, {cache.get('slots', '?')} slots"
    if "auto_mib" in cache:
        logged += f" (--fit's automatic {cache['percent']} % of {cache['expert_mib']:.2f} MiB of expert weights)"
    note = "another engine: mainline's slot plan and policies do not apply (not compared)"
    return [CheckLine("engine", FORK, "mainline llama.cpp", False), CheckLine("fork cache", logged, note, False)]


def crosscheck(
    run: LogRun, model: ModelSpec, budget_mib: int | None = None, build: int | None = None
) -> tuple[int | None, list[CheckLine]]:
    """Compare the logged cache lines with the plan from the header, line by line; say which policy the run's
    build ran (its hit rates come from it) and, for the qvac-fabric fork's logs, that nothing is compared."""
    if run.engine == FORK:
        return None, _fork_lines(run)
    budget, lines = _plan_check(run, model, budget_mib)
    return budget, [*lines, _policy_line(run, build)]


def _plan_check(run: LogRun, model: ModelSpec, budget_mib: int | None) -> tuple[int | None, list[CheckLine]]:
    placement = infer_placement(run, model)
    budget = budget_mib if budget_mib is not None else infer_budget(run, model, placement)
    if budget is None:
        lines = [CheckLine("budget", "unknown (no slots logged, no --moe-cache-mib in the log)", "-", comparable=False)]
        if not run.starts and run.warnings:
            smallest = min_budget_mib(model, placement)
            lines.append(CheckLine("refused to start", "yes", f"below {smallest} MiB it refuses", comparable=False))
            lines.append(
                CheckLine(
                    "groups warned too small", str(len(run.warnings)), str(len(plan_cache(model, 1, placement).groups))
                )
            )
        return None, lines
    predicted = dict(_plan_lines(plan_cache(model, budget, placement)))
    logged = dict(_logged_lines(run))
    keys = list(dict.fromkeys([*logged, *predicted]))
    return budget, [CheckLine(k, logged.get(k, "(not logged)"), predicted.get(k, "(not predicted)")) for k in keys]
