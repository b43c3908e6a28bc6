"""Synthetic routing: the knobs do what they say, and the stored presets reproduce what they were fitted to."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import QWEN30B, SAMPLE

from moe_model.errors import WorkloadError
from moe_model.model_spec import load_model
from moe_model.simulate import simulate
from moe_model.synthetic import (
    Knobs,
    Shape,
    TraceStats,
    coordinate_fit,
    generate,
    load_presets,
    preset_for,
    previous_token_overlap,
    top_quarter_share,
)
from moe_model.workload import Batching, build_workload, load_token_trace

SHAPE = Shape(6, 16, 2)


def test_generated_trace_has_the_shape_and_distinct_experts_per_token():
    trace = generate(SHAPE, Knobs(), 1000, seq_len=300, seed=1)
    assert trace.experts.shape == (1000, 6, 2) and trace.n_seq == 4
    assert np.all(trace.experts[:, :, 0] != trace.experts[:, :, 1])
    assert np.array_equal(generate(SHAPE, Knobs(), 1000, seq_len=300, seed=1).experts, trace.experts)


def test_reuse_raises_next_token_overlap_and_skew_raises_popularity_share():
    low = previous_token_overlap(generate(SHAPE, Knobs(reuse=0.0), 3000))
    high = previous_token_overlap(generate(SHAPE, Knobs(reuse=0.8), 3000))
    assert high > low + 0.3
    flat = top_quarter_share(generate(SHAPE, Knobs(skew=0.0, working_set=1.0), 3000), 16)
    steep = top_quarter_share(generate(SHAPE, Knobs(skew=2.0, working_set=1.0), 3000), 16)
    assert flat == pytest.approx(0.25, abs=0.03) and steep > 0.5


def test_a_smaller_working_set_and_less_drift_raise_the_hit_rate():
    def stats(knobs):
        return TraceStats.of(generate(SHAPE, knobs, 3000, seed=2), 16).hit_rates[0]

    assert stats(Knobs(working_set=0.3)) > stats(Knobs(working_set=0.9)) + 0.1
    assert stats(Knobs(working_set=0.3, drift=0.0)) > stats(Knobs(working_set=0.3, drift=0.2))


def test_knobs_out_of_range_are_refused():
    with pytest.raises(WorkloadError, match="out of range"):
        Knobs(reuse=1.5)
    with pytest.raises(WorkloadError, match="impossible routing shape"):
        Shape(4, 4, 8)


def test_coordinate_fit_recovers_a_known_minimum():
    fitted = coordinate_fit(
        lambda k: (k.skew - 1.3) ** 2 + (k.reuse - 0.4) ** 2, Knobs(), names=("skew", "reuse"), steps=20
    )
    assert fitted.skew == pytest.approx(1.3, abs=0.01) and fitted.reuse == pytest.approx(0.4, abs=0.01)


def test_gpt_oss_preset_reproduces_the_real_traces_shared_pool_curve_within_2_points():
    trace = load_token_trace(SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz")
    real = TraceStats.of(trace, 32)
    name, knobs = preset_for("gpt-oss-20b")
    assert name == "gpt-oss-20b"
    synthetic = TraceStats.of(generate(Shape(24, 32, 4), knobs, 20_000, seed=7), 32)
    for ours, theirs in zip(synthetic.hit_rates, real.hit_rates, strict=True):
        assert abs(ours - theirs) <= 0.02


def test_qwen30b_preset_gives_the_measured_t4_hit_rates():
    table = pd.read_csv(SAMPLE / "reference-measurements.csv").set_index("id")
    model = load_model(QWEN30B)
    name, knobs = preset_for(model.name)
    assert name == "Qwen3-30B-A3B"
    trace = generate(Shape(48, 128, 8), knobs, 8000, seed=3)
    single = simulate(model, build_workload(trace, Batching(concurrency=1), 128), 10000).small.hit_rate
    four = simulate(model, build_workload(trace, Batching(concurrency=4), 128), 10000).small.hit_rate
    assert 100 * single == pytest.approx(table.loc["t4-cpumoe-10000", "hit_rate_small_pct"], abs=1.5)
    assert 100 * four == pytest.approx(table.loc["t4-cpumoe-10000-np4", "hit_rate_pct"], abs=2.0)
    assert four < single


def test_presets_say_what_they_were_fitted_to():
    for preset in load_presets().values():
        assert preset["fitted_to"] and set(preset["knobs"]) == {"skew", "working_set", "drift", "reuse"}
