"""The prompts' drawn routing (llama.batching.kept_routing): drawn once per install, read back identical, and the
schedule's generator left exactly as the draw leaves it, so a workload built from kept rows is the drawn one."""

from __future__ import annotations

import numpy as np
import pytest

from moe_model.llama.batching import build_workload, kept_routing, sample_routing
from moe_model.readers.traces import make_token_trace
from moe_model.workload import Batching


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "moe-cache-explorer" / "routing"


def popularity(n_layer: int = 3, n_expert: int = 16) -> np.ndarray:
    return np.random.default_rng(5).dirichlet(np.ones(n_expert), size=n_layer)


def test_kept_rows_and_the_generator_after_them_equal_a_fresh_draws(folder):
    pop = popularity()
    direct = np.random.default_rng(9)
    rows = sample_routing(pop, 4, 70, direct)
    for _ in range(2):  # drawn and kept, then read back
        kept, rng = kept_routing(pop, 4, 70, seed=9)
        assert np.array_equal(kept, rows) and rng.bit_generator.state == direct.bit_generator.state
    assert len(list(folder.glob("routing_rows-*.npz"))) == 1
    kept_routing(pop, 4, 71, seed=9)  # another length: its own draw
    assert len(list(folder.glob("routing_rows-*.npz"))) == 2


def test_a_workload_with_prompts_built_from_kept_rows_is_the_one_built_from_drawn_rows(folder, monkeypatch):
    experts = np.random.default_rng(1).integers(0, 16, size=(40, 3, 1)).astype(np.int16)
    trace = make_token_trace(np.concatenate([experts, (experts + 1) % 16], axis=2))
    batching = Batching(concurrency=2, prompt_tokens=50, ubatch_size=16)
    drawn = build_workload(trace, batching, 16)
    assert list(folder.glob("routing_rows-*.npz"))
    monkeypatch.setattr("moe_model.llama.batching.sample_routing", None)  # read back, never drawn again
    kept = build_workload(trace, batching, 16)
    for field in ("rec_ubatch", "rec_layer", "rec_ntok", "rec_off", "rec_phase", "ids"):
        assert np.array_equal(getattr(kept, field), getattr(drawn, field)), field
