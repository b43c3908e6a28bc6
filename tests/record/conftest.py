"""Tiny random-weight models of each architecture, written by the project's GGUF writer, and one recording of each
(the router's probabilities read too), shared by the recorder's tests. Without llama-cpp-python they skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_model.record.prompts import Prompt
from moe_model.record.session import Recording, RecordSettings, record
from moe_model.record.tiny_models import ARCHITECTURES, write_tiny_model

PROMPTS = (
    Prompt(text="the quick brown fox jumps over the lazy dog and runs"),  # 50+ tokens: several ubatches
    Prompt(text="of and to"),
)
SETTINGS = RecordSettings(n_predict=6, n_ctx=256, n_batch=32, n_ubatch=16, threads=2, with_probs=True)


@pytest.fixture(scope="session")
def runtime():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    from moe_model.record.runtime import load_runtime

    return load_runtime()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    return {arch: write_tiny_model(folder / f"{arch}.gguf", arch) for arch in ARCHITECTURES}


@pytest.fixture(scope="session")
def recordings(runtime, tiny_models) -> dict[str, Recording]:
    return {arch: record(path, PROMPTS, SETTINGS, runtime=runtime) for arch, path in tiny_models.items()}
