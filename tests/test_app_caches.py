"""The app's caches: bounded in entries and age, keyed by the content of every input (issue 12)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import QWEN30B
from gguf import GGMLQuantizationType as T
from streamlit.runtime.caching.cache_data_api import _data_caches

from moe_model.limits import APP_CACHE_TTL_S
from moe_model.llama.batching import build_workload
from moe_model.readers.gguf_writer import header_bytes
from moe_model.readers.model_spec import load_model, uniform_spec
from moe_model.readers.traces import make_token_trace
from ui import cached


def entries(function) -> int:
    """Entries held now by one cached function's in-memory store."""
    name = f"{function.__module__}.{function.__qualname__}"
    caches = [c for per_session in _data_caches._function_caches.values() for c in per_session.values()]
    return sum(len(c.storage._mem_cache) for c in caches if c.display_name == name)


def upload(i: int) -> bytes:
    """A distinct small GGUF header prefix, as a visitor would upload."""
    meta = {
        "general.architecture": "qwen3moe",
        "general.name": f"upload {i}",
        "qwen3moe.block_count": 2,
        "qwen3moe.expert_count": 8,
        "qwen3moe.expert_used_count": 2,
        "qwen3moe.embedding_length": 256,
    }
    tensors = [(f"blk.{il}.ffn_down_exps.weight", T.Q4_K, [256, 64, 8]) for il in range(2)]
    return header_bytes(meta, tensors)


def test_every_app_cache_is_bounded_in_entries_and_age():
    functions = [getattr(cached, name) for name in dir(cached) if hasattr(getattr(cached, name), "clear")]
    functions = [f for f in functions if hasattr(f, "_info")]
    assert len(functions) >= 9
    for function in functions:
        assert function._info.max_entries is not None, function
        assert function._info.ttl == APP_CACHE_TTL_S, function


def test_thirty_distinct_uploads_keep_the_model_cache_bounded():
    cached.cached_model.clear()
    names = {cached.cached_model(upload(i)).name for i in range(30)}
    assert len(names) == 30
    assert entries(cached.cached_model) == cached.cached_model._info.max_entries


def test_a_changed_workload_under_the_same_hand_built_name_misses_the_cache():
    cached.workload_npz.clear()
    rng = np.random.default_rng(0)
    hot = build_workload(make_token_trace(np.tile(np.array([[0, 1], [0, 1]], dtype=np.int16), (200, 1, 1))))
    spread = build_workload(make_token_trace(np.argsort(rng.random((200, 2, 8)), axis=2)[:, :, :2]))
    first, second = cached.workload_npz(hot, "same key"), cached.workload_npz(spread, "same key")
    assert first != second  # keyed by content: the stale workload is not served
    assert cached.workload_npz(hot, "another key") == first


def test_an_edited_preset_file_misses_the_synthetic_cache(tmp_path, monkeypatch):
    presets = tmp_path / "synthetic_presets.json"
    presets.write_text((cached.PRESETS_PATH).read_text())
    monkeypatch.setattr(cached, "PRESETS_PATH", presets)
    model = load_model(QWEN30B)
    calls = []
    monkeypatch.setattr(cached, "_cached_synthetic", lambda *args: calls.append(args[-1]))
    cached.cached_synthetic(model, 1, 0, 0.7)
    presets.write_text(presets.read_text() + "\n")
    cached.cached_synthetic(model, 1, 0, 0.7)
    assert len(set(calls)) == 2  # the preset file's content is part of the key


@pytest.mark.parametrize("n_tokens", [600, 1200])
def test_the_synthetic_cache_key_includes_the_token_count(n_tokens):
    model = uniform_spec(2, 8, 2)
    work = cached.cached_synthetic(model, 1, 0, 0.7, 0, n_tokens)
    assert work.decode_tokens == n_tokens
