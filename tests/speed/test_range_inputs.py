"""The range's inputs as one record (speed/range_inputs.py)."""

from __future__ import annotations

import pytest

from moe_model.speed.range_inputs import NO_RANGE, RangeInputs


def test_a_routings_spreads_and_the_time_models_error_make_one_record():
    ranges = RangeInputs.of(0.2, (1.5, 0.3))
    assert (ranges.rel_error, ranges.spread_points, ranges.miss_spread) == (0.2, 1.5, 0.3)
    assert ranges.without_routing() == RangeInputs(0.2)
    assert RangeInputs(0.0, 0.0, 0.0) == NO_RANGE


@pytest.mark.parametrize("fields", [(-0.1, 0.0, 0.0), (0.1, -1.0, 0.0), (0.1, 1.0, -0.2)])
def test_a_negative_width_is_refused(fields):
    with pytest.raises(ValueError, match="never negative"):
        RangeInputs(*fields)
