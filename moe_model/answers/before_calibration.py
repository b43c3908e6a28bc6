"""Each logged run beside the range predicted for its own settings before calibration: did the run land inside it?

A run's settings are read from its log as `calibrate` reads them (fits.points.log_points: placement, budget, streams,
context, load mode, -fa, the build, the timed requests' prompt and length). They are priced as `predict` prices a
setting before any log is used: the default time model (the one with a host record where the user gave their CPU
run, as `predict --host` does), the model's routing preset replayed by the build's policy, and the range those carry
(the time model's left-out error, the preset's hit-rate spread, the host parts left undescribed). A run timed on its
server's first request is set beside the first-request figure and its range, the others beside the steady state.
"Outside" says how far the measured speed lies past the nearer end of the range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moe_model.errors import MoeModelError
from moe_model.fits.calibration import TimeModel, default_time_model
from moe_model.fits.host_fit import host_time_model
from moe_model.fits.log_timings import request_label
from moe_model.fits.machine_fit import FITTED_TERMS, MODEL_FIELDS
from moe_model.fits.points import Point, log_points
from moe_model.limits import MAX_CHECKED_RUNS
from moe_model.pricing.curve import WorkloadFor, curve
from moe_model.pricing.workloads import SyntheticSource
from moe_model.readers.logs import LogRun
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.synthetic import preset_for
from moe_model.speed.hardware import Hardware, preset
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.time_model import Prediction


@dataclass(frozen=True)
class SpeedCheck:
    """A measured speed beside the one predicted before calibration and that prediction's range (t/s)."""

    measured_tps: float
    predicted_tps: float
    low_tps: float
    high_tps: float

    @property
    def off(self) -> float:
        """How far past the range the measured speed lies, as a fraction of the nearer end: 0 inside, > 0 above the
        high end, < 0 below the low end."""
        if self.measured_tps > self.high_tps:
            return self.measured_tps / self.high_tps - 1
        if self.measured_tps < self.low_tps:
            return self.measured_tps / self.low_tps - 1
        return 0.0

    @property
    def inside(self) -> bool:
        return bool(self.low_tps <= self.measured_tps <= self.high_tps)

    @property
    def words(self) -> str:
        """'inside', or 'outside (12 % above)' / 'outside (40 % below)': past the nearer end of the range."""
        if self.inside:
            return "inside"
        return f"outside ({100 * abs(self.off):.0f} % {'above' if self.off > 0 else 'below'})"

    def as_dict(self) -> dict:
        return {
            "measured_tps": self.measured_tps,
            "predicted_tps": self.predicted_tps,
            "range_tps": [self.low_tps, self.high_tps],
            "inside": self.inside,
            "off": self.off,
        }


@dataclass(frozen=True)
class RunCheck:
    """One logged run: its settings, its measured decode (and one stream's prompt) speed, each beside the range
    predicted for those settings before calibration."""

    name: str  # "FILE#RUN", as calibrate names it
    budget_mib: int
    concurrency: int
    build: int
    request: str  # "first request" (the server's first after start) or "steady state" (its later requests)
    decode: SpeedCheck
    prompt: SpeedCheck | None  # None: several streams (their prompt speeds are not one stream's)
    logged_hit_rate: float | None  # the steady hit rate its log counted (None: no cache, or none logged)
    predicted_hit_rate: float | None  # the routing preset's, replayed by the build's policy

    def as_dict(self) -> dict:
        return {
            "run": self.name,
            "budget_mib": self.budget_mib,
            "concurrency": self.concurrency,
            "build": self.build,
            "request": self.request,
            "decode": self.decode.as_dict(),
            "prompt": self.prompt.as_dict() if self.prompt else None,
            "logged_hit_rate": self.logged_hit_rate,
            "predicted_hit_rate": self.predicted_hit_rate,
        }


@dataclass(frozen=True)
class NotChecked:
    """A run (or a whole file) with no row, and why in plain words."""

    name: str
    why: str


@dataclass(frozen=True)
class BeforeCalibration:
    """Every run checked against the range predicted before calibration, the runs that could not be, and what the
    prediction was made with."""

    runs: tuple[RunCheck, ...]
    not_checked: tuple[NotChecked, ...]
    predicted_with: str  # the time model, the routing and the machine, in words

    @property
    def inside(self) -> int:
        return sum(r.decode.inside for r in self.runs)

    @property
    def summary(self) -> str:
        """One line: how many runs' decode fell inside (and how many one-stream prompts)."""
        if not self.runs:
            return "No run to check against the range predicted before calibration."
        prompts = [r.prompt for r in self.runs if r.prompt]
        line = f"{self.inside} of {len(self.runs)} runs fell inside the range predicted before calibration (decode t/s)"
        if prompts:
            line += f"; prompt t/s: {sum(p.inside for p in prompts)} of {len(prompts)}"
        return line + "."

    def as_dict(self) -> dict:
        return {
            "summary": self.summary,
            "inside": self.inside,
            "runs": [r.as_dict() for r in self.runs],
            "not_checked": [{"run": n.name, "why": n.why} for n in self.not_checked],
            "predicted_with": self.predicted_with,
        }


def uncalibrated(hw: Hardware) -> Hardware:
    """The machine without what a calibration on logs fitted: its terms back to its preset's (stated or measured
    there), else to the time model's own."""
    if not hw.calibrated:
        return hw
    try:
        base = preset(hw.name)
    except MoeModelError:
        base = None
    return hw.with_changes(**{term: getattr(base, term, None) for term in FITTED_TERMS})


def time_model_before(host_record: bool) -> TimeModel:
    """The time model a prediction made before calibration carries: the default, or with the user's CPU run the one
    whose error was left out of a fit with a host record (as `predict --host`)."""
    return host_time_model() if host_record else default_time_model()


def _why_not(run: LogRun, model: ModelSpec) -> str | None:
    """Why a run gets no row (None: it gets one)."""
    if run.program == "unknown":
        return "no llama-server or llama-cli run (no start-up lines)"
    logged = {k: run.model.get(k) for k in MODEL_FIELDS if run.model.get(k) is not None}
    if not logged:
        return "the log does not name its model (start llama-server with -lv 4)"
    if diffs := [f"{k} {v} (header: {getattr(model, k)})" for k, v in logged.items() if v != getattr(model, k)]:
        return f"another model than {model.name}: {', '.join(diffs)}"
    if not run.starts:
        return "did not start"
    if not any(t.decode_tps for t in run.timings):
        return "timed no request (no decode speed in the log)"
    return None


def _speed(measured: float, tps: float, rng: tuple[float, float]) -> SpeedCheck:
    return SpeedCheck(float(measured), float(tps), float(rng[0]), float(rng[1]))  # plain floats: JSON and repr


def _check(point: Point, pred: Prediction, prefill_rel_error: float) -> RunCheck:
    """The point's measured speeds beside the prediction of the requests it timed (a first request's own figures)."""
    first = pred.first_request if point.request == "first" else None
    decode = _speed(point.decode_tps, *((first.decode_tps, first.decode_tps_range) if first else
                                        (pred.decode_tps, pred.decode_tps_range)))  # fmt: skip
    prompt = None
    if point.prefill_tps:
        tps = pred.first_request.prefill_tps if point.prefill_first and pred.first_request else pred.prefill_tps
        prompt = _speed(point.prefill_tps, tps, (tps * (1 - prefill_rel_error), tps * (1 + prefill_rel_error)))
    sc = point.scenario
    logged = point.traffic.hit_rate if point.hit_source.startswith("measured") and sc.budget_mib else None
    predicted = pred.hit_rate if sc.budget_mib else None
    return RunCheck(
        point.name, sc.budget_mib, sc.concurrency, sc.build, request_label(point.request == "first"), decode, prompt,
        None if logged is None else float(logged), None if predicted is None else float(predicted),
    )  # fmt: skip


def check_log(
    source: str,
    runs: Sequence[LogRun],
    model: ModelSpec,
    hw: Hardware,
    time_model: TimeModel,
    build: int | None,
    workload_for: WorkloadFor | None = None,
    max_runs: int = MAX_CHECKED_RUNS,
) -> BeforeCalibration:
    """Every run of one log beside the range predicted for its settings before calibration (module docstring);
    `build` for a log that names none; `workload_for` the preset's workload batched as a scenario's server would
    (the app passes its cached one, which Explore shares). A run that cannot be priced, or one past `max_runs`
    priced ones, is named with the reason, never dropped."""
    ranges, work = time_model.ranges(preset_for(model).spreads), workload_for or SyntheticSource(model)
    checks: list[RunCheck] = []
    skipped: list[NotChecked] = []
    for run in runs:
        name = f"{source}#{run.index + 1}"
        if len(checks) >= max_runs:
            skipped.append(NotChecked(name, f"beyond this tool's limit of {MAX_CHECKED_RUNS} runs checked at once"))
        elif why := _why_not(run, model):
            skipped.append(NotChecked(name, why))
        else:
            found = _priced(run, name, source, _Pricing(model, hw, time_model, build, work, ranges))
            (checks if isinstance(found, RunCheck) else skipped).append(found)
    return BeforeCalibration(tuple(checks), tuple(skipped), _predicted_with(model, hw, time_model))


@dataclass(frozen=True, eq=False)
class _Pricing:
    """What every run of a log is priced with before calibration."""

    model: ModelSpec
    hw: Hardware
    time_model: TimeModel
    build: int | None
    work: WorkloadFor
    ranges: RangeInputs


def _priced(run: LogRun, name: str, source: str, how: _Pricing) -> RunCheck | NotChecked:
    """One run that timed a request beside its prediction, or why it could not be priced."""
    try:
        (point,) = log_points([run], how.model, how.hw, source, how.hw.name, build=how.build, steady=True)
        sc = point.scenario
        priced = curve(how.model, how.hw, how.time_model.params, sc, [sc.budget_mib], how.work, how.ranges)
    except MoeModelError as err:
        return NotChecked(name, str(err))
    pred = priced.points[0].prediction
    if not pred.starts:
        return NotChecked(name, f"the tool predicts it does not start ({pred.error})")
    return _check(point, pred, how.time_model.prefill_rel_error)


def _predicted_with(model: ModelSpec, hw: Hardware, time_model: TimeModel) -> str:
    preset = preset_for(model)
    return (
        f"the {hw.name} as the tool knew it before these logs, the time model {time_model.source}, and the "
        f"{preset.name} routing preset (±{preset.spread_points:.1f} hit-rate points)"
    )


def before_calibration(
    logs: Sequence[tuple[str, Sequence[LogRun]]],
    model: ModelSpec,
    hw: Hardware,
    time_model: TimeModel,
    build: int | None = None,
    workload_for: WorkloadFor | None = None,
) -> BeforeCalibration:
    """check_log over several logs ((name, parsed runs) each), as one table."""
    work = workload_for or SyntheticSource(model)  # one synthetic routing for every log
    parts: list[BeforeCalibration] = []
    for name, runs in logs:
        left = MAX_CHECKED_RUNS - sum(len(p.runs) for p in parts)
        parts.append(check_log(name, runs, model, hw, time_model, build, work, left))
    return joined(parts, _predicted_with(model, hw, time_model))


def joined(parts: Sequence[BeforeCalibration], predicted_with: str) -> BeforeCalibration:
    """Several logs' checks as one."""
    return BeforeCalibration(
        tuple(r for p in parts for r in p.runs), tuple(n for p in parts for n in p.not_checked), predicted_with
    )
