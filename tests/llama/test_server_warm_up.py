"""llama-server's start-up decodes (llama/server_warm_up.py): BOS+EOS through every layer, the last with 1 token,
then the seq_rm probe's {0, 0}, as the ubatch builder lays them out."""

from __future__ import annotations

import numpy as np

from moe_model.cli.main import build_parser
from moe_model.cli.simulate import _workload
from moe_model.llama.batching import build_workload, server_batching
from moe_model.llama.builds import FIRST_CACHE_BUILD, MAINLINE_BUILD
from moe_model.llama.server_warm_up import (
    PROBE_FROM_BUILD,
    PROBE_OUTPUTS,
    PROBE_TOKENS,
    WARM_UP_TOKENS,
    start_up_probe,
    start_up_rows,
    warm_up_tokens,
)
from moe_model.readers.model_spec import load_model, uniform_spec
from moe_model.readers.traces import load_recorded, make_token_trace
from moe_model.resources import data_path
from moe_model.speed.traffic import start_up_fills
from moe_model.workload import PHASE_WARMUP, Batching


def test_the_warm_up_decodes_bos_and_eos_and_its_last_layer_sees_only_the_output_token():
    assert WARM_UP_TOKENS == 2
    assert [warm_up_tokens(il, 4) for il in range(4)] == [2, 2, 2, 1]


def test_the_ubatch_builders_warm_up_records_follow_the_rule_and_no_warmup_drops_them():
    n_layer = 5
    trace = make_token_trace(np.tile([[[0, 1]]], (3, n_layer, 1)), np.array([0, 3]))
    work = build_workload(trace, Batching(), 16)
    warm = work.rec_phase == PHASE_WARMUP
    assert work.rec_layer[warm].tolist() == list(range(n_layer))
    assert work.rec_ntok[warm].tolist() == [warm_up_tokens(il, n_layer) for il in range(n_layer)]
    assert not (build_workload(trace, Batching(warmup=False), 16).rec_phase == PHASE_WARMUP).any()


def test_the_seq_rm_probe_is_made_by_every_build_read_from_b11063_on():
    assert PROBE_TOKENS == 2 and PROBE_OUTPUTS == 1
    assert all(start_up_probe(build) for build in (11063, 11434, FIRST_CACHE_BUILD, 11549, MAINLINE_BUILD))
    assert not start_up_probe(PROBE_FROM_BUILD - 1)


def test_the_probe_follows_the_warm_up_two_copies_of_one_drawn_row_its_last_layer_at_the_output():
    n_layer = 5
    trace = make_token_trace(np.tile([[[0, 1]]], (3, n_layer, 1)), np.array([0, 3]))
    work = build_workload(trace, Batching(start_up_probe=True), 16)
    warm = np.flatnonzero(work.rec_phase == PHASE_WARMUP)
    assert work.rec_ubatch[warm].tolist() == [0] * n_layer + [1] * n_layer
    probe = warm[n_layer:]
    assert work.rec_ntok[probe].tolist() == [PROBE_TOKENS] * (n_layer - 1) + [PROBE_OUTPUTS]
    for rec in probe[:-1]:
        first, second = work.ids[work.rec_off[rec] : work.rec_off[rec] + 2 * 2].reshape(2, 2)
        assert first.tolist() == second.tolist()  # token 0 twice: one routing
    unpruned = build_workload(trace, Batching(start_up_probe=True, last_layer_prunes=False), 16)
    assert unpruned.rec_ntok[unpruned.rec_phase == PHASE_WARMUP].tolist()[-1] == PROBE_TOKENS
    # with --no-warmup the server still probes; the decode rows are the trace's either way
    alone = build_workload(trace, Batching(warmup=False, start_up_probe=True), 16)
    assert alone.rec_ntok[alone.rec_phase == PHASE_WARMUP].tolist() == work.rec_ntok[probe].tolist()
    assert alone.decode_tokens == work.decode_tokens == 3


def test_simulate_adds_the_probe_for_the_build_asked_for(tmp_path):
    trace = tmp_path / "t.npz"
    np.savez(trace, experts=np.tile([[[0, 1]]], (3, 4, 1)), seq_offsets=np.array([0, 3]))
    model = uniform_spec(4, 16, 2)
    for build, ubatches in ((MAINLINE_BUILD, 2), (PROBE_FROM_BUILD - 1, 1)):
        argv = ["simulate", "--model", "m.gguf", "--trace", str(trace), "--budget-mib", "0", "--build", str(build)]
        work = _workload(build_parser().parse_args(argv), model, whole=True)
        assert len(set(work.rec_ubatch[work.rec_phase == PHASE_WARMUP].tolist())) == ubatches


RUN11B = data_path("groundtruth", "run11", "run11b")


def _start_up(work):
    """Per start-up ubatch, each layer's token count and distinct experts (the records before the first request)."""
    warm = np.flatnonzero(work.rec_phase == PHASE_WARMUP)
    ntok = {}
    for rec in warm:
        ntok.setdefault(int(work.rec_ubatch[rec]), []).append(int(work.rec_ntok[rec]))
    return list(ntok.values())


def test_the_modelled_start_up_of_b11549_has_the_ubatches_and_token_counts_of_its_recorded_start_up():
    """run11b recorded llama-server b11549's start-up through llama.cpp (the warm-up, then the probe): the ubatch
    builder's start-up for that build and architecture has the same ubatches, each layer the same tokens."""
    model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
    recorded = load_recorded(RUN11B / "cpu_probe_t16.npz")
    trace = make_token_trace(np.zeros((3, model.n_layer, model.n_expert_used), dtype=np.int16), np.array([0, 3]))
    modelled = build_workload(trace, server_batching(model.architecture, 11549), model.n_expert)
    assert _start_up(modelled) == _start_up(recorded) == [[2] * (model.n_layer - 1) + [1]] * 2
    assert not start_up_probe(PROBE_FROM_BUILD - 1)
    older = build_workload(trace, server_batching(model.architecture, PROBE_FROM_BUILD - 1), model.n_expert)
    assert _start_up(older) == _start_up(recorded)[:1]  # the warm-up alone


def test_the_probe_routes_as_one_row_and_the_start_up_fills_what_its_recording_fills():
    """start_up_rows counts the probe's two tokens as one row: in run11b's recording both select the same experts
    at most layers (9 distinct of 8 + 8 where rounding splits a near tie). The start-up's fills the time model and
    the calibration take (tokens as independent: an upper bound) are at most 10 % above the recording's distinct
    experts (534 against 507); without the probe they would be 28 % below."""
    model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
    work = load_recorded(RUN11B / "cpu_probe_t16.npz")
    k, n_layer = model.n_expert_used, model.n_layer
    per_layer = [set() for _ in range(n_layer)]
    probe_distinct = []
    for rec in np.flatnonzero(work.rec_phase == PHASE_WARMUP):
        ids = work.ids[work.rec_off[rec] : work.rec_off[rec] + work.rec_ntok[rec] * k]
        per_layer[work.rec_layer[rec]].update(ids.tolist())
        if work.rec_ubatch[rec] == 1:
            probe_distinct.append(len(set(ids.tolist())))
    assert sum(d == k for d in probe_distinct) >= 0.75 * n_layer and max(probe_distinct) <= k + 1
    assert [start_up_rows(il, n_layer, 11549) for il in range(n_layer)] == [3] * (n_layer - 1) + [2]
    recorded = sum(len(s) for s in per_layer)
    assert recorded <= start_up_fills(model, range(n_layer), 11549) <= 1.1 * recorded
    assert start_up_fills(model, range(n_layer), PROBE_FROM_BUILD - 1) < 0.8 * recorded  # the warm-up alone
