"""Traffic: what each decode ubatch asks of each layer, the same from a stream as from a whole workload."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import GROUNDTRUTH, GT_BUDGETS

from moe_model.errors import WorkloadError
from moe_model.readers.traces import load_recorded
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.traffic import decode_distinct, decode_ubatches, from_workload
from moe_model.workload import stream_of


def test_a_streamed_workload_gives_the_traffic_of_the_whole_one(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    stream = stream_of(work, 1000)  # many chunks of whole ubatches
    assert sum(1 for _ in stream.chunks()) > 3
    sc = Scenario(budget_mib=GT_BUDGETS["b25"])
    layout = resolve(gt_model, preset("h200"), sc)
    whole, streamed = from_workload(gt_model, layout, sc, work), from_workload(gt_model, layout, sc, stream)
    assert decode_ubatches(stream) == decode_ubatches(work)
    np.testing.assert_allclose(decode_distinct(stream), decode_distinct(work))
    np.testing.assert_allclose(streamed.hits, whole.hits)
    np.testing.assert_allclose(streamed.distinct, whole.distinct)


def test_a_policy_other_than_the_exact_lru_refuses_a_stream_in_one_line(gt_model):
    stream = stream_of(load_recorded(GROUNDTRUTH / "traces" / "b25.npz"), 1000)
    sc = Scenario(budget_mib=GT_BUDGETS["b25"], policy="belady")
    with pytest.raises(WorkloadError, match="replays a whole workload"):
        from_workload(gt_model, resolve(gt_model, preset("h200"), sc), sc, stream)
