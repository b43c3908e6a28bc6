"""The recorder on a tiny random-weight model of each architecture (written by the project's GGUF writer, recorded
once with the router's probabilities read too): the ids it keeps are the router's top-k, in llama.cpp's ubatch
order, the server's warm-up and seq_rm probe first, each layer with its own token count, the last layer's rows as the
targeted build computes them. Without llama-cpp-python they skip."""

from __future__ import annotations

import math
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from moe_model.llama.batching import build_workload, server_batching
from moe_model.llama.output_rows import NEXTN_CROP_BUILD
from moe_model.llama.server_warm_up import PROBE_FROM_BUILD
from moe_model.readers.gguf_writer import header_bytes
from moe_model.readers.traces import make_token_trace
from moe_model.record.callback import RoutingReader
from moe_model.record.llama import ContextSettings, LlamaCpu, model_params
from moe_model.record.prompts import Prompt
from moe_model.record.runtime import RecordError
from moe_model.record.server_batches import prompt_calls
from moe_model.record.session import Recording, RecordSettings, record
from moe_model.record.tiny_models import ARCHITECTURES, TinyShape, write_tiny_model
from moe_model.record.trace_out import trace_arrays
from moe_model.workload import PHASE_DECODE, PHASE_PROMPT, PHASE_WARMUP

PROMPTS = (
    Prompt(text="the quick brown fox jumps over the lazy dog and runs"),  # 50+ tokens: several ubatches
    Prompt(text="of and to"),
)
SETTINGS = RecordSettings(n_predict=6, n_ctx=256, n_batch=32, n_ubatch=16, threads=2, with_probs=True)


@pytest.fixture(scope="module")
def runtime():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    from moe_model.record.runtime import load_runtime

    return load_runtime()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    return {arch: write_tiny_model(folder / f"{arch}.gguf", arch) for arch in ARCHITECTURES}


@pytest.fixture(scope="module")
def recordings(runtime, tiny_models) -> dict[str, Recording]:
    return {arch: record(path, PROMPTS, SETTINGS, runtime=runtime) for arch, path in tiny_models.items()}


ARCHS = sorted(ARCHITECTURES)
K = TinyShape().n_expert_used


@pytest.mark.parametrize("arch", ARCHS)
def test_every_layers_ids_are_the_top_k_of_its_router_probabilities_best_first(recordings, arch):
    checked = 0
    for ubatch in recordings[arch].ubatches:
        for layer in ubatch.layers:
            probs, ids = layer.probs, layer.ids
            assert probs is not None and ids.shape == (probs.shape[0], K)
            chosen = np.take_along_axis(probs, ids, axis=1)
            others = probs.copy()
            np.put_along_axis(others, ids, -np.inf, axis=1)
            assert (chosen.min(axis=1) >= others.max(axis=1)).all()  # the k largest (equal values aside)
            assert (np.diff(chosen, axis=1) <= 0).all()  # in top-k order
            checked += layer.n_tokens
    assert checked > 50


@pytest.mark.parametrize("arch", ARCHS)
def test_the_servers_warm_up_comes_first_bos_and_eos_then_the_seq_rm_probe(recordings, arch):
    first, probe, *rest = recordings[arch].ubatches
    for ub in (first, probe):
        assert (ub.phase, ub.call) == (PHASE_WARMUP, -1)
        assert [layer.n_tokens for layer in ub.layers] == [2] * (len(ub.layers) - 1) + [1]
    assert all(ub.phase != PHASE_WARMUP for ub in rest)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_recorded_start_up_is_the_one_predict_and_the_calibration_model_for_the_build(recordings, arch):
    """server_batching's start-up for the recorded build (the warm-up, then the probe) has the recording's ubatches
    and each MoE layer's token count; start_up_rows counts the probe as one row, and llama.cpp routes its two copies
    of token 0 to at most one expert apart per layer."""
    start_up = [ub for ub in recordings[arch].ubatches if ub.phase == PHASE_WARMUP]
    n_moe = len(start_up[0].layers)
    trace = make_token_trace(np.zeros((2, n_moe, K), dtype=np.int16), np.array([0, 2]))
    modelled = build_workload(trace, server_batching(arch, SETTINGS.build), 64)
    warm = modelled.rec_phase == PHASE_WARMUP
    counts = modelled.rec_ntok[warm].reshape(-1, n_moe).tolist()
    assert counts == [[layer.n_tokens for layer in ub.layers] for ub in start_up]
    for layer in start_up[1].layers[:-1]:  # the probe: token 0 twice
        assert len(set(layer.ids.ravel().tolist())) <= K + 1, arch


def test_a_build_before_the_probe_has_the_warm_up_alone(runtime, tiny_models):
    settings = replace(SETTINGS, build=PROBE_FROM_BUILD - 1, n_predict=2)
    ubatches = record(tiny_models["qwen3moe"], PROMPTS[1:], settings, runtime=runtime).ubatches
    assert [ub.phase for ub in ubatches[:2]] == [PHASE_WARMUP, PHASE_PROMPT]


def _prompt_ubatches(recording):
    return [ub for ub in recording.ubatches if ub.phase == PHASE_PROMPT]


@pytest.mark.parametrize("arch", ["qwen3moe", "deepseek2"])
def test_the_last_layer_of_a_prompt_ubatch_computes_only_the_output_token(recordings, arch):
    ubatches = recordings[arch].ubatches
    for ub, after in zip(ubatches[:-1], ubatches[1:], strict=True):
        if ub.phase == PHASE_PROMPT:  # the prompt's last ubatch (generation follows) has the one output row
            assert ub.layers[-1].n_tokens == (after.phase == PHASE_DECODE)
            assert ub.layers[0].n_tokens > 1
    assert ubatches[0].layers[-1].n_tokens == 1  # the warm-up's too


def test_gpt_oss_records_its_last_layer_at_the_output_rows_for_a_b11480_build_as_qwen3moe(recordings):
    ubatches = recordings["gpt-oss"].ubatches
    outputs = [
        after.phase == PHASE_DECODE
        for ub, after in zip(ubatches[:-1], ubatches[1:], strict=True)
        if ub.phase == PHASE_PROMPT
    ]
    assert [ub.layers[-1].n_tokens for ub in _prompt_ubatches(recordings["gpt-oss"])] == outputs
    assert sum(outputs) == len(PROMPTS) and len(outputs) > len(PROMPTS)


def test_gpt_oss_records_its_last_layer_on_every_prompt_token_for_a_build_before_b11480(
    runtime, tiny_models, recordings
):
    settings = replace(SETTINGS, build=NEXTN_CROP_BUILD - 1)
    recording = record(tiny_models["gpt-oss"], PROMPTS, settings, runtime=runtime)
    prompt = _prompt_ubatches(recording)
    assert all(ub.layers[-1].n_tokens == ub.layers[0].n_tokens > 1 for ub in prompt[:-1])
    assert recording.ubatches[0].layers[-1].n_tokens == 2  # the warm-up's both tokens
    # the output rows the b11480 build keeps are the same rows of the unpruned layer: the routing is per token
    pruned = _prompt_ubatches(recordings["gpt-oss"])
    last = [(a.layers[-1], b.layers[-1]) for a, b in zip(prompt, pruned, strict=True) if b.layers[-1].n_tokens]
    assert last and all(np.array_equal(full.ids[-1:], kept.ids) for full, kept in last)


@pytest.mark.parametrize("arch", ARCHS)
def test_prompts_go_in_n_batch_calls_split_into_n_ubatch_ubatches(recordings, runtime, tiny_models, arch):
    prompt = _prompt_ubatches(recordings[arch])
    sizes = [ub.layers[0].n_tokens for ub in prompt]
    assert max(sizes) == SETTINGS.n_ubatch and all(size <= SETTINGS.n_ubatch for size in sizes)
    per_call = {}
    for ub in prompt:
        per_call.setdefault(ub.call, []).append(ub.layers[0].n_tokens)
    for sizes in per_call.values():
        assert sum(sizes) <= SETTINGS.n_batch and len(sizes) == math.ceil(sum(sizes) / SETTINGS.n_ubatch)


@pytest.mark.parametrize("arch", ARCHS)
def test_generation_decodes_one_token_a_ubatch_each_sampled_token_but_the_last(recordings, arch):
    recording = recordings[arch]
    decode = [ub for ub in recording.ubatches if ub.phase == PHASE_DECODE]
    assert all(layer.n_tokens == 1 for ub in decode for layer in ub.layers)
    assert len(recording.generated) == len(PROMPTS)
    assert len(decode) == sum(len(tokens) - 1 for tokens in recording.generated)
    assert all(len(tokens) == SETTINGS.n_predict for tokens in recording.generated)


def test_a_keyboard_interrupt_keeps_the_complete_ubatches_before_it(runtime, tiny_models):
    def stop_after(n_kept: int) -> None:
        if n_kept == 5:
            raise KeyboardInterrupt

    recording = record(tiny_models["qwen3moe"], PROMPTS, SETTINGS, on_ubatch=stop_after, runtime=runtime)
    assert recording.interrupted and len(recording.ubatches) == 5
    assert all(len(ub.layers) == TinyShape().n_layer for ub in recording.ubatches)


def test_the_same_model_and_prompts_record_the_same_routing(recordings, runtime, tiny_models):
    again = record(tiny_models["qwen3moe"], PROMPTS, SETTINGS, runtime=runtime)
    first = recordings["qwen3moe"]
    assert again.generated == first.generated
    a, b = trace_arrays(again.ubatches), trace_arrays(first.ubatches)
    assert a.keys() == b.keys() and all(np.array_equal(a[key], b[key]) for key in a)


def _prompt_call_sizes(recording) -> list[list[int]]:
    """Each prompt's llama_decode calls, as the tokens of each (a prompt's ubatches follow the warm-up or a decode)."""
    prompts, previous = [], None
    for ub in recording.ubatches:
        if ub.phase == PHASE_PROMPT:
            if previous.phase != PHASE_PROMPT:
                prompts.append({})
            prompts[-1][ub.call] = prompts[-1].get(ub.call, 0) + ub.layers[0].n_tokens
        previous = ub
    return [list(calls.values()) for calls in prompts]


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_calls_follow_the_servers_cuts_checkpoints_only_for_the_sliding_window(recordings, arch):
    sizes = _prompt_call_sizes(recordings[arch])
    assert len(sizes) == len(PROMPTS)
    for calls in sizes:
        expected = prompt_calls(sum(calls), SETTINGS.n_batch, SETTINGS.n_ubatch, checkpoints=arch == "gpt-oss")
        assert calls == [end - start for start, end in expected]


def test_ctrl_c_during_a_call_stops_after_it_keeping_its_ubatches(runtime, tiny_models):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach only the main thread")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # SIGINT at the first ubatch of the prompt's first call: that call's ubatches are all kept, then it stops
        def press(n_kept: int) -> None:
            if n_kept == 3:
                os.kill(os.getpid(), signal.SIGINT)

        recording = record(tiny_models["qwen3moe"], PROMPTS[:1], SETTINGS, on_ubatch=press, runtime=runtime)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert recording.interrupted
    assert [ub.call for ub in recording.ubatches] == [-1, -1, 0, 0]  # the start-up decodes, the whole first call
    assert recording.timings.decode_tokens == 0


def test_a_batch_above_n_batch_is_refused_before_llama_cpp_would_abort(runtime, tiny_models):
    settings = ContextSettings(n_ctx=256, n_batch=32, n_ubatch=16, threads=1)
    with LlamaCpu(runtime, tiny_models["qwen3moe"], settings, RoutingReader(runtime)) as llm:
        with pytest.raises(RecordError, match="33 tokens does not fit n_batch 32"):
            llm.decode([5] * 33, 0, True)
        llm.decode([5] * 32, 0, True)  # the process lives on, and a batch that fits decodes
        assert 0 <= llm.greedy() < llm.n_vocab


def test_models_load_without_llama_cpps_extra_buffer_types(runtime):
    """--cpu-moe's experts stay in plain CPU buffers; 0.3.36's AMX repacking dies with SIGILL on some hosts."""
    params = model_params(runtime.llama)
    assert params.use_extra_bufts is False and params.n_gpu_layers == 0


def write_q8_0_experts_model(path: Path) -> Path:
    """The tiny qwen3moe with its expert tensors quantized to Q8_0 (gguf's own quantizer), the rest F32."""
    metadata, tensors = ARCHITECTURES["qwen3moe"](TinyShape(), 0)
    q8 = {name for name in tensors if "_exps." in name}
    infos = [
        (n, GGMLQuantizationType.Q8_0 if n in q8 else GGMLQuantizationType.F32, a.shape[::-1])
        for n, a in tensors.items()
    ]
    data = [quantize(a, GGMLQuantizationType.Q8_0).tobytes() if n in q8 else a.tobytes() for n, a in tensors.items()]
    out = bytearray(header_bytes(metadata, infos))
    for body in data:
        out += bytes(-len(out) % 32) + body
    path.write_bytes(bytes(out))
    return path


def test_a_model_with_quantized_experts_records_batches_of_many_tokens(runtime, tmp_path):
    path = write_q8_0_experts_model(tmp_path / "q8_0.gguf")
    recording = record(path, PROMPTS[:1], replace(SETTINGS, n_predict=2), runtime=runtime)
    assert [ub.phase for ub in recording.ubatches[:3]] == [PHASE_WARMUP, PHASE_WARMUP, PHASE_PROMPT]
    assert max(ub.layers[0].n_tokens for ub in recording.ubatches) == SETTINGS.n_ubatch  # batches of > 1 token
