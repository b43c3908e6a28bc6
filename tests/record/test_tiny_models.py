"""The tiny random-weight models: each architecture's header read by the project's reader, a few MB each."""

from __future__ import annotations

import pytest

from moe_model.readers.model_spec import load_model
from moe_model.record.runtime import RecordError
from moe_model.record.tiny_models import ARCHITECTURES, TinyShape, tiny_model_bytes, write_tiny_model

MOE_LAYERS = {"qwen3moe": (0, 1, 2), "gpt-oss": (0, 1, 2), "deepseek2": (1, 2)}  # deepseek2: one dense lead layer


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_each_architecture_is_a_small_moe_model_the_reader_reads(tmp_path, arch):
    path = write_tiny_model(tmp_path / "m.gguf", arch)
    spec = load_model(path)
    shape = TinyShape()
    assert (spec.architecture, spec.n_expert, spec.n_expert_used) == (arch, shape.n_expert, shape.n_expert_used)
    assert spec.moe_layers == MOE_LAYERS[arch] and path.stat().st_size < 4 * 1024 * 1024


def test_the_same_seed_makes_the_same_model_and_another_seed_another():
    assert tiny_model_bytes("qwen3moe", seed=1) == tiny_model_bytes("qwen3moe", seed=1)
    assert tiny_model_bytes("qwen3moe", seed=1) != tiny_model_bytes("qwen3moe", seed=2)


def test_an_architecture_without_a_tiny_model_is_one_line():
    with pytest.raises(RecordError, match="no tiny model of 'mixtral'"):
        tiny_model_bytes("mixtral")
