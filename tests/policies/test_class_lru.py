"""ClassLRU's linked-list kernel gives the counts of the append-only-queue kernel it replaced
(tests/policies/reference_class_lru.py) on many small random cases: every knob, CPU shares, probed and skipped records,
records streamed in chunks."""

from __future__ import annotations

import json

import numpy as np
import reference_class_lru as before
from cli_runs import run_cli
from conftest import GPT_OSS, SAMPLE

from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP
from moe_model.policies import class_lru, class_lru_band

GPT_OSS_TRACE = SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz"

KNOB_SETS = [
    {},
    {"clock": "group"},
    {"ties": "high-class"},
    {"increment": 0.5, "half_life_tokens": 3.0},
    {"n_classes": 2},
    {"n_classes": 1},
    {"half_life_tokens": 8.0, "ties": "high-class", "clock": "group"},
]


def random_case(rng):
    """A random group of records: (kernel inputs by chunk, caps, knobs, share, n_layer, n_expert)."""
    n_layer, n_expert, k = int(rng.integers(1, 5)), int(rng.choice([4, 8, 16])), int(rng.integers(1, 4))
    k = min(k, n_expert)
    hot = int(rng.integers(k, n_expert + 1))  # small hot sets: reuse, hits inside records, full lists
    n_rec = int(rng.integers(1, 150))
    share = float(rng.choice([0.0, 0.0, 0.3, 0.7, 1.0]))
    ntok = rng.choice([1, 1, 1, 1, 2, 3, 5, 9, 33], size=n_rec).astype(np.int32)
    if share > 0:  # the queue kernel split distinct experts; one-token records give it the same selections
        ntok[ntok <= 32] = 1
    layer = rng.integers(0, n_layer, size=n_rec).astype(np.int32)
    ids = np.concatenate([rng.permuted(np.tile(np.arange(hot), (t, 1)), axis=1)[:, :k].ravel() for t in ntok])
    off = np.concatenate([[0], np.cumsum(ntok.astype(np.int64) * k)[:-1]])
    mode = rng.choice([MODE_CACHE] * 8 + [MODE_PROBE, MODE_SKIP], size=n_rec).astype(np.int8)
    mode[(ntok > 32) & (mode == MODE_CACHE)] = MODE_PROBE  # llama.cpp offloads a large batch
    large = (ntok > 8).astype(np.int8)
    cuts = np.sort(rng.choice(np.arange(1, n_rec + 1), size=min(n_rec, int(rng.integers(1, 4))), replace=False))
    chunks = [slice(a, b) for a, b in zip(np.concatenate([[0], cuts[:-1]]), cuts, strict=True)]
    if cuts[-1] < n_rec:
        chunks.append(slice(int(cuts[-1]), n_rec))
    inputs = [(layer[c], ntok[c], off[c], mode[c], large[c], ids.astype(np.int32), k, n_expert) for c in chunks]
    cached = [len(set(ids[o : o + t * k])) for o, t, m in zip(off, ntok, mode, strict=True) if m == MODE_CACHE]
    need = max(cached, default=1)
    top = max(need + 1, n_layer * n_expert // 2)  # most pools evict, some never fill
    caps = np.unique(rng.integers(need, top, size=int(rng.integers(1, 6))))  # one pass: every pool holds a record
    knobs = KNOB_SETS[int(rng.integers(len(KNOB_SETS)))]
    return inputs, caps, knobs, share, n_layer, n_expert


def replay(module, case):
    inputs, caps, knobs, share, n_layer, n_expert = case
    state = module.new_state(caps, n_layer, n_expert, share=share, **knobs)
    for chunk in inputs:
        module.feed(state, *chunk)
    cpu = module.cpu_counts(state)
    return (*module.results(state), cpu[0] if isinstance(cpu, tuple) else cpu, state.filled.copy())


def test_linked_list_kernel_counts_equal_the_queue_kernel_on_random_cases():
    rng = np.random.default_rng(20)
    evicting, probed, on_cpu = 0, 0, 0  # what the cases exercised: pools that evicted, probe hits, CPU misses
    for _ in range(600):
        case = random_case(rng)
        new, old = replay(class_lru, case), replay(before, case)
        for got, want in zip(new, old, strict=True):
            assert np.array_equal(got, want), case
        hits, distinct, probe, cpu, _ = new
        uploads = distinct.sum() - hits.sum(axis=(0, 1)) - cpu.sum(axis=0)
        evicting += int(np.sum(uploads > case[1]))
        probed, on_cpu = probed + int(probe.sum() > 0), on_cpu + int(cpu.sum() > 0)
    assert evicting > 600 and probed > 400 and on_cpu > 150


def _resident(caps, records, n_layer=2, n_expert=3, **knobs):
    """Which keys (layer * n_expert + expert) each pool size holds after one-token, one-expert records."""
    layer = np.array([lay for lay, _ in records], dtype=np.int32)
    ids = np.array([e for _, e in records], dtype=np.int32)
    ones = np.ones(len(records), dtype=np.int32)
    state = class_lru.new_state(np.array(caps), n_layer, n_expert, **knobs)
    mode, large = np.full(len(records), MODE_CACHE, np.int8), np.zeros(len(records), np.int8)
    class_lru.feed(state, layer, ones, np.arange(len(records)), mode, large, ids, 1, n_expert)
    return [set(np.flatnonzero(row).tolist()) for row in state.held()]


def test_class_lru_is_not_a_stack_policy_so_each_pool_size_replays_alone():
    # Ages count in each key's own layer clock: layer 0's key 2, used once, stays "age 0" while layer 1 runs on.
    # 3 slots: at the last miss class 0's head is key 2 (score 0), so key 4 (age 2) hides behind it and key 3
    # (class 1, age 1, score 0.5) goes. 2 slots: key 2 went earlier (the only head then), key 4 heads class 0 and
    # goes. The 2-slot pool keeps key 3, the 3-slot pool does not: no single pass orders keys for every pool size.
    records = [(0, 2), (1, 0), (1, 0), (1, 1), (1, 0), (1, 2)]
    two, three = _resident([2, 3], records)
    assert (two, three) == ({3, 5}, {2, 4, 5}) and not two <= three
    plain_two, plain_three = _resident([2, 3], records, n_classes=1)  # one class: the plain LRU nests
    assert plain_two <= plain_three


def _gpt_oss_band(build: int) -> list[dict]:
    """simulate --json on the real GPT-OSS-20B routing with 4-token ubatches (-np 4) at 25 % and 75 % pools."""
    # 2,434 and 7,275 MiB hold 25 % and 75 % of its experts (moe_model/data/class_lru_readings.json)
    args = ["simulate", "--model", str(GPT_OSS), "--trace", str(GPT_OSS_TRACE), "--concurrency", "4"]
    run = run_cli(*args, "--no-warmup", "--budgets-mib", "2434,7275", "--build", str(build), "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["budgets"]


def test_simulate_of_a_class_lru_build_carries_its_readings_band_wide_at_small_pools_narrow_at_large():
    quarter, three_quarters = _gpt_oss_band(12569)
    assert [round(r["groups"][0]["percent"]) for r in (quarter, three_quarters)] == [25, 75]
    for r in (quarter, three_quarters):
        band = r["policy_band"]
        assert band["hit_rate_low"] <= r["hit_rate"] <= band["hit_rate_high"] and not band["interpolated"]
    assert quarter["policy_band"]["width_points"] >= 5 and three_quarters["policy_band"]["width_points"] < 3
    assert all("policy_band" not in r for r in _gpt_oss_band(11549))  # the exact LRU: no band


def test_the_band_replays_its_readings_at_sampled_pools_and_interpolates_their_offsets_between():
    rng = np.random.default_rng(3)
    n_layer, n_expert, k, n_tok = 2, 16, 2, 400
    ids = np.concatenate([rng.choice(6 + (t // 50) % 6, size=k, replace=False) for t in range(n_tok * n_layer)])
    layer = np.tile(np.arange(n_layer, dtype=np.int32), n_tok)
    ntok, mode, large = (
        np.ones(len(layer), np.int32),
        np.full(len(layer), MODE_CACHE, np.int8),
        np.zeros(len(layer), np.int8),
    )
    chunk = (layer, ntok, np.arange(len(layer)) * k, mode, large, ids.astype(np.int32), k, n_expert)
    caps = np.arange(2, 2 + 2 * 13, 2)  # 13 pool sizes: every 4th and the last sampled
    state = class_lru_band.band_kernel().new_state(caps, n_layer, n_expert)
    class_lru_band.band_kernel().feed(state, *chunk)
    band, replayed = class_lru_band.band_hits(state)
    assert state.sampled.tolist() == [0, 4, 8, 12] and np.flatnonzero(replayed).tolist() == [0, 4, 8, 12]
    for i, reading in enumerate(class_lru.BAND_READINGS):
        alone = class_lru.new_state(caps, n_layer, n_expert, **reading)
        class_lru.feed(alone, *chunk)
        exact = alone.hits.sum(axis=(0, 1))
        assert np.array_equal(band[i, state.sampled], exact[state.sampled])
        default = state.default.hits.sum(axis=(0, 1))
        offset = np.interp(caps, caps[state.sampled], (exact - default)[state.sampled])
        assert np.allclose(band[i], np.where(replayed, exact, default + offset))


def test_a_predictions_steady_hit_rate_lies_in_its_readings_band_at_small_and_large_pools():
    """The band a prediction carries is on the prediction's own basis (a warm pool's hits, traffic.steady_hits), not
    the replay's all-lookups count: at a near-full pool the two differ by more than the band is wide."""
    from moe_model.fits.calibration import default_time_model
    from moe_model.llama.slot_plan import Placement
    from moe_model.pricing.curve import curve
    from moe_model.pricing.workloads import synthetic_workload
    from moe_model.readers.model_spec import load_model
    from moe_model.speed.hardware import preset
    from moe_model.speed.scenario import Scenario

    model = load_model(SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf")
    sc = Scenario(Placement(cpu_moe=True), 2000)
    budgets = [600, 6000, 12000]
    points = curve(model, preset("3060"), default_time_model().params, sc, budgets,
                   lambda s: synthetic_workload(model, s)).points  # fmt: skip
    for p in points:
        band = p.prediction.policy_band
        assert band.hit_rate_low <= p.prediction.hit_rate <= band.hit_rate_high, p.budget_mib
        assert band.default_hit_rate == p.prediction.hit_rate
    assert points[0].prediction.policy_band.width_points > 5  # a small pool's band stays wide


def test_every_reading_replaying_one_chunks_shared_entries_counts_as_if_fed_alone():
    rng = np.random.default_rng(38)
    readings = class_lru.all_readings()
    for _ in range(60):
        inputs, caps, _, share, n_layer, n_expert = random_case(rng)
        states = [class_lru.new_state(caps, n_layer, n_expert, share=share, **r) for r in readings]
        for chunk in inputs:  # the band's way: the chunk's distinct experts found once for every reading
            shared = class_lru.entries(*chunk)
            for state in states:
                class_lru.replay(state, shared)
        for state, reading in zip(states, readings, strict=True):
            alone = replay(class_lru, (inputs, caps, reading, share, n_layer, n_expert))
            shared_counts = (*class_lru.results(state), class_lru.cpu_counts(state)[0], state.filled)
            assert all(np.array_equal(a, b) for a, b in zip(shared_counts, alone, strict=True)), reading
