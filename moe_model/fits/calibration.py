"""Fit the time model's machine-independent parameters on every measured machine at once, and say how well
it transfers: leave one machine out, fit on the rest, predict it through the same `predict` a user runs.

The per-machine fit behind `python -m moe_model calibrate LOG...` (a user's own logs) is moe_model.fits.machine_fit.

`scripts/calibrate.py` writes moe_model/data/calibration.json, which predictions read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from moe_model.fits.points import Point, measured_kind_tps
from moe_model.fitting import least_squares
from moe_model.pricing.curve import price_traffic
from moe_model.resources import data_path
from moe_model.speed.hardware import Hardware
from moe_model.speed.range_inputs import NO_RANGE, RangeInputs
from moe_model.speed.rates import DECODE_PARAMS, PARAM_BOUNDS, PREFILL_PARAMS, PRIOR_WIDTH, TimeParams
from moe_model.speed.time_model import Prediction, range_verdict

CALIBRATION_JSON = data_path("calibration.json")
UNCERTAINTY_QUANTILE = 0.68  # the range a prediction carries: ~one standard error of the left-out machines


def _predicted(p: Point, params: TimeParams, hw: Hardware | None = None, ranges: RangeInputs = NO_RANGE) -> Prediction:
    """The point's setting priced as every page and command prices one (pricing.curve), with `ranges`' range."""
    return price_traffic(p.model, hw or p.hw, params, p.scenario, p.layout, p.traffic, ranges)


def decode_errors(points: Sequence[Point], params: TimeParams, hw: Hardware | None = None) -> dict[str, float]:
    """Relative error of the predicted decode t/s at each point with a measured decode speed (of the requests
    the point timed: a server's first request, or the steady state)."""
    return {
        p.name: measured_kind_tps(p, _predicted(p, params, hw))[0] / p.decode_tps - 1 for p in points if p.decode_tps
    }


def prefill_errors(points: Sequence[Point], params: TimeParams) -> dict[str, float]:
    return {p.name: measured_kind_tps(p, _predicted(p, params))[1] / p.prefill_tps - 1 for p in points if p.prefill_tps}


def _machine_weights(points: Sequence[Point], attr: str) -> dict[str, float]:
    """Each machine counts once, however many rows it has."""
    counts: dict[str, int] = {}
    for p in points:
        if getattr(p, attr):
            counts[p.machine] = counts.get(p.machine, 0) + 1
    return {p.name: 1 / counts[p.machine] for p in points if getattr(p, attr)}


PRIOR_WEIGHT = 0.15  # a prior's pull: a factor-of-its-width change costs as much as a machine 15 % off everywhere


def _fit_fields(start, names, bounds, errors: Callable[[object], dict[str, float]], weights: dict[str, float],
                priors: dict[str, tuple[float, float]] | None = None):  # fmt: skip
    """Least squares on weighted log errors over the named fields of a frozen dataclass, in log space;
    `priors` (name: (value, log width)) add a penalty pulling each field towards its expected value."""
    lower = np.log([bounds[n][0] for n in names])
    upper = np.log([bounds[n][1] for n in names])
    keys = list(weights)
    root_w = np.sqrt([weights[k] for k in keys])

    def at(x: np.ndarray):
        return replace(start, **{n: float(np.exp(v)) for n, v in zip(names, x, strict=True)})

    prior = [(i, np.log(priors[n][0]), priors[n][1]) for i, n in enumerate(names) if n in (priors or {})]

    def residuals(x: np.ndarray) -> np.ndarray:
        e = errors(at(x))
        pull = [PRIOR_WEIGHT * (x[i] - centre) / width for i, centre, width in prior]
        return np.concatenate([root_w * np.log1p(np.array([e[k] for k in keys])), pull])

    x0 = np.log([max(getattr(start, n), bounds[n][0]) for n in names])
    return at(least_squares(residuals, x0, lower, upper))


PREFILL_WEIGHT = 0.5  # a machine's prompt errors count half as much as its decode errors


def _joint_errors(points: Sequence[Point], params: TimeParams) -> dict[str, float]:
    """Decode ("d:" + name) and prompt ("p:" + name) errors of every point from one prediction each."""
    out = {}
    for p in points:
        decode, prefill = measured_kind_tps(p, _predicted(p, params))
        if p.decode_tps:
            out["d:" + p.name] = decode / p.decode_tps - 1
        if p.prefill_tps:
            out["p:" + p.name] = prefill / p.prefill_tps - 1
    return out


def fit(points: Sequence[Point], start: TimeParams | None = None) -> TimeParams:
    """Fit every parameter at once on squared log errors of decode and prompt speeds, machines weighted equally
    (prompt errors at PREFILL_WEIGHT): uploads, copies and the CPU path serve both."""
    params = start or TimeParams()
    priors = {name: (getattr(TimeParams(), name), width) for name, width in PRIOR_WIDTH.items()}
    points = [p for p in points if p.fitted]
    weights = {"d:" + k: w for k, w in _machine_weights(points, "decode_tps").items()}
    weights |= {"p:" + k: PREFILL_WEIGHT * w for k, w in _machine_weights(points, "prefill_tps").items()}
    errors = lambda q: _joint_errors(points, q)  # noqa: E731
    return _fit_fields(params, DECODE_PARAMS + PREFILL_PARAMS, PARAM_BOUNDS, errors, weights, priors)


def cache_verdicts(points: Sequence[Point], params: TimeParams, rel_error: float) -> list[dict]:
    """For each cache point with a measured no-cache control: the measured verdict, and the one the two ranges a
    user is shown give (the time model's error and the host parts the machine leaves undescribed)."""
    by_name = {p.name: p for p in points}
    rows = []
    for p in points:
        control = by_name.get(p.control or "")
        if not (control and p.decode_tps and control.decode_tps):
            continue
        with_cache, without = (_measured_range(q, params, RangeInputs(rel_error)) for q in (p, control))
        rows.append(
            {
                "point": p.name,
                "control": control.name,
                "measured_ratio": p.decode_tps / control.decode_tps,
                "predicted_ratio": with_cache[0] / without[0],
                "measured": (measured := "helps" if p.decode_tps > control.decode_tps else "hurts"),
                "predicted": (predicted := range_verdict(with_cache[1], without[1])),
                "ok": predicted in (measured, "too close to call"),
            }
        )
    return rows


def _measured_range(p: Point, params: TimeParams, ranges: RangeInputs) -> tuple[float, tuple[float, float]]:
    """The speed of the requests the point timed, and its range (moved with a first request's speed)."""
    pred = _predicted(p, params, ranges=ranges)
    tps = measured_kind_tps(p, pred)[0]
    scale = tps / pred.decode_tps
    return tps, (pred.decode_tps_range[0] * scale, pred.decode_tps_range[1] * scale)


@dataclass(frozen=True)
class MachineReport:
    """One machine predicted by a fit that never saw it."""

    machine: str
    n_points: int
    median_abs_error: float
    worst_error: float
    errors: dict[str, float]
    prefill_errors: dict[str, float]
    params: TimeParams  # fitted without this machine


@dataclass(frozen=True)
class RangeCoverage:
    """How often the range a plain prediction carries holds what was measured, on machines left out of the fit."""

    covered: int
    points: int
    median_half_width: float  # the range's half width in log terms, as a fraction (0.25: about x/÷ 1.25)

    @property
    def share(self) -> float:
        return self.covered / self.points if self.points else float("nan")


def _left_out_ranges(
    points: Sequence[Point], reports: Sequence[MachineReport], rel_error: float, spread_of: Callable[[Point], float]
) -> list[tuple[Point, float, float]]:
    """Each left-out decode point with the range its machine's left-out fit gives it (the time model's error, its
    routing's spread and the host parts its machine leaves undescribed), moved with a first request's speed."""
    by_machine = {r.machine: r.params for r in reports}
    decoded = [p for p in points if p.decode_tps and p.machine in by_machine]
    ranges = [RangeInputs(rel_error, spread_of(p)) for p in decoded]
    return [(p, *_measured_range(p, by_machine[p.machine], r)[1]) for p, r in zip(decoded, ranges, strict=True)]


def range_coverage(
    points: Sequence[Point], reports: Sequence[MachineReport], rel_error: float, spread_of: Callable[[Point], float]
) -> RangeCoverage:
    """How many left-out decode points their range holds, and its median half width (_left_out_ranges)."""
    ranges = _left_out_ranges(points, reports, rel_error, spread_of)
    inside = sum(lo <= p.decode_tps <= hi for p, lo, hi in ranges)
    widths = [float(np.sqrt(hi / lo)) - 1 for _, lo, hi in ranges]
    return RangeCoverage(inside, len(ranges), float(np.median(widths)) if widths else float("nan"))


def leave_one_machine_out(
    points: Sequence[Point], start: TimeParams | None = None, progress=None
) -> list[MachineReport]:
    """Per machine: fit on the others, predict its points."""
    machines = sorted({p.machine for p in points})
    reports, everyone = [], None
    for i, machine in enumerate(machines):
        if any(p.fitted for p in points if p.machine == machine):
            params = fit([p for p in points if p.machine != machine], start)
        else:  # a machine only ever predicted: the fit without it is the fit on every machine
            everyone = everyone or fit(points, start)
            params = everyone
        own = [p for p in points if p.machine == machine]
        errors = decode_errors(own, params)
        abs_errors = np.abs(list(errors.values())) if errors else np.array([np.nan])
        worst = max(errors.values(), key=abs) if errors else float("nan")
        reports.append(
            MachineReport(
                machine, len(errors), float(np.median(abs_errors)), worst, errors, prefill_errors(own, params), params
            )
        )
        if progress:
            progress((i + 1) / len(machines))
    return reports


def relative_error(errors: Sequence[float]) -> float:
    """The uncertainty a prediction carries: a quantile of |error| over left-out points."""
    return float(np.quantile(np.abs(errors), UNCERTAINTY_QUANTILE)) if len(errors) else 0.25


def load_calibration(path: Path = CALIBRATION_JSON) -> dict:
    return json.loads(path.read_text())


@dataclass(frozen=True)
class TimeModel:
    """The parameters predictions use, the relative error they carry (decode; prompt: `prefill_rel_error`, 0 where
    none was measured) and where both come from."""

    params: TimeParams
    rel_error: float
    source: str
    prefill_rel_error: float = 0.0

    def ranges(self, spreads: tuple[float, float] = (0.0, 0.0)) -> RangeInputs:
        """The range a decode prediction carries: this model's error, and a routing's `spreads` (none: replayed)."""
        return RangeInputs.of(self.rel_error, spreads)


def prefill_relative_error(record: dict) -> float:
    """The prompt speed's uncertainty: the decode range's quantile (UNCERTAINTY_QUANTILE) of |error| over every
    left-out prompt point of a calibration record (0.0 when it holds none)."""
    reports = record.get("leave_one_machine_out", {}).values()
    errors = np.abs([e for r in reports for e in r.get("prefill_errors", {}).values()])
    return float(np.quantile(errors, UNCERTAINTY_QUANTILE)) if len(errors) else 0.0


def default_time_model(path: Path = CALIBRATION_JSON) -> TimeModel:
    record = load_calibration(path)
    return TimeModel(
        TimeParams(**record["params"]),
        record["rel_error"],
        f"fitted across {len(record['machines'])} measured machines; ±{100 * record['rel_error']:.0f} % is the "
        "68th percentile of the error on machines left out of the fit",
        prefill_relative_error(record),
    )


@dataclass(frozen=True)
class PromptSpeed:
    """A prediction's prompt speed and time to first token (steady state, a model), each with the range of the
    prompt error on machines left out of the fit; ranges equal the value where no error was measured."""

    prefill_tps: float
    prefill_tps_range: tuple[float, float]
    ttft_s: float
    ttft_s_range: tuple[float, float]


def prompt_speed(pred: Prediction, prefill_rel_error: float) -> PromptSpeed:
    """The prompt figures every page shows beside decode: the prediction's, with ±prefill_rel_error on the speed
    (the time to first token, which that speed sets, gets the matching range)."""
    fast, slow = 1 + prefill_rel_error, 1 - prefill_rel_error
    longest = pred.ttft_s / slow if slow > 0 else float("inf")
    return PromptSpeed(
        pred.prefill_tps, (pred.prefill_tps * slow, pred.prefill_tps * fast), pred.ttft_s, (pred.ttft_s / fast, longest)
    )
