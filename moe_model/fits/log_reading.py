"""Which of ClassLRU's open readings a user's own b12170+ logs support: every reading (policies.class_lru
.all_readings) replayed at the logged budgets through the routing the logs are simulated with, the one whose decode
hit rates are nearest the logged ones (RMS, points) picked. A machine file keeps it; predictions with that machine
replay it alone, without the band."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from moe_model.fits.routing_from_logs import logged_hit_rates
from moe_model.policies import class_lru
from moe_model.readers.logs import LogRun
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.logged import LoggedHitRate, RunLength, rms_points, simulated_hit_rates
from moe_model.routing.synthetic import Knobs, preset_for
from moe_model.speed.hardware import Hardware


@dataclass(frozen=True)
class ReadingPick:
    """The reading nearest the logs, its hit rate at each log, and every reading's RMS error (points)."""

    reading: dict[str, str]
    rms_points: float
    simulated: dict[str, float]  # each log under the picked reading (fraction)
    logged: dict[str, float]
    readings_rms_points: dict[str, float]

    def as_dict(self) -> dict:
        return {
            "reading": self.reading,
            "rms_points": self.rms_points,
            "simulated": self.simulated,
            "logged": self.logged,
            "readings_rms_points": self.readings_rms_points,
        }


def pick_reading(
    model: ModelSpec, points: Sequence[LoggedHitRate], knobs: Knobs, length: RunLength
) -> ReadingPick | None:
    """The reading nearest the points that a ClassLRU build logged (None without any), through routing `knobs`."""
    mine = [p for p in points if p.kernel.name == class_lru.POLICY.name]
    if not mine:
        return None
    scored = []
    for reading in class_lru.all_readings():
        kernel = class_lru.kernel(**reading)
        simulated = simulated_hit_rates(model, knobs, [replace(p, kernel=kernel) for p in mine], length)
        scored.append((rms_points(simulated, mine), reading, simulated))
    rms, reading, simulated = min(scored, key=lambda s: s[0])  # ties: the earlier reading, the default first
    every = {class_lru.reading_name(r): round(e, 3) for e, r, _ in scored}
    return ReadingPick(reading, rms, simulated, {p.name: p.hit_rate for p in mine}, every)


def reading_from_logs(
    model: ModelSpec, logs: Sequence[tuple[str, Sequence[LogRun]]], hw: Hardware, build: int | None = None
) -> ReadingPick | None:
    """The reading of these logs' b12170+ runs, through the model's routing preset, as long as the logged runs."""
    points = [p for name, runs in logs for p in logged_hit_rates(runs, model, hw, name, build)]
    if not points:
        return None
    return pick_reading(model, points, preset_for(model).knobs, RunLength.of(points))
