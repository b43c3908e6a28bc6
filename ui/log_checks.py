"""The Logs page's check of each run against the range predicted before calibration, cached per log file: a log
uploaded once is priced once per model, machine, time model and build (answers.before_calibration)."""

from __future__ import annotations

from collections.abc import Sequence

from moe_model.answers.before_calibration import BeforeCalibration, check_log, joined
from moe_model.fits.calibration import TimeModel
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from ui.cached import app_cached, cached_log


def checked_logs(
    files: Sequence[tuple[str, bytes]], model: ModelSpec, hw: Hardware, time_model: TimeModel, build: int | None
) -> BeforeCalibration:
    """Every run of these files ((name, bytes) each) beside its range predicted before calibration, as one table."""
    parts = [_checked_log(name, data, model, hw, time_model, build) for name, data in files]
    return joined(parts, parts[0].predicted_with if parts else "")


@app_cached("Pricing each run as it was predicted before calibration...", kernels=True)
def _checked_log(
    name: str, data: bytes, model: ModelSpec, hw: Hardware, time_model: TimeModel, build: int | None
) -> BeforeCalibration:
    return check_log(name, cached_log(data), model, hw, time_model, build)
