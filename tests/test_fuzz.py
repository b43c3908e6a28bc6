"""Hypothesis fuzzing of every reader of untrusted bytes, and every input a fuzzer ever crashed kept as a regression.

Seeds are real files (a GGUF header, NPZ traces, a server log); mutations flip, cut and splice their bytes.
scripts/fuzz.py runs the same targets under a coverage-guided fuzzer (atheris) with a time budget.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from conftest import GROUNDTRUTH, GT_HEADER, SAMPLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_model.fuzzing import check
from moe_model.llama.batching import build_workload
from moe_model.readers.traces import make_token_trace, save_npz

CORPUS = Path(__file__).parent / "fuzz_corpus"
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


def _npz_bytes(item) -> bytes:
    buf = io.BytesIO()
    save_npz(buf, item)
    return buf.getvalue()


def _seeds() -> dict[str, bytes]:
    trace = make_token_trace(np.random.default_rng(0).integers(0, 8, size=(40, 3, 2)))
    log = (GROUNDTRUTH / "logs" / "server_np4_b25.log").read_bytes()
    return {
        "gguf": GT_HEADER.read_bytes()[:200_000],
        "trace": _npz_bytes(trace),
        "recorded": _npz_bytes(build_workload(trace)),
        "streamed": _npz_bytes(build_workload(trace)),
        "streamed_tokens": _npz_bytes(trace),
        "csv": (SAMPLE / "traces" / "gpt-oss-20b" / "sequences.csv").read_bytes()[:4000],
        "log": log[:20_000],
    }


SEEDS = _seeds()
TARGET_OF = {"gguf": "gguf", "trace": "trace", "recorded": "trace", "streamed": "stream", "streamed_tokens": "stream"}
TARGET_OF |= {"csv": "csv", "log": "log"}


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """The seed with a few bytes overwritten, a slice cut out or repeated, and maybe truncated."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 8))):
        pos = draw(st.integers(0, len(data) - 1))
        data[pos] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        a = draw(st.integers(0, len(data)))
        b = draw(st.integers(a, min(len(data), a + 64)))
        data[a:b] = data[a:b] * draw(st.sampled_from([0, 2, 50]))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@pytest.mark.parametrize("seed", sorted(SEEDS))
@FUZZ
@given(data=st.data())
def test_mutated_real_files_raise_only_one_line_project_errors(seed, data):
    check(TARGET_OF[seed], data.draw(mutated(SEEDS[seed])))


@pytest.mark.parametrize("target", ["gguf", "trace", "stream", "csv", "log"])
@FUZZ
@given(data=st.binary(max_size=4096))
def test_random_bytes_raise_only_one_line_project_errors(target, data):
    check(target, data)


@pytest.mark.parametrize("target", ["gguf", "trace", "stream", "log"])
@FUZZ
@given(data=st.binary(max_size=512))
def test_a_valid_prefix_with_random_bytes_after_it_is_refused_cleanly(target, data):
    zip_magic = b"PK\x03\x04"
    prefix = {"gguf": b"GGUF\x03\x00\x00\x00", "trace": zip_magic, "stream": zip_magic, "log": b"build: 1 (abc)\n"}
    check(target, prefix[target] + data)


@pytest.mark.parametrize(
    "path", sorted(CORPUS.glob("*/*")), ids=lambda p: f"{p.parent.name}/{p.name}" if isinstance(p, Path) else p
)
def test_every_input_a_fuzzer_crashed_stays_fixed(path):
    check(path.parent.name, path.read_bytes())
