"""One core's copy rate of a model file's mmap'd bytes (the host half of a pageable upload)."""

from __future__ import annotations

import numpy as np
import pytest

from moe_model.readers.model_spec import load_model
from moe_model.record.copy_rate import copy_gbs, expert_slice_bytes
from moe_model.resources import data_path


def test_a_file_is_copied_at_a_finite_positive_rate(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes())
    rate = copy_gbs(path, 1 << 20, sample_bytes=8 << 20)
    assert rate is not None and 0.01 < rate < 2000


def test_a_file_smaller_than_a_page_has_no_rate(tmp_path):
    path = tmp_path / "tiny.bin"
    path.write_bytes(b"x" * 100)
    assert copy_gbs(path, 1 << 20) is None


def test_the_slice_is_one_experts_share_of_one_tensor():
    model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
    slices = [t.expert_bytes for layer in model.layers for t in layer.experts]
    assert expert_slice_bytes(model) == pytest.approx(np.mean(slices), abs=1)
    assert 0.9e6 < expert_slice_bytes(model) < 1.0e6  # run3's model: ~0.95 MB (Qwen3-30B-A3B's expert shape)
