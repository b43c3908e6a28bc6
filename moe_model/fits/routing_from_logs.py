"""A user's logs drive the routing: each parsed run's decode hit rate at its budget becomes a point the
synthetic routing is fitted to (routing.logged), so predictions at the logged budgets use the logged rates
instead of the model's preset."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from moe_model.fits.points import decode_hit_rate, scenario_of_run
from moe_model.llama.server_warm_up import start_up_probe
from moe_model.readers.logs import LogRun
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.logged import LoggedHitRate, LogRouting, fit_to_logs
from moe_model.routing.synthetic import preset_for
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import resolve
from moe_model.speed.traffic import build_kernel


def _requests(run: LogRun) -> int:
    return max(1, sum(1 for t in run.timings if t.decode_tokens))


def _decode_tokens(run: LogRun, model: ModelSpec, cached_layers: int) -> int:
    """Generated tokens: from the request timings, else from the lookups (k distinct experts per cached layer)."""
    if run.decode_tokens:
        return run.decode_tokens
    stats = run.decode_stats
    return round((stats.hits + stats.misses) / max(1, cached_layers * model.n_expert_used))


def logged_hit_rates(
    runs: Iterable[LogRun], model: ModelSpec, hw: Hardware, source: str, build: int | None = None
) -> list[LoggedHitRate]:
    """The decode hit rate (warm-up removed) of every run that started with a cache and logged its statistics;
    each named `source#run`, as log_points names them, with the replacement policy of the run's build
    (measurements.run_build: logged, else its cache size line's era, else `build`, else mainline)."""
    out = []
    for run in runs:
        stats = run.decode_stats  # b11549's teardown line, else a newer build's (readers.logs.OtherCacheLines)
        if not (run.starts and stats and stats.hits + stats.misses):
            continue
        sc = scenario_of_run(run, model, build)
        if not sc.budget_mib:
            continue
        layout = resolve(model, hw, sc)
        cached = int(layout.cached_mask(model, sc.tokens_per_ubatch).sum())
        if not cached:
            continue
        rate = decode_hit_rate(stats, model, layout, sc.build)
        tokens = _decode_tokens(run, model, cached)
        if tokens:
            name = f"{source}#{run.index + 1}"
            kernel = sc.kernel() or build_kernel(sc)  # a CPU share's policy replays per budget: its build's lists
            out.append(
                LoggedHitRate(
                    name,
                    sc.budget_mib,
                    layout.placement,
                    rate,
                    tokens,
                    _requests(run),
                    sc.concurrency,
                    kernel,
                    start_up_probe(sc.build),
                )  # fmt: skip
            )
    return out


def routing_from_logs(
    model: ModelSpec,
    logs: Sequence[tuple[str, Sequence[LogRun]]],
    hw: Hardware,
    build: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> LogRouting:
    """The routing fitted to these logs' decode hit rates ((name, parsed runs) each), from the model's preset,
    each log simulated through its build's policy (measurements.run_build: `build` only where the log shows none)."""
    points = [p for name, runs in logs for p in logged_hit_rates(runs, model, hw, name, build)]
    fitted = fit_to_logs(model, points, preset_for(model), progress=progress)
    return replace(fitted, given=len(logs), not_used=unused_logs(logs, model, hw, build))


def unused_logs(
    logs: Sequence[tuple[str, Sequence[LogRun]]], model: ModelSpec, hw: Hardware, build: int | None = None
) -> tuple[tuple[str, str], ...]:
    """(name, why) of each log no decode hit rate comes from (a log of another model: given with no runs)."""
    return tuple(
        (name, _why_unused(runs, model, build))
        for name, runs in logs
        if not logged_hit_rates(runs, model, hw, name, build)
    )


def _why_unused(runs: Sequence[LogRun], model: ModelSpec, build: int | None) -> str:
    """Why none of these runs gives a decode hit rate, in words (logged_hit_rates' conditions, in its order)."""
    if not runs:
        return f"no run of {model.name} in it"
    reasons = []
    for run in runs:
        stats = run.decode_stats
        if not run.starts:
            reasons.append("the server did not start")
        elif not scenario_of_run(run, model, build).budget_mib:
            reasons.append("no MoE cache (--moe-cache-mib 0 or none), so no hit rate")
        elif not (stats and stats.hits + stats.misses):
            reasons.append("no hit rates logged (llama-server prints them when it is stopped cleanly)")
        else:
            reasons.append("no decoded token went through a cached layer")
    return "; ".join(dict.fromkeys(reasons))
