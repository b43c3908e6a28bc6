"""What a prediction's range is made from, as one record from the page or command to the time model.

Three inputs widen a decode speed's range (speed.ranges turns them into its sources): the time model's left-out
relative error, the routing's hit-rate spread in points, and where one log fitted the routing, a log factor on the
misses at other budgets. They travel together: a function that prices takes one RangeInputs, never three floats.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RangeInputs:
    """The range's inputs: `rel_error` (± the time model's left-out error, a fraction), `spread_points` (± hit-rate
    points of the routing: its preset's or the routing fitted to logs) and `miss_spread` (one log: the misses
    x/÷ e^miss_spread at other budgets). All 0: a prediction without a range (a central figure alone)."""

    rel_error: float = 0.0
    spread_points: float = 0.0
    miss_spread: float = 0.0

    def __post_init__(self) -> None:
        if min(self.rel_error, self.spread_points, self.miss_spread) < 0:
            raise ValueError(f"a range's inputs are widths, never negative: {self}")

    @classmethod
    def of(cls, rel_error: float, spreads: tuple[float, float] = (0.0, 0.0)) -> RangeInputs:
        """From the time model's error and a routing's `spreads` (routing presets and logged routings give them)."""
        return cls(rel_error, *spreads)

    def without_routing(self) -> RangeInputs:
        """The same range with the routing settled (a replayed trace, or a line that needs no hit rate)."""
        return replace(self, spread_points=0.0, miss_spread=0.0)


NO_RANGE = RangeInputs()
