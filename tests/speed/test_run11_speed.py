"""run11 (sample_data/groundtruth/run11, the lent GPU machine's 16-core Xeon, llama.cpp b11549, never fitted):
llama-server `--cpu-moe` without the cache and with it at 2,092, 4,185 and 6,278 MiB, predicted from the CPU recording
alone, as a user who has not bought the card would: the hit rates by replaying the routing `record` wrote
(cpu.npz), the host side from a host record (fits.host_fit), the GPU side from the h200 preset; no server log.
The host record is run11c's (host_default.json): run11's own (host.json) was timed with llama.cpp's OpenMP threads
sleeping at every barrier (the PASSIVE wait policy moe_model set for numba), 27.6 t/s; run11c recorded the same model
and prompts again with the fix, on a second VM of the same kind (16 cores, a Sapphire Rapids Xeon where run11's was
Emerald Rapids): 68.3 t/s, and 27.1 with the old policy beside it, so the two hosts time alike. Measured: the steady
requests p1-p5 (p0 is each server's first), 64 decoded tokens each; speeds compared over the requests' total time."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pytest

from moe_model.fits.calibration import default_time_model
from moe_model.fits.host_fit import apply_host_record
from moe_model.llama.batching import workload_from
from moe_model.llama.slot_plan import Placement
from moe_model.pricing.curve import curve
from moe_model.readers.host_record import read_host_record
from moe_model.readers.model_spec import ModelSpec, load_model
from moe_model.readers.traces import load_recorded
from moe_model.resources import data_path
from moe_model.speed.hardware import Hardware, preset
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching, Workload

RUN11 = data_path("groundtruth", "run11")
WITHIN = 0.15
SERVERS = ("off", "c2092", "c4185", "c6278")
HOST_RECORDS = {"run11": "host.json", "passive": "run11c/host_passive.json", "default": "run11c/host_default.json"}


class Recording(NamedTuple):
    run: Path
    model: ModelSpec
    hw: Hardware
    work: Workload


def recording(run: Path, host_record: Path, trace: Path) -> Recording:
    """run3's model, the machine calibrated by the host record, and the recorded routing at one stream."""
    model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
    hw = apply_host_record(preset("h200"), read_host_record(host_record), model)
    return Recording(run, model, hw, workload_from(load_recorded(trace), Batching(1, 0, 0.7), model.n_expert))


@pytest.fixture(scope="module")
def recorded():
    return recording(RUN11, RUN11 / "run11c" / "host_default.json", RUN11 / "cpu.npz")


def budget_of(server: str) -> int:
    """The runs' server names: off (no cache), cNNNN (--moe-cache-mib NNNN), full (every expert: 8,376 MiB)."""
    named = {"off": 0, "full": 8376}
    return named[server] if server in named else int(server.removeprefix("c"))


def steady_requests(run: Path, server: str) -> pd.DataFrame:
    rows = pd.read_csv(run / "summary.csv")
    return rows[(rows.kind == "server") & (rows.name == server) & (rows.request != "p0")]


def speeds(recorded: Recording, server: str) -> dict[str, tuple[float, float]]:
    """(predicted, measured) decode and prompt t/s over the steady requests, each predicted at its prompt length."""
    params, budget, rows = default_time_model().params, budget_of(server), steady_requests(recorded.run, server)
    decode_s = prompt_s = 0.0
    for prompt_n, decode_n in zip(rows.prompt_n, rows.decode_n, strict=True):
        sc = Scenario(
            placement=Placement.parse("cpu-moe"), budget_mib=budget, n_ctx=8192, n_ubatch=512, flash_attn="off",
            build=11549, n_predict=int(decode_n), prompt_tokens=int(prompt_n),
        )  # fmt: skip
        at = curve(recorded.model, recorded.hw, params, sc, [budget], lambda _: recorded.work).at(budget)
        decode_s += decode_n / at.prediction.decode_tps
        prompt_s += prompt_n / at.prediction.prefill_tps
    measured_decode = rows.decode_n.sum() / (rows.decode_n / rows.decode_tps).sum()
    measured_prompt = rows.prompt_n.sum() / (rows.prompt_n / rows.prompt_tps).sum()
    return {
        "decode": (rows.decode_n.sum() / decode_s, measured_decode),
        "prompt": (rows.prompt_n.sum() / prompt_s, measured_prompt),
    }


def test_run11s_servers_answered_five_steady_requests_each():
    for server in SERVERS:
        rows = steady_requests(RUN11, server)
        assert len(rows) == 5 and (rows.decode_n == 64).all(), server


VMS_DIFFER = (
    "run11c's host record comes from another VM and predates the recorded copy rate, so the uploads are priced at the "
    "fitted staging rate; VMs of this kind differ: with run11's routing exactly, run12's servers ran 18-28 % slower "
    "and run12b's 18-27 % faster than run11's (sample_data/groundtruth/run12), and a record from the servers' own VM "
    "(run12, tests/speed/test_run12_speed.py) is what predicts them"
)
UPLOADS_AT_38 = "at a 38 % hit rate most of a token's experts are uploaded: " + VMS_DIFFER
PROMPT_AT_90 = (
    "the prompt's uploads are priced at the slots' share of the pool (0.749) where the steady prompts find 0.775 of "
    "their experts pooled (12 % fewer uploads: tests/speed/test_run12_speed.py); and " + VMS_DIFFER
)


@pytest.mark.parametrize(
    ("server", "kind"),
    [
        ("off", "decode"),  # +6 % (with run11's own slowed record, host.json: -50 %)
        ("off", "prompt"),  # -8 %
        pytest.param("c2092", "decode", marks=pytest.mark.xfail(strict=True, reason=UPLOADS_AT_38 + ": -18 %")),
        ("c2092", "prompt"),  # -13 %
        ("c4185", "decode"),  # -9 %
        ("c4185", "prompt"),  # -10 %
        ("c6278", "decode"),  # -9 %
        pytest.param("c6278", "prompt", marks=pytest.mark.xfail(strict=True, reason=PROMPT_AT_90 + ": -21 %")),
    ],
)
def test_run11s_speed_from_the_cpu_recording_alone_is_within_15_percent(recorded, server, kind):
    predicted, measured = speeds(recorded, server)[kind]
    assert abs(predicted / measured - 1) <= WITHIN, (server, kind, predicted, measured)


def test_run11s_own_host_record_was_slowed_by_sleeping_openmp_threads():
    """The record of the bug, kept as measured: run11's host record and run11c's with the old policy decode ~2.5x
    slower than run11c's with llama.cpp's own; the routing they replay is the same."""
    decode = {name: read_host_record(RUN11 / path).decode_tps for name, path in HOST_RECORDS.items()}
    assert decode["run11"] == pytest.approx(decode["passive"], rel=0.1)
    assert decode["default"] > 2 * decode["passive"]
