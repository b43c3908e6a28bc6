"""The Logs page's check of each run against the range predicted before calibration, cached per log file: a log
uploaded once is priced once per model, machine, time model and build (answers.before_calibration)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from moe_model.answers.before_calibration import BeforeCalibration, check_log, joined
from moe_model.fits.calibration import TimeModel
from moe_model.limits import MAX_CHECKED_RUNS
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Scenario
from moe_model.workload import Workload
from ui.cached import app_cached, cached_log, cached_synthetic


def checked_logs(
    files: Sequence[tuple[str, bytes]], model: ModelSpec, hw: Hardware, time_model: TimeModel, build: int | None
) -> BeforeCalibration:
    """Every run of these files ((name, bytes) each) beside its range predicted before calibration, as one table."""
    work = partial(cached_synthetic, model)  # the preset's workload Explore replays, generated once for both
    parts: list[BeforeCalibration] = []
    for name, data in files:
        left = MAX_CHECKED_RUNS - sum(len(p.runs) for p in parts)  # the runs priced stay bounded whatever the upload
        parts.append(_checked_log(name, data, model, hw, time_model, build, left, _workload_for=work))
    return joined(parts, parts[0].predicted_with if parts else "")


@app_cached("Pricing each run as it was predicted before calibration...", kernels=True)
def _checked_log(
    name: str,
    data: bytes,
    model: ModelSpec,
    hw: Hardware,
    time_model: TimeModel,
    build: int | None,
    max_runs: int,
    _workload_for: Callable[[Scenario], Workload],
) -> BeforeCalibration:
    return check_log(name, cached_log(data), model, hw, time_model, build, _workload_for, max_runs)
