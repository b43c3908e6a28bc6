"""llama-server's start-up warm-up (llama/server_warm_up.py): BOS+EOS through every layer, the last with 1 token,
as the ubatch builder lays it out."""

from __future__ import annotations

import numpy as np

from moe_model.llama.batching import build_workload
from moe_model.llama.server_warm_up import WARM_UP_TOKENS, warm_up_tokens
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
