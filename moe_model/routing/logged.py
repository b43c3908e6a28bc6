"""Routing fitted to a user's own logs: the synthetic knobs whose simulated decode hit rate matches each log's.

A llama-server -lv 4 log measures the real routing's decode hit rate at the budget it ran. Those points
(budget, placement, hit rate) pin the synthetic model of routing for that model: the knobs are fitted so
that a run like the logged ones (same placement, streams, decode tokens per request, after the start-up warm-up)
simulated through the replacement policy of the logged build (the exact LRU before b12170, ClassLRU from it)
gives each logged hit rate. Still a model of routing: its spread is the
larger of the in-fit and the leave-one-log-out error, in hit-rate points; a single logged point carries the error
measured by fitting one log and predicting the others (one_log_errors, scripts/one_log_spread.py), as a factor on
the misses.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.fitting import coordinate_search
from moe_model.limits import MAX_LOG_ROUTING_TOKENS
from moe_model.llama.batching import build_workload
from moe_model.llama.simulate import LRU_KERNEL, ClassStats, Kernel, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import ModelSpec
from moe_model.resources import data_path
from moe_model.routing.synthetic import BOUNDS, RANDOM_WEIGHT_MODELS, Knobs, RoutingPreset, Shape, generate
from moe_model.workload import Batching, Workload

LOG_ROUTING_NAME = "your logs"
ONE_LOG_SPREAD_JSON = data_path("one_log_spread.json")  # written by scripts/one_log_spread.py


@dataclass(frozen=True)
class LoggedHitRate:
    """One log's decode hit rate at its budget (warm-up removed) and the run that measured it."""

    name: str
    budget_mib: int
    placement: Placement  # as llama.cpp resolved it (--fit turned into its layer count)
    hit_rate: float  # fraction
    decode_tokens: int  # generated tokens of every request together
    requests: int
    concurrency: int = 1
    kernel: Kernel = LRU_KERNEL  # the replacement policy of the build that logged it
    start_up_probe: bool = False  # the build decoded the seq_rm probe at start-up (llama.server_warm_up)

    def __post_init__(self) -> None:
        if not (0.0 <= self.hit_rate <= 1.0 and self.budget_mib > 0 and self.decode_tokens > 0 and self.requests > 0):
            raise WorkloadError(f"a logged hit rate needs a budget, decode tokens and a rate in 0..1, got {self}")

    @property
    def seq_len(self) -> int:
        """Decode tokens per request."""
        return max(1, round(self.decode_tokens / self.requests))


@dataclass(frozen=True)
class RunLength:
    """How long the logged runs decoded: what a simulation `like the logs` replays."""

    decode_tokens: int
    seq_len: int

    @classmethod
    def of(cls, points: Sequence[LoggedHitRate]) -> RunLength:
        """The median logged run, capped at MAX_LOG_ROUTING_TOKENS so that a fit stays within seconds."""
        tokens = int(np.median([p.decode_tokens for p in points]))
        seq_len = int(np.median([p.seq_len for p in points]))
        tokens = min(tokens, MAX_LOG_ROUTING_TOKENS)
        return cls(tokens, min(seq_len, tokens))


@dataclass(frozen=True)
class LogRouting:
    """Synthetic routing fitted to a user's logs, with each logged point and how well the fit reproduces it.

    spread_points: the larger of the in-fit and the leave-one-log-out RMS error (hit-rate points), for
    prediction ranges. A single logged point cannot be left out: it carries its in-fit error and `miss_spread`, the
    measured error of one log predicting the same model at other budgets as a factor on the misses (at 96 % hits a
    factor 2 is -4/+2 points, at 60 % far more points): one_log_miss_spread, measured on a trained model's real
    routing and, for the project's random-weight models, on their logs.
    """

    knobs: Knobs
    spread_points: float
    fit_points: float  # RMS of simulated minus logged hit rate, all logs in the fit (points)
    left_out_points: dict[str, float | None]  # each log predicted by a fit on the others (points, signed)
    simulated: dict[str, float]  # each log's hit rate as the fitted routing simulates it (fraction)
    points: tuple[LoggedHitRate, ...]
    length: RunLength
    start: RoutingPreset  # the preset the fit started from
    miss_spread: float = 0.0  # one log: ± log factor on the misses at other budgets (one_log_miss_spread)
    name: str = LOG_ROUTING_NAME
    given: int = 0  # logs the user gave (0: those the points come from)
    not_used: tuple[tuple[str, str], ...] = ()  # (log, why) of each given log no hit rate came from

    @property
    def spreads(self) -> tuple[float, float]:
        """The routing's spread: ± hit-rate points, and the misses x/÷ e^this at other budgets (one log)."""
        return self.spread_points, self.miss_spread

    @property
    def fitted_to(self) -> str:
        """'fitted to your 6 logs', or 'fitted to 5 of your 6 logs' where some gave no hit rate (files, not runs)."""
        n = len({p.name.rpartition("#")[0] or p.name for p in self.points})
        if self.given > n:
            return f"fitted to {n} of your {self.given} logs"
        return f"fitted to your {n} log{'s' if n != 1 else ''}"

    @property
    def unused_words(self) -> str:
        """The given logs no hit rate came from, each with why ('' when every log was used)."""
        return "; ".join(f"{name}: {why}" for name, why in self.not_used)

    @property
    def match(self) -> str:
        return self.fitted_to

    def describe(self) -> str:
        """One line for a caption: where the routing comes from and its spread."""
        if self.miss_spread:
            spread = f"misses x/÷{np.exp(self.miss_spread):.2f} at other budgets"
        else:
            spread = f"±{self.spread_points:.1f} hit-rate points"
        unused = f" (not used: {self.unused_words})" if self.not_used else ""
        return f"{self.fitted_to}{unused}, {spread}: {self.knobs.words}"

    def workload(self, model: ModelSpec, batching: Batching, seed: int = 0) -> Workload:
        """A run like the logged ones (their decode length, a pool only the start-up warm-up filled), batched; its
        replays leave the warm-up's lookups out of the decode, as the logged rates the knobs were fitted to do."""
        shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
        trace = generate(
            shape, self.knobs, self.length.decode_tokens, self.length.seq_len, seed, f"synthetic ({self.describe()})"
        )
        return replace(build_workload(trace, batching, model.n_expert), warm_up_in_decode=False)


def simulated_hit_rates(
    model: ModelSpec, knobs: Knobs, points: Sequence[LoggedHitRate], length: RunLength, seed: int = 0
) -> dict[str, float]:
    """Each point's decode hit rate with these knobs: one simulation per placement and stream count, all its
    budgets at once (through the policy of the build that logged it), after llama-server's start-up (the warm-up,
    and the seq_rm probe where that build makes it), which fills the pool, with its lookups left out, as the logged
    rates are."""
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    trace = generate(shape, knobs, length.decode_tokens, length.seq_len, seed)
    groups: dict[tuple[Placement, int, Kernel, bool], list[LoggedHitRate]] = {}
    for p in points:
        groups.setdefault((p.placement, p.concurrency, p.kernel, p.start_up_probe), []).append(p)
    out = {}
    for (placement, concurrency, kernel, probe), members in groups.items():
        work = build_workload(trace, Batching(concurrency, start_up_probe=probe), model.n_expert)
        budgets = sorted({p.budget_mib for p in members})
        runs = simulate_budgets(model, work, budgets, placement, kernel)
        warm_ups = simulate_budgets(model, work.warm_up(), budgets, placement, kernel)  # on an empty pool: first
        by_budget = {b: decode_rate(r.small, w.small) for b, r, w in zip(budgets, runs, warm_ups, strict=True)}
        for p in members:
            out[p.name] = by_budget[p.budget_mib]
    return out


def random_weights(model: ModelSpec) -> bool:
    """The project's random-weight ground-truth models, whose routing is close to uniform (routing.synthetic)."""
    return any(name in model.name for name in RANDOM_WEIGHT_MODELS)


def one_log_miss_spread(model: ModelSpec, path: Path = ONE_LOG_SPREAD_JSON) -> float:
    """RMS of log(simulated / logged misses) of a routing fitted to one log predicting the same model's hit rates at
    other budgets (scripts/one_log_spread.py): measured on a trained model's real routing (GPT-OSS-20B), or on the
    random-weight ground-truth logs for those models."""
    kind = "random_weight" if random_weights(model) else "trained"
    return float(json.loads(path.read_text())["miss_log_rms"][kind])


def decode_rate(run: ClassStats, warm_up: ClassStats) -> float:
    """The small-ubatch class's hit rate (decode) without the warm-up's lookups."""
    hits, misses = run.hits - warm_up.hits, run.misses - warm_up.misses
    return hits / (hits + misses) if hits + misses else 0.0


MISS_FLOOR = 0.005  # misses of 0 % and of half a point cost about the same: keeps log(0) out of the loss


def miss_loss(simulated: dict[str, float], points: Sequence[LoggedHitRate]) -> float:
    """RMS of log(simulated misses / logged misses): decode time grows with the misses uploaded, so a point
    at 94 % that misses 1 point too many weighs like one at 40 % that misses 10 too many."""
    ratios = [(1 + MISS_FLOOR - simulated[p.name]) / (1 + MISS_FLOOR - p.hit_rate) for p in points]
    return float(np.sqrt(np.mean(np.log(ratios) ** 2)))


def rms_points(simulated: dict[str, float], points: Sequence[LoggedHitRate]) -> float:
    """RMS of simulated minus logged hit rate, in percentage points."""
    return float(np.sqrt(np.mean([(100 * (simulated[p.name] - p.hit_rate)) ** 2 for p in points])))


# a coarse grid every fit (and every leave-one-out fit) shares, then a local search around its best cell
GRID = {"skew": (0.0, 0.5, 1.0, 1.5, 2.0), "working_set": (0.4, 0.6, 0.8, 1.0), "reuse": (0.0, 0.2, 0.4)}
LOCAL = {"skew": 0.25, "working_set": 0.1, "reuse": 0.1, "drift": 0.02}  # half-width of the local search
LOCAL_STEPS = 4  # golden-section steps per knob: each interval shrinks to 15 %


def _grid(start: Knobs) -> list[Knobs]:
    cells = itertools.product(*GRID.values())
    return [start] + [replace(start, **dict(zip(GRID, cell, strict=True))) for cell in cells]


def _local_bounds(knobs: Knobs) -> dict[str, tuple[float, float]]:
    out = {}
    for name, half in LOCAL.items():
        lo, hi = BOUNDS[name]
        value = getattr(knobs, name)
        out[name] = (max(lo, value - half), min(hi, value + half))
    return out


def _check_points(points: Sequence[LoggedHitRate]) -> tuple[LoggedHitRate, ...]:
    if not points:
        raise WorkloadError("no log has a decode hit rate at a budget: nothing to fit the routing to")
    if len({p.name for p in points}) != len(points):
        raise WorkloadError("each logged hit rate needs its own name")
    return tuple(points)


def _fit_each(
    model: ModelSpec,
    points: tuple[LoggedHitRate, ...],
    start: RoutingPreset,
    subsets: Sequence[Sequence[LoggedHitRate]],
    progress: Callable[[float], None] | None = None,
) -> tuple[list[Knobs], Callable[[Knobs], dict[str, float]]]:
    """The knobs fitted to each subset of the points (miss_loss): the best of a coarse grid and the model's preset,
    refined knob by knob around it; and each knob setting's simulated rates of every point, simulated once."""
    length = RunLength.of(points)
    rates: dict[Knobs, dict[str, float]] = {}

    def rates_at(knobs: Knobs) -> dict[str, float]:
        if knobs not in rates:
            rates[knobs] = simulated_hit_rates(model, knobs, points, length)
        return rates[knobs]

    grid = _grid(start.knobs)
    total = len(grid) + len(subsets)
    for i, knobs in enumerate(grid):
        rates_at(knobs)
        if progress:
            progress((i + 1) / total)
    fitted_knobs = []
    for i, subset in enumerate(subsets):
        loss = lambda k, subset=subset: miss_loss(rates_at(k), subset)  # noqa: E731
        best = min(grid, key=loss)
        fitted_knobs.append(coordinate_search(loss, best, _local_bounds(best), tuple(LOCAL), 1, LOCAL_STEPS, digits=4))
        if progress:
            progress((len(grid) + i + 1) / total)
    return fitted_knobs, rates_at


def fit_to_logs(
    model: ModelSpec,
    points: Sequence[LoggedHitRate],
    start: RoutingPreset,
    progress: Callable[[float], None] | None = None,
) -> LogRouting:
    """Knobs whose simulated decode misses match the logged ones (_fit_each); then each log is left out in turn and
    predicted by the same fit on the others, for the spread the routing carries. A few seconds per log on a
    24-layer model."""
    points = _check_points(points)
    length = RunLength.of(points)
    fits = [points] + ([tuple(q for q in points if q is not p) for p in points] if len(points) > 1 else [])
    fitted_knobs, rates_at = _fit_each(model, points, start, fits, progress)
    knobs, fitted = fitted_knobs[0], rates_at(fitted_knobs[0])
    left_out = {p.name: None for p in points} | {
        p.name: 100 * (rates_at(k)[p.name] - p.hit_rate) for p, k in zip(points, fitted_knobs[1:], strict=False)
    }
    in_fit = rms_points(fitted, points)
    held = [v for v in left_out.values() if v is not None]
    spread = max(in_fit, float(np.sqrt(np.mean(np.square(held))))) if held else in_fit
    alone = 0.0 if held else one_log_miss_spread(model)  # one point: the measured error of one log at other budgets
    return LogRouting(knobs, round(spread, 2), round(in_fit, 2), left_out, fitted, points, length, start, alone)


@dataclass(frozen=True)
class CrossPrediction:
    """One log's decode hit rate predicted by the routing fitted to another log of the same model alone."""

    fitted: str  # the log the routing was fitted to
    predicted: str  # the log whose hit rate it predicts
    budget_ratio: float  # the predicted log's budget over the fitted log's
    error_points: float  # simulated minus logged hit rate (points, signed)
    logged_hit_rate: float  # the predicted log's (fraction)

    @property
    def miss_log_error(self) -> float:
        """log(simulated misses / logged misses), as miss_loss weighs them: the unit a single log's spread keeps."""
        simulated = self.logged_hit_rate + self.error_points / 100
        return float(np.log((1 + MISS_FLOOR - simulated) / (1 + MISS_FLOOR - self.logged_hit_rate)))


def one_log_errors(model: ModelSpec, points: Sequence[LoggedHitRate], start: RoutingPreset) -> list[CrossPrediction]:
    """Fit the routing to each point alone, as fit_to_logs fits one log, and predict every other point's hit rate
    with those knobs through the same simulation (the points' run length: RunLength.of all of them)."""
    points = _check_points(points)
    fitted_knobs, rates_at = _fit_each(model, points, start, [(p,) for p in points])
    return [
        CrossPrediction(
            p.name, q.name, q.budget_mib / p.budget_mib, 100 * (rates_at(knobs)[q.name] - q.hit_rate), q.hit_rate
        )
        for p, knobs in zip(points, fitted_knobs, strict=True)
        for q in points
        if q is not p
    ]
