"""Drawn routing kept between runs (moe_model.stored): drawn once, read back identical; a damaged file is drawn
again, an unwritable folder skipped, the kept files bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from moe_model import stored as store
from moe_model.routing.synthetic import Knobs, Shape, generate, generate_stored


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "moe-cache-explorer" / "routing"


def kept(name: str, inputs: tuple, draw) -> np.ndarray:
    return store.stored(name, inputs, draw, Path(__file__))  # this file stands for the generator's code


def counted(data: np.ndarray):
    draws = []
    return draws, lambda: draws.append(1) or data.copy()


def test_a_draw_is_kept_and_read_back_identical_without_drawing_again(folder):
    data = np.arange(12, dtype=np.int16).reshape(3, 4)
    draws, draw = counted(data)
    first, second = kept("x", (1, 2), draw), kept("x", (1, 2), draw)
    assert draws == [1] and np.array_equal(first, data) and np.array_equal(second, data) and second.dtype == data.dtype
    kept("x", (1, 3), draw)  # other inputs: another draw
    assert draws == [1, 1] and len(list(folder.glob("*.npz"))) == 2


def test_the_preset_trace_read_back_is_the_generators_trace(folder):
    shape, knobs = Shape(6, 16, 2), Knobs(drift=0.05)
    drawn = generate(shape, knobs, 1100, seed=2)
    for _ in range(2):  # drawn and kept, then read back
        trace = generate_stored(shape, knobs, 1100, seed=2)
        assert np.array_equal(trace.experts, drawn.experts) and np.array_equal(trace.seq_offsets, drawn.seq_offsets)
    assert len(list(folder.glob("trace-*.npz"))) == 1


def test_a_damaged_or_tampered_file_is_drawn_again_and_replaced(folder):
    data = np.arange(100, dtype=np.int16)
    draws, draw = counted(data)
    kept("x", (), draw)
    (path,) = folder.glob("*.npz")
    path.write_bytes(path.read_bytes()[:40])  # cut short
    assert np.array_equal(kept("x", (), draw), data) and draws == [1, 1]
    np.savez(path, data=data + 1, sha256=store._checksum(data))  # its checksum no longer matches
    assert np.array_equal(kept("x", (), draw), data) and draws == [1, 1, 1]
    assert np.array_equal(kept("x", (), draw), data) and draws == [1, 1, 1]  # replaced: read back now


def test_an_unwritable_folder_is_skipped_and_the_draw_still_answered(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # the folder would sit under a file
    draws, draw = counted(np.ones(3))
    assert np.array_equal(kept("x", (), draw), np.ones(3)) and np.array_equal(kept("x", (), draw), np.ones(3))
    assert draws == [1, 1]


def test_the_kept_files_stay_within_their_bound_least_recently_used_dropped_first(folder, monkeypatch):
    monkeypatch.setattr(store, "ROUTING_STORED_BYTES", 3000)
    data = np.zeros(200, dtype=np.int16)  # 400 bytes of data, ~1 kB a file
    for i in range(6):
        kept("x", (i,), lambda: data)
    assert sum(f.stat().st_size for f in folder.glob("*.npz")) <= 3000
    draws, draw = counted(data)
    kept("x", (5,), draw)  # the latest is kept
    kept("x", (0,), draw)  # the first was dropped
    assert draws == [1]
    kept("x", (), lambda: np.zeros(4000))  # larger than the whole bound: not kept
    assert not any(f.stat().st_size > 3000 for f in folder.glob("*.npz"))


def test_a_change_to_the_generators_code_draws_again(folder, tmp_path):
    code = tmp_path / "generator.py"
    code.write_text("def draw(): ...\n")
    draws, draw = counted(np.arange(5))
    store.stored("x", (), draw, code)
    store.stored("x", (), draw, code)
    assert draws == [1]
    code.write_text("def draw(): return 1\n")  # another generator: what it draws may differ
    store.stored("x", (), draw, code)
    assert draws == [1, 1]
