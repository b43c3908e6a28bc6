"""Shared paths and fixtures: every test reads the data bundled in the repository, never a folder outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"  # what a user opens (moe_model/resources.py says which data lives where)
PACKAGE_DATA = ROOT / "moe_model" / "data"  # the package's own tables
GROUNDTRUTH = SAMPLE / "groundtruth"
GT_HEADER = GROUNDTRUTH / "synthetic-qwen3moe-Q4_K_M-header.gguf"
MODELS = SAMPLE / "models"
QWEN30B = MODELS / "Qwen3-30B-A3B-Q4_K_M.gguf"
QWEN235B_SHARD1 = MODELS / "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"
GPT_OSS = MODELS / "gpt-oss-20b-MXFP4.gguf"
MIXTRAL = MODELS / "Mixtral-8x7B-Q4_K_M.gguf"

# budgets of the ground-truth runs (groundtruth/README.md)
GT_BUDGETS = {
    "minany_minus1": 14,
    "minany": 15,
    "minall": 19,
    "b10": 161,
    "b25": 403,
    "b50": 806,
    "full": 1614,
    "np4_b25": 403,
    "short_b25": 403,
}
_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ ")


def gt_log_lines(case: str, pattern: str) -> list[str]:
    """The lines of prog_<case>.log after the last `fitting` trial, matching pattern, prefix stripped."""
    text = (GROUNDTRUTH / "logs" / f"prog_{case}.log").read_text(errors="replace")
    lines = [_LOG_PREFIX.sub("", line) for line in text.splitlines()]
    start = max(i for i, line in enumerate(lines) if "llama_model_loader: loaded meta data" in line)
    return [line for line in lines[start:] if re.search(pattern, line)]


@pytest.fixture(scope="session")
def gt_model():
    from moe_model.readers.model_spec import load_model

    return load_model(GT_HEADER)


@pytest.fixture(scope="session")
def npz_bomb(tmp_path_factory) -> Path:
    """The 768 MB NPZ bomb of issue 31 (trace_cases.write_npz_bomb), written once per test session, never committed."""
    from trace_cases import write_npz_bomb

    return write_npz_bomb(tmp_path_factory.mktemp("bomb") / "bomb.npz")


@pytest.fixture(scope="session")
def qwen30b():
    from moe_model.readers.model_spec import load_model

    return load_model(QWEN30B)


# the longest files first (their --durations in a full run): `--dist loadfile --no-loadscope-reorder` hands files to
# the workers in this order, and a worker whose file has at most two tests left gets the next one too (the 4th and
# 5th here go with the 1st and 3rd), so no long file is left to run alone at the end
LONGEST_FIRST = (
    "browser/test_stories_3_logs.py",
    "app/test_app.py",
    "browser/test_stories_1_2.py",
    "browser/test_story_4.py",
    "test_jupyter.py",
    "app/test_app_across_pages.py",
    "fits/test_calibration.py",
    "answers/test_explore.py",
    "fits/test_machine_fit.py",
    "browser/test_visit_every_page.py",
    "cli/test_cli.py",
)


def pytest_collection_modifyitems(items) -> None:
    """The files of LONGEST_FIRST in its order, then the others in name order (a stable sort keeps each file's
    tests together and in order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].removeprefix("tests/"), len(rank)))


def pytest_sessionstart(session) -> None:
    """Compile the kernels before any test (silently): a CLI test then never sees the first-run notice."""
    from moe_model.warmup import ensure_compiled

    ensure_compiled(lambda line: None)


def run_within(seconds: float, fn, *args):
    """fn(*args) on a thread: its result, or its exception raised here; a failure if it is still running after
    `seconds` (a hang fails the test instead of holding the suite; the thread is left to the caller's cleanup)."""
    import threading

    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as err:  # handed to the test, whatever it is
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
