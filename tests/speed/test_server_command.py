"""The llama-server command generated from a Scenario's declared flags, and read back into the same Scenario."""

from __future__ import annotations

import pytest

from moe_model.errors import MoeModelError
from moe_model.llama.slot_plan import Placement
from moe_model.policies.knobs import SHARE
from moe_model.settings import settings_of
from moe_model.speed.scenario import Scenario
from moe_model.speed.server_command import SERVER, command_line, read_command

REQUEST = Scenario(prompt_tokens=2000, depth=3000, n_predict=64, accept_rate=0.6, build=12191, n_ctx=16000)


def test_the_command_carries_only_what_differs_from_llama_cpps_defaults():
    line = command_line("m.gguf", Scenario(), Placement())
    assert line == "llama-server -m m.gguf --cpu-moe -np 1 -c 4096 -lv 4"  # -c and -np: llama's are the model's, auto


@pytest.mark.parametrize(
    ("changes", "flags"),
    [
        ({"no_kv_offload": True}, "--no-kv-offload"),
        ({"n_ubatch": 1024}, "-ub 1024"),
        ({"n_ubatch": 4096}, "-ub 4096 -b 4096"),  # -ub above -b (2048) would be cut to it
        ({"flash_attn": "off"}, "-fa off"),
        ({"cache_type_k": "q8_0", "cache_type_v": "q4_0"}, "-ctk q8_0 -ctv q4_0"),
        ({"draft_tokens": 3}, "--spec-draft-n-max 3 -md DRAFT.gguf"),  # --draft-max is gone at b11549
        ({"load_mode": "none"}, "--load-mode none"),
        ({"fit_target_mib": 2048.0}, "--fit-target 2048"),
        ({"budget_mib": 900, "knobs": ((SHARE.name, 0.8),), "build": 12191}, "--moe-cache-cpu-share 0.8"),
    ],
)
def test_each_setting_off_llama_cpps_default_is_on_the_command_and_reads_back(changes, flags):
    sc = Scenario(**changes)
    line = command_line("m.gguf", sc, sc.placement)
    assert f" {flags} " in line
    assert read_command(line, Scenario(build=sc.build)).scenario == sc


def test_an_environment_setting_goes_before_the_program():
    sc = Scenario(offload_min_batch=64)
    line = command_line("m.gguf", sc, sc.placement)
    assert line.startswith("GGML_OP_OFFLOAD_MIN_BATCH=64 llama-server ")
    assert read_command(line).scenario == sc


@pytest.mark.parametrize(
    "placement",
    [
        Placement(),
        Placement(cpu_moe=False),
        Placement(cpu_moe=False, n_cpu_moe=20, n_gpu_layers=40),
        Placement(cpu_moe=False, fit=True),
        Placement(cpu_moe=True, n_gpus=2, tensor_split=(3.0, 1.0)),
    ],
)
def test_every_placement_reads_back_as_itself(placement):
    sc = Scenario(placement=placement)
    assert read_command(command_line("m.gguf", sc, placement), REQUEST).scenario.placement == placement


def test_the_request_fills_what_a_command_does_not_say_and_the_command_wins_on_the_rest():
    sc = Scenario(concurrency=2, n_ctx=32768, budget_mib=3000)
    read = read_command(command_line("https://h/m.gguf", sc, sc.placement), REQUEST)
    assert read.model_path == "https://h/m.gguf"
    assert (read.scenario.prompt_tokens, read.scenario.depth, read.scenario.n_predict) == (2000, 3000, 64)
    assert (read.scenario.concurrency, read.scenario.n_ctx, read.scenario.budget_mib) == (2, 32768, 3000)


def test_a_users_command_reads_llama_cpps_other_spellings_and_defaults():
    line = (
        "CUDA_VISIBLE_DEVICES=0 ./build/bin/llama-server --model m.gguf -cmoe --moe-cache-mib=5000 --ctx-size 8192 "
        "--parallel 2 --ubatch-size 4096 -nkvo --flash-attn on -md d.gguf --host 0.0.0.0 --port 8080 -t 8 --jinja"
    )
    sc = read_command(line, REQUEST).scenario
    assert sc.placement == Placement() and sc.budget_mib == 5000 and (sc.n_ctx, sc.concurrency) == (8192, 2)
    assert sc.n_ubatch == 2048  # -b's default cuts it (llama_context)
    assert sc.no_kv_offload and sc.flash_attn == "on" and sc.draft_tokens == 3  # -md alone: n_max's default
    assert read_command("llama-server -m m.gguf", REQUEST).scenario.n_ctx == REQUEST.n_ctx  # -c 0: the request's


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("python server.py -m m.gguf", "starts with llama-server"),
        ("llama-server --cpu-moe", "names no model"),
        ("llama-server -m m.gguf --frobnicate 3", "not a llama-server flag this tool reads"),
        ("llama-server -m m.gguf -c", "has no value"),
        ("llama-server -m m.gguf -c lots", "takes a whole number"),
        ("llama-server -m m.gguf --fit on --cpu-moe", "not both"),
        ("llama-server -m m.gguf -fa maybe", "-fa must be one of"),
        ("llama-server -m 'm.gguf", "cannot be split"),
        ("llama-server -m m.gguf " + "-lv 4 " * 20_000, "this tool reads"),
    ],
)
def test_a_command_this_tool_cannot_read_is_one_line(line, message):
    with pytest.raises(MoeModelError, match=message) as err:
        read_command(line)
    assert "\n" not in str(err.value)


def test_every_server_setting_declares_a_flag_or_variable_and_a_default_of_its_own_type():
    assert {"budget_mib", "concurrency", "draft_tokens", "n_ctx", "n_ubatch", "no_kv_offload"} <= set(SERVER)
    for s in SERVER.values():
        assert s.llama_default is not None and type(s.llama_default) is type(s.default), s.name
    request_only = {"accept_rate", "prompt_tokens", "depth", "n_predict", "policy", "build"}
    assert not any(settings_of(Scenario)[name].on_server for name in request_only)
