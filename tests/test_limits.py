"""The limits module and the bounds checked where data enters a compiled kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

from moe_model.errors import MoeModelError, WorkloadError
from moe_model.limits import MAX_CONCURRENCY, MAX_DRAFT_TOKENS, MAX_PROMPT_TOKENS, check_at_most
from moe_model.llama.simulate import simulate
from moe_model.llama.slot_plan import plan_cache
from moe_model.policies import cpu_share
from moe_model.policies.stepper import steps
from moe_model.readers.model_spec import uniform_spec
from moe_model.speed.scenario import Scenario
from moe_model.workload import PHASE_DECODE, Workload

MODEL = uniform_spec(2, 8, 2)


def hand_made(ids, ntok=(1, 1)) -> Workload:
    """A workload built directly, bypassing the loaders' checks (what a library caller can do)."""
    n = len(ntok)
    ntok = np.array(ntok, dtype=np.int32)
    off = np.concatenate([[0], np.cumsum(ntok.astype(np.int64) * 2)[:-1]])
    return Workload(
        2,
        8,
        2,
        np.zeros(n, np.int64),
        np.arange(n, dtype=np.int32) % 2,
        ntok,
        off,
        np.full(n, PHASE_DECODE, np.int8),
        np.array(ids, dtype=np.int32),
        1,
    )


def test_check_at_most_names_the_limit_and_refuses_negatives():
    check_at_most(5, 5, "x")  # positive control
    with pytest.raises(MoeModelError, match="layers is 6, above this tool's limit of 5"):
        check_at_most(6, 5, "layers")
    with pytest.raises(WorkloadError, match="layers is -1: it cannot be negative"):
        check_at_most(-1, 5, "layers", WorkloadError)


@pytest.mark.parametrize(
    ("ids", "ntok", "message"),
    [
        ([0, 1, -25536, 3], (1, 1), "expert ids -25536..3 outside 0..7"),  # an int16-wrapped 40000
        ([0, 1, 2, 3], (1, 5), "records that reach outside"),
    ],
)
def test_every_compiled_pass_refuses_out_of_range_input_instead_of_writing_out_of_bounds(ids, ntok, message):
    good = hand_made([0, 1, 2, 3])
    assert simulate(MODEL, good, 100).small.lookups == 4  # positive control
    bad = hand_made(ids, ntok)
    with pytest.raises(WorkloadError, match=message):
        simulate(MODEL, bad, 100)
    with pytest.raises(WorkloadError, match=message):
        cpu_share.run(MODEL, bad, [100], share=0.5)
    with pytest.raises(WorkloadError, match=message):
        steps(bad, plan_cache(MODEL, 100), MODEL.n_expert)


DRAFT_FLAG = "--draft (llama-server --spec-draft-n-max)"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"concurrency": 1_000_000},
            f"--concurrency (llama-server -np) must be in 1..{MAX_CONCURRENCY:,}, got 1,000,000",
        ),
        ({"draft_tokens": 10_000}, f"{DRAFT_FLAG} must be in 0..{MAX_DRAFT_TOKENS:,}, got 10,000"),
        ({"prompt_tokens": 10**9}, f"--prompt-tokens must be in 1..{MAX_PROMPT_TOKENS:,}, got 1,000,000,000"),
        ({"accept_rate": 2.0}, "--accept must be in 0.0..1.0, got 2.0"),
    ],
)
def test_a_scenario_beyond_the_limits_is_refused(changes, line):
    Scenario(concurrency=256)  # positive control
    with pytest.raises(MoeModelError, match=re.escape(line)):
        Scenario(**changes)
