"""Whole GGUF files from the project's writer: the gguf library reads back every tensor's data, aligned."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader

from moe_model.readers.gguf_writer import gguf_bytes


def test_tensor_data_reads_back_at_aligned_offsets_in_ggml_order(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {
        "a.weight": rng.standard_normal((3, 5)).astype(np.float32),
        "b.weight": rng.standard_normal((7,)).astype(np.float16),
        "c.weight": rng.standard_normal((2, 3, 4)).astype(np.float32),
    }
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes({"general.architecture": "test"}, tensors))
    reader = GGUFReader(path)
    assert [t.name for t in reader.tensors] == list(tensors)
    for t in reader.tensors:
        assert t.data_offset % 32 == 0
        assert list(t.shape) == list(tensors[t.name].shape[::-1])  # ggml's ne: the numpy shape reversed
        assert np.array_equal(np.asarray(t.data).reshape(tensors[t.name].shape), tensors[t.name])


def test_only_float32_and_float16_data_is_written():
    with pytest.raises(TypeError, match="float32 or float16"):
        gguf_bytes({}, {"x": np.zeros(4, dtype=np.int8)})
