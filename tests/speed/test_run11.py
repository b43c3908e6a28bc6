"""run11 (sample_data/groundtruth/run11, the lent H200's host, llama.cpp b11549): the routing recorded on the CPU by
`python -m moe_model record` replays, through the project's simulator, to the hit rates llama-server's `-lv 4`
teardown lines report at three cache budgets (the same random-weight model and prompts, greedy); and the CPU expert
path per ggml type measured there with llama-bench (moe_model/data/cpu_quant_rates.json)."""

from __future__ import annotations

import gzip
import json

import pytest

from moe_model.llama.simulate import simulate
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_recorded
from moe_model.resources import data_path

RUN11 = data_path("groundtruth", "run11")
SERVERS = {"c2092": 2092, "c4185": 4185, "c6278": 6278}  # run3's 25 / 50 / 75 % of the host experts
THREADS = (2, 4, 8, 16)


@pytest.fixture(scope="module")
def recorded():
    """run3's model (header) and the routing recorded on the CPU."""
    return load_model(data_path("groundtruth", "run3", "model-header.gguf")), load_recorded(RUN11 / "cpu.npz")


def _server_log(server: str):
    (run,) = parse_log(gzip.decompress((RUN11 / "logs" / f"server_{server}.log.gz").read_bytes()))
    return run


@pytest.mark.parametrize("server", SERVERS)
def test_server_log_shows_the_budget_and_the_decode_hit_rate(server):
    run = _server_log(server)
    assert run.devices and run.devices[0].cache_mib <= SERVERS[server]
    assert run.decode_stats is not None and run.decode_stats.hit_rate is not None


OTHER_TOKENS = (
    "the CPU recording and the cache servers decode different greedy tokens (each request's first difference within "
    "1-6 tokens: random weights leave near-tied logits that CPU and GPU arithmetic break differently), and at 25 % "
    "the hit rate depends on them: CPU recordings at 16 / 12 / 8 threads replay to 36.2 / 36.0 / 38.1 % against the "
    "server's 38.5 % (run11b, hit_rates.csv); this one is 2.26 points low"
)


@pytest.mark.parametrize(
    "server",
    [pytest.param("c2092", marks=pytest.mark.xfail(strict=True, reason=OTHER_TOKENS)), "c4185", "c6278"],
)
def test_cpu_recording_replays_to_the_servers_decode_hit_rate_within_2_points(recorded, server):
    model, work = recorded
    logged = _server_log(server).decode_stats
    small = simulate(model, work, SERVERS[server]).small
    assert small.lookups > 0
    assert abs(small.hits / small.lookups - logged.hit_rate) <= 0.02


def test_servers_start_up_probe_decode_is_the_lookups_the_recording_lacks(recorded):
    """llama-server b11549 decodes [0, 0] once after the BOS/EOS warm-up (server-context.cpp,
    common_context_can_seq_rm); the recorder does not. With it added (run11b), the decode lookups match."""
    model, work = recorded
    server = _server_log("c4185").decode_stats
    server_lookups = server.hits + server.misses
    without = simulate(model, work, SERVERS["c4185"]).small.lookups
    with_probe = simulate(model, load_recorded(RUN11 / "run11b" / "cpu_probe_t16.npz"), SERVERS["c4185"]).small.lookups
    # every decode ubatch looks up 24 x 8; the probe at least as many; the start-up ubatches' routing differs by a few
    assert server_lookups - without == 191
    assert abs(server_lookups - with_probe) <= 8


@pytest.fixture(scope="module")
def rates() -> dict:
    return json.loads(data_path("cpu_quant_rates.json").read_text())


def test_quant_rates_name_their_source_and_cover_every_thread_count(rates):
    assert rates["source"]["run"] == "run11" and "b11549" in rates["source"]["build"]
    for qtype in ("Q4_K", "IQ3_XXS"):
        assert {r["threads"] for r in rates["rows"] if r["type"] == qtype} == set(THREADS)


@pytest.mark.parametrize("threads", THREADS)
def test_iq3_xxs_runs_slower_per_byte_than_q4_k_as_measured(rates, threads):
    gbs = {r["type"]: r["expert_gbs"] for r in rates["rows"] if r["threads"] == threads}
    assert gbs["IQ3_XXS"] < gbs["Q4_K"]
