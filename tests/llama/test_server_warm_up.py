"""llama-server's start-up decodes (llama/server_warm_up.py): BOS+EOS through every layer, the last with 1 token,
then the seq_rm probe's {0, 0}, as the ubatch builder lays them out."""

from __future__ import annotations

import numpy as np

from moe_model.cli.main import build_parser
from moe_model.cli.simulate import _workload
from moe_model.llama.batching import build_workload
from moe_model.llama.builds import FIRST_CACHE_BUILD, MAINLINE_BUILD
from moe_model.llama.server_warm_up import (
    PROBE_FROM_BUILD,
    PROBE_OUTPUTS,
    PROBE_TOKENS,
    WARM_UP_TOKENS,
    start_up_probe,
    warm_up_tokens,
)
from moe_model.readers.model_spec import uniform_spec
from moe_model.readers.traces import make_token_trace
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
