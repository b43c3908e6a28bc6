"""Synthetic routing: the knobs do what they say, and the stored presets reproduce what they were fitted to."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import GPT_OSS, MIXTRAL, MODELS, PACKAGE_DATA, QWEN30B, QWEN235B_SHARD1, SAMPLE

from moe_model.errors import WorkloadError
from moe_model.llama.batching import build_workload
from moe_model.llama.simulate import simulate, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model, uniform_spec
from moe_model.readers.traces import load_token_trace
from moe_model.routing.synthetic import (
    MATCH_MODEL,
    MATCH_SHAPE,
    Knobs,
    Shape,
    TraceStats,
    coordinate_fit,
    fallback_spread,
    generate,
    load_presets,
    preset_for,
    previous_token_overlap,
    stream_workload,
    top_quarter_share,
)
from moe_model.workload import Batching, Workload

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


def test_a_shape_is_bounded_by_the_limits_a_header_is_read_with_and_a_draw_by_its_arrays_before_it_is_made():
    from moe_model.limits import MAX_EXPERTS, MAX_EXPERTS_USED, MAX_LAYERS, MAX_SYNTHETIC_TOKENS

    assert Shape(MAX_LAYERS, MAX_EXPERTS, MAX_EXPERTS_USED).n_layer == MAX_LAYERS  # 513..1,024 layers were refused
    for shape in ((MAX_LAYERS + 1, 8, 2), (4, MAX_EXPERTS + 1, 2), (4, 128, MAX_EXPERTS_USED + 1)):
        with pytest.raises(WorkloadError, match="impossible routing shape"):
            Shape(*shape)
    widest = Shape(MAX_LAYERS, MAX_EXPERTS, MAX_EXPERTS_USED)
    with pytest.raises(WorkloadError, match="above this tool's limit"):  # refused at once, not after gigabytes
        generate(widest, Knobs(), MAX_SYNTHETIC_TOKENS)
    with pytest.raises(WorkloadError, match="scores"):  # its ids would fit: the time of its draw would not
        stream_workload(Shape(MAX_LAYERS, MAX_EXPERTS, 2), Knobs(), 16 * 512, concurrency=16)
    qwen30b = Shape(48, 128, 8)
    assert stream_workload(qwen30b, Knobs(), MAX_SYNTHETIC_TOKENS).n_layer == 48  # the measured run still runs


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
    table = pd.read_csv(PACKAGE_DATA / "reference-measurements.csv").set_index("id")
    model = load_model(QWEN30B)
    name, knobs = preset_for(model.name)
    assert name == "Qwen3-30B-A3B"
    trace = generate(Shape(48, 128, 8), knobs, 8000, seed=3)
    single = simulate(model, build_workload(trace, Batching(concurrency=1), 128), 10000).small.hit_rate
    four = simulate(model, build_workload(trace, Batching(concurrency=4), 128), 10000).small.hit_rate
    assert 100 * single == pytest.approx(table.loc["t4-cpumoe-10000", "hit_rate_small_pct"], abs=1.5)
    assert 100 * four == pytest.approx(table.loc["t4-cpumoe-10000-np4", "hit_rate_pct"], abs=2.0)
    assert four < single


def test_presets_say_what_they_were_fitted_to_their_shape_and_spread():
    for preset in load_presets().values():
        assert preset["fitted_to"] and set(preset["knobs"]) == {"skew", "working_set", "drift", "reuse"}
        assert set(preset["shape"]) == {"n_layer", "n_expert", "k"} and preset["models"]
        assert preset["rms_fit_points"] is not None and preset["rms_held_out_points"] is not None
        assert preset["spread_points"] == max(preset["rms_fit_points"], preset["rms_held_out_points"]) > 0


def test_every_expert_shape_with_published_hit_rates_has_a_preset_of_its_own():
    shapes = {(p["shape"]["n_expert"], p["shape"]["k"]) for p in load_presets().values()}
    assert shapes == {(32, 4), (128, 8), (512, 10), (256, 8)}  # gpt-oss, Qwen3-30B, Qwen3.8-Flash-Next, Qwen3.6-35B
    qwen36 = preset_for(load_model(MODELS / "Qwen3.6-35B-A3B-UD-Q4_K_M.gguf"))
    assert (qwen36.name, qwen36.match) == ("Qwen3.6-35B-A3B", MATCH_MODEL)


def _row_errors(entry: dict, shape: Shape, tokens: int, seed: int) -> dict[str, float]:
    """Each published row simulated with the preset (its own header, placement, budget, streams), minus its rate."""
    trace = generate(shape, Knobs(**entry["knobs"]), tokens, seed=seed)
    errors = {}
    for row in entry["rows"]:
        placement = None if row["n_cpu_moe"] is None else Placement(cpu_moe=False, n_cpu_moe=row["n_cpu_moe"])
        work = build_workload(trace, Batching(concurrency=row["streams"]), shape.n_expert)
        result = simulate_budgets(load_model(MODELS / row["model"]), work, [row["budget"]], placement)[0]
        errors[row["id"]] = 100 * result.small.hit_rate - row["target_pct"]
    return errors


def test_flash_next_preset_reproduces_its_published_hit_rates_within_its_spread():
    entry = load_presets()["Qwen3.8-Flash-Next"]
    preset = preset_for(load_model(MODELS / "Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf"))
    assert (preset.name, preset.match, preset.spread_points) == (
        "Qwen3.8-Flash-Next",
        MATCH_MODEL,
        entry["spread_points"],
    )
    errors = _row_errors(entry, Shape(48, 512, 10), 3000, seed=5)
    fit = [e for rid, e in errors.items() if not rid.startswith("v620")]
    held_out = [e for rid, e in errors.items() if rid.startswith("v620")]
    assert len(fit) == 7 and len(held_out) == 3
    # on a new seed (1 point of slack): the fitted rows within the fit's rms, the held-out V620 rows within the
    # spread (their rms is what sets it), and no row off by more than twice the spread
    assert np.sqrt(np.mean(np.square(fit))) <= entry["rms_fit_points"] + 1.0, errors
    assert np.sqrt(np.mean(np.square(held_out))) <= preset.spread_points + 1.0, errors
    assert all(abs(e) <= 2 * preset.spread_points + 1.0 for e in errors.values()), errors


def test_the_qwen36_preset_reproduces_both_published_rates_and_reports_each_one_held_out():
    entry = load_presets()["Qwen3.6-35B-A3B"]
    assert [r["target_pct"] for r in entry["rows"]] == [53.0, 81.0]  # the RTX 3060 Ti eGPU rows
    assert set(entry["held_out_errors_points"]) == {r["id"] for r in entry["rows"]}
    held = np.sqrt(np.mean(np.square(list(entry["held_out_errors_points"].values()))))
    assert entry["rms_held_out_points"] == pytest.approx(held, abs=0.01)
    errors = _row_errors(entry, Shape(40, 256, 8), 2000, seed=5)  # a seed neither the fit nor its check used
    assert np.sqrt(np.mean(np.square(list(errors.values())))) <= entry["rms_fit_points"] + 1.5, errors


def test_a_model_with_no_preset_of_its_own_gets_the_widest_spread_and_says_so():
    presets = load_presets()
    widest = fallback_spread()
    assert widest >= max(p["spread_points"] for p in presets.values())
    odd = preset_for(uniform_spec(48, 288, 8, name="some-288x8-moe"))  # nearest shape: 256 x 8
    assert odd.name == "Qwen3.6-35B-A3B" and odd.is_fallback and odd.spread_points == widest
    assert odd.match.startswith("no preset of its own: nearest shape, Qwen3.6-35B-A3B (256 experts, 8 used)")
    assert f"widest spread (±{widest:.1f} points)" in odd.match and "hit-rate points" in odd.describe()


def test_preset_for_picks_by_name_then_expert_shape_then_nearest_shape_and_says_which():
    presets = load_presets()
    flash = preset_for(load_model(MODELS / "Qwen3-Next-80B-A3B-IQ4_NL.gguf"))  # 512 x 10, another name
    assert (flash.name, flash.match) == ("Qwen3.8-Flash-Next", MATCH_SHAPE) and not flash.is_fallback
    big = preset_for(load_model(QWEN235B_SHARD1))  # 128 x 8 like Qwen3-30B-A3B, 94 layers
    assert (big.name, big.match) == ("Qwen3-30B-A3B", MATCH_SHAPE)
    assert big.spread_points == presets["Qwen3-30B-A3B"]["spread_points"]
    mixtral = preset_for(load_model(MIXTRAL))  # 8 x 2: nearest is gpt-oss's 32 x 4
    assert mixtral.name == "gpt-oss-20b" and "nearest shape, gpt-oss-20b (32 experts, 4 used)" in mixtral.match
    assert preset_for(load_model(GPT_OSS)).match == MATCH_MODEL
    unknown = preset_for("some-moe-model")  # a name only: the real-routing GPT-OSS preset, labelled a fallback
    assert unknown.name == "gpt-oss-20b" and unknown.is_fallback
    assert unknown.spread_points == fallback_spread(shape_known=False) > fallback_spread()
    name, knobs = preset_for("Qwen3-30B-A3B")  # callers that unpack (name, knobs) keep working
    assert name == "Qwen3-30B-A3B" and knobs == Knobs(**presets["Qwen3-30B-A3B"]["knobs"])


def _concatenated(stream):
    """Every chunk of a stream in one Workload (small streams only: the test's reference)."""
    parts = list(stream.chunks())
    ub_base = np.cumsum([0] + [p.n_ubatches for p in parts[:-1]])
    id_base = np.cumsum([0] + [len(p.ids) for p in parts[:-1]])
    return Workload(
        stream.n_layer,
        stream.n_expert,
        stream.k,
        np.concatenate([p.rec_ubatch + b for p, b in zip(parts, ub_base, strict=True)]),
        np.concatenate([p.rec_layer for p in parts]),
        np.concatenate([p.rec_ntok for p in parts]),
        np.concatenate([p.rec_off + b for p, b in zip(parts, id_base, strict=True)]),
        np.concatenate([p.rec_phase for p in parts]),
        np.concatenate([p.ids for p in parts]),
        stream.decode_tokens,
    )


def test_a_streamed_synthetic_workload_is_the_batched_trace_and_simulates_like_it_held_whole():
    from moe_model.readers.model_spec import uniform_spec
    from moe_model.routing.synthetic import stream_workload

    shape, knobs = Shape(3, 16, 2), Knobs(skew=1.0, working_set=0.5, drift=0.02, reuse=0.3)
    one_block = stream_workload(shape, knobs, 3 * 512, concurrency=2, seed=4)
    (chunk,) = one_block.chunks()
    expected = build_workload(generate(shape, knobs, 3 * 512, seed=4), Batching(concurrency=2, warmup=False), 16)
    assert np.array_equal(chunk.ids, expected.ids) and np.array_equal(chunk.rec_ntok, expected.rec_ntok)
    stream = stream_workload(shape, knobs, 40 * 512 + 100, concurrency=3, seed=1)  # 3 blocks of 18 sequences
    whole = _concatenated(stream)
    assert stream.n_records == whole.n_records and stream.n_lookups == len(whole.ids)
    model = uniform_spec(3, 16, 2)
    budgets = [2, 5, 9, 17, 30, 49]
    for a, b in zip(simulate_budgets(model, stream, budgets), simulate_budgets(model, whole, budgets), strict=True):
        assert a.as_dict() == b.as_dict()


def test_a_prompt_ubatch_of_consecutive_tokens_shares_experts_by_its_routings_locality():
    from moe_model.routing.synthetic import window_distinct
    from moe_model.speed.traffic import independent_distinct

    flash = preset_for(load_model(MODELS / "Qwen3.8-Flash-Next-R9700.gguf")).knobs
    sizes = (32, 512, 2048, 8192)
    distinct = [window_distinct(512, 10, flash, n) for n in sizes]
    assert distinct == sorted(distinct)  # a longer window never uses fewer experts
    assert all(d < independent_distinct(512, 10, n) for d, n in zip(distinct, sizes, strict=True))
    assert 0.45 < distinct[1] / 512 < 0.65  # ~56 % of the experts in a 512-token ubatch, not all of them
    uniform = Knobs(skew=0.0, working_set=1.0, drift=0.0, reuse=0.0)  # independent uniform tokens
    assert window_distinct(128, 8, uniform, 64) == pytest.approx(independent_distinct(128, 8, 64), rel=0.02)


def test_the_random_weight_ground_truth_models_prompt_routing_matches_their_traced_prompt_ubatch():
    from moe_model.readers.traces import load_any
    from moe_model.routing.synthetic import RANDOM_WEIGHT_KNOBS, prompt_knobs, window_distinct

    work = load_any(SAMPLE / "groundtruth" / "run3" / "traces" / "run3_b25.npz")
    prompt = np.flatnonzero(work.rec_ntok >= 32)  # the 129-token prompt ubatch, layer by layer
    measured = np.mean([len(np.unique(work.ids[o : o + work.k * n])) for o, n in zip(
        work.rec_off[prompt], work.rec_ntok[prompt], strict=True)])  # fmt: skip
    assert measured == pytest.approx(window_distinct(128, 8, RANDOM_WEIGHT_KNOBS, 129), abs=1.5)
    assert prompt_knobs(load_model(SAMPLE / "groundtruth" / "run3" / "model-header.gguf")) == RANDOM_WEIGHT_KNOBS
    assert prompt_knobs(load_model(QWEN30B)) == preset_for(load_model(QWEN30B)).knobs


def test_routing_drawn_on_threads_is_the_one_thread_routing_and_the_stream_it_always_was(monkeypatch):
    import hashlib

    from moe_model import threads
    from moe_model.routing import synthetic

    shape = Shape(48, 128, 8)  # 12 sequences x 48 layers x 128 experts: enough rows per step for two threads
    drawn = {}
    for cores in (1, 2):
        monkeypatch.setattr(synthetic, "available_cores", lambda cores=cores: cores)
        monkeypatch.setattr(threads, "available_cores", lambda cores=cores: cores)
        drawn[cores] = generate(shape, Knobs(), 96, seq_len=8, seed=3).experts
    assert np.array_equal(drawn[1], drawn[2])
    # sha256 of the routing numpy drew at commit 4e15bce, before the threads
    assert hashlib.sha256(drawn[2].tobytes()).hexdigest() == (
        "1f3ede67ee3a3ff766d1b7934b638eec7d0f8f96dcaafe6d9db403c8418fc2ba"
    )


def test_knobs_and_presets_are_described_in_words_not_as_a_dataclass():
    said = Knobs(skew=0.9496, working_set=0.6, drift=0.01, reuse=0.3).words
    assert said.startswith("expert popularity spread 0.95, each sequence drawing on 60 % of a layer's experts")
    assert "Knobs(" not in preset_for(load_model(QWEN30B)).describe()


def test_numbers_read_ahead_draw_the_prompt_curve_and_a_drifting_stream_as_one_draw_at_a_time_did():
    import hashlib

    from moe_model.routing.synthetic import _drawn_window_curve

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    means = _drawn_window_curve(128, 8, Knobs(skew=0.9909, working_set=0.7027, drift=0.0034, reuse=0.4286))
    stream = stream_workload(Shape(6, 16, 2), Knobs(drift=0.2), 2000, concurrency=3, seq_len=100, seed=4)
    # sha256 of what numpy drew at commit 062b9b9, each step's numbers drawn as it needed them
    assert sha(means.tobytes()) == "d5628131bd3b35d21931f8b6251e8613b0cc20947c733e9ee8c52f50b34074b9"
    assert sha(b"".join(c.ids.tobytes() for c in stream.chunks())) == (
        "d5b4bfcad718d741a1ed7073f989a1e119b0148cc2d5b4e5b4b66e7963ad9ee7"
    )
