"""A prediction's range, split into its sources, each with what the user could supply to narrow it.

Sources: the routing's hit-rate spread (± points, or a factor on the misses where one log fitted it), the time
model's left-out error (±), and each part of the host the user has not described (the slowest and fastest choice of
the parts table). Each is an interval around the central speed; the range adds their widths in log space (every
source at its worst together, as the range of the routing spread and the time model's error always did: on machines
never seen the central estimate is often off by more than one source's width). A source's `without_tps` is the range
if that source were settled exactly: the most its step can narrow it. The time model is never settled exactly:
calibrating replaces its cross-machine error by the machine's own left-out error, and on a machine already
calibrated that error is what remains (`settled`: no step narrows it further).

Each source says what narrows it twice: in the command line's words (`narrowed_by`, its flags: the JSON's field) and
in the app's (`app_narrowed_by`, the control on the page), from one declaration each (host_parts.PART_INPUTS).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from moe_model.speed.hardware import Hardware
from moe_model.speed.host_parts import unknown_parts

ROUTING_NARROWED_BY = (
    "your own llama-server -lv 4 logs (the Logs page): at the budget you run, its hit rate (--hit-rate) settles it; "
    "at other budgets the routing fitted to them carries its own measured spread"
)
ROUTING_APP_WORDS = (
    "your own llama-server -lv 4 logs, uploaded on the Logs page: the pages then replay the routing fitted to them, "
    "which carries its own measured spread"
)
POLICY_SOURCE = "policy (ClassLRU readings)"
POLICY_NARROWED_BY = "a llama-server -lv 4 log of a b12170+ build (calibrate / the Logs page picks the reading)"
POLICY_APP_WORDS = "a llama-server -lv 4 log of a b12170+ build, uploaded on the Logs page (it picks the reading)"
TIME_MODEL_SOURCE = "time model"
TIME_MODEL_NARROWED_BY = "your machine's own logs calibrated (`calibrate`, the Logs page): its own left-out error"
TIME_MODEL_APP_WORDS = "your machine's own logs, calibrated on the Logs page: its own left-out error"
TIME_MODEL_SETTLED = "this machine's own left-out error (calibrated from its logs): no step narrows it further"


@dataclass(frozen=True)
class RangeSource:
    """One source of a range: the speeds it alone spans around the central one, and the step that narrows it."""

    source: str
    low_tps: float
    high_tps: float
    narrowed_by: str
    without_tps: tuple[float, float] = (0.0, 0.0)
    settled: bool = False  # no step narrows it further (a calibrated machine's own error)
    app_narrowed_by: str = ""  # the same step in the app's words (its controls, no flags); "": as narrowed_by

    def narrowed(self, app: bool = False) -> str:
        """What narrows it, in the app's words (`app`) or the command line's."""
        return (self.app_narrowed_by or self.narrowed_by) if app else self.narrowed_by

    def log_widths(self, tps: float) -> tuple[float, float]:
        """How far below and above the central speed it reaches, in log units."""
        return math.log(tps / max(self.low_tps, 1e-12)), math.log(max(self.high_tps, 1e-12) / tps)

    def as_dict(self) -> dict:
        """The JSON's source: the command line's words only (the app's are for its pages)."""
        said = asdict(self) | {"without_tps": list(self.without_tps)}
        del said["app_narrowed_by"]
        return said


def combine(tps: float, sources: tuple[RangeSource, ...]) -> tuple[float, float]:
    """The range of all sources together: each side's log widths added."""
    if tps <= 0 or not sources:
        return tps, tps
    below = sum(max(0.0, s.log_widths(tps)[0]) for s in sources)
    above = sum(max(0.0, s.log_widths(tps)[1]) for s in sources)
    return tps * math.exp(-below), tps * math.exp(above)


def _width(tps: float, source: RangeSource) -> float:
    return sum(abs(w) for w in source.log_widths(tps))


def routing_shifts(hit_rate: float | None, spread_points: float, miss_spread: float) -> tuple[float, float]:
    """How many points the routing may move the hit rate down and up: ± spread_points, and where one log fitted
    the routing, the misses times or divided by e^miss_spread (the wider of the two each way)."""
    if not miss_spread or hit_rate is None:
        return -spread_points, spread_points
    misses = 1.0 - hit_rate
    down = 100 * (max(0.0, 1.0 - misses * math.exp(miss_spread)) - hit_rate)
    up = 100 * misses * (1.0 - math.exp(-miss_spread))
    return min(down, -spread_points), max(up, spread_points)


def decode_sources(
    tps: float,
    hw: Hardware,
    decode_at: Callable[[Hardware, float], float],
    rel_error: float,
    routing_points: tuple[float, float],
    band_points: tuple[float, float] = (0.0, 0.0),
) -> tuple[RangeSource, ...]:
    """Every source of a decode speed's range, largest first. `decode_at(hw, shift)` is the decode speed on that
    machine with the hit rate shifted by `shift` points; `routing_points` how far the routing's spread moves it down
    and up (routing_shifts); `band_points` how far a modelled policy's other readings move the hit rate below and
    above its default's."""
    found = []
    if any(band_points):
        speeds = [decode_at(hw, shift) for shift in band_points]
        found.append(
            RangeSource(POLICY_SOURCE, min(speeds), max(speeds), POLICY_NARROWED_BY, app_narrowed_by=POLICY_APP_WORDS)
        )
    if any(routing_points):
        speeds = [decode_at(hw, shift) for shift in routing_points]
        found.append(
            RangeSource(
                "routing (hit rate)", min(speeds), max(speeds), ROUTING_NARROWED_BY, app_narrowed_by=ROUTING_APP_WORDS
            )
        )
    if rel_error:
        why, app = (TIME_MODEL_SETTLED, "") if hw.calibrated else (TIME_MODEL_NARROWED_BY, TIME_MODEL_APP_WORDS)
        low, high = tps * (1 - rel_error), tps * (1 + rel_error)
        found.append(RangeSource(TIME_MODEL_SOURCE, low, high, why, settled=hw.calibrated, app_narrowed_by=app))
    for part in unknown_parts(hw):
        speeds = [decode_at(hw.with_changes(host=h), 0.0) for h in (part.slow, part.fast)]
        if max(speeds) - min(speeds) > 1e-3 * tps:  # a part whose choices change nothing here is not a source
            low, high = min(speeds + [tps]), max(speeds + [tps])
            found.append(RangeSource(part.part, low, high, part.narrowed_by, app_narrowed_by=part.app_narrowed_by))
    found = [s for s in found if s.high_tps - s.low_tps > 1e-3 * tps]  # nor a routing spread that moves nothing
    found = sorted(found, key=lambda s: _width(tps, s), reverse=True)
    return tuple(_with_without(tps, s, found) for s in found)


def _with_without(tps: float, source: RangeSource, every: list[RangeSource]) -> RangeSource:
    """The source with the range its step leaves: the others' (a settled source stays whole)."""
    others = tuple(s for s in every if s is not source or s.settled)
    return replace(source, without_tps=combine(tps, others))


def tps_text(tps: float) -> str:
    """A speed as a range's words say it: one decimal, two significant digits under 1 t/s (0.04, not 0.0)."""
    return f"{tps:.1f}" if tps >= 1 else f"{tps:.2g}"


def _span(low: float, high: float) -> str:
    return f"{tps_text(low)}-{tps_text(high)}"


def largest_step(tps: float, sources: tuple[RangeSource, ...], app: bool = False) -> str | None:
    """One line naming the largest source a step narrows and what that step would do to the whole range: never
    narrower than what stays (a calibrated machine's own error stays; calibrating leaves the machine's own); the
    steps in the app's words (`app`) or the command line's."""
    if not sources:
        return None
    lo, hi = combine(tps, sources)
    steps = [s for s in sources if not s.settled]
    kept = "; ".join(f"the {s.source} ({_span(s.low_tps, s.high_tps)} t/s) is {s.narrowed(app)}" for s in sources
                     if s.settled)  # fmt: skip
    if not steps:
        return f"the range {_span(lo, hi)} t/s stays: {kept}"
    top = steps[0]
    widest = f"{kept}; widest source a step narrows" if kept else "widest source"
    if len(sources) == 1:
        return f"the range {_span(lo, hi)} t/s is the {top.source}'s alone: {top.narrowed(app)} narrows it"
    said = f"{widest}: {top.source} ({_span(top.low_tps, top.high_tps)} t/s); "
    if top.source == TIME_MODEL_SOURCE:  # calibrating leaves the machine's own error, unknown before it is run
        return said + (
            f"the other sources alone span {_span(*top.without_tps)} t/s of the range {_span(lo, hi)}; "
            f"{top.narrowed(app)} replaces its ±{100 * (top.high_tps / tps - 1):.0f} % "
            f"({'the Logs page' if app else 'calibrate'} reports it)"
        )
    return said + (
        f"settling it would narrow the range {_span(lo, hi)} to at best {_span(*top.without_tps)} t/s: "
        f"{top.narrowed(app)}"
    )
